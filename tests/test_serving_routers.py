"""The API's structure: one APIRouter per resource, module-level, reading the app's objects as
FastAPI dependencies (serving.deps), so that one can be swapped with dependency_overrides."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.testclient import TestClient

from serving import deps
from serving.app import create_api
from serving.store import ModelStore

RESOURCES = ("ops", "interference", "fingerprint", "demand", "score", "mig", "usage", "runtime")


def test_every_resource_is_a_module_level_router_and_create_api_holds_no_route():
    import importlib

    paths = set()
    for name in RESOURCES:
        r = importlib.import_module(f"serving.{name}").router
        assert isinstance(r, APIRouter) and r.routes, name
        for route in r.routes:
            assert route.endpoint.__module__ == f"serving.{name}"  # not a closure elsewhere
            assert "<locals>" not in route.endpoint.__qualname__, route.path
            paths.add(route.path.replace(":path}", "}"))  # the doc drops converters
    schema = create_api(ModelStore(None)).openapi()["paths"]
    assert set(schema) == paths  # every documented route comes from a resource router


def test_the_store_is_a_dependency_a_test_can_override():
    empty = ModelStore(None)
    app = create_api(empty)
    c = TestClient(app)
    r = c.post("/v1/runtime", json={"pods": [{"workload": "w"}]})
    assert r.status_code == 503 and "runtime model unavailable" in r.json()["error"]

    class Model:
        def predict(self, pods):
            import pandas as pd

            return pd.DataFrame({"p10": [1.0] * len(pods), "p50": [2.0] * len(pods),
                                 "p90": [3.0] * len(pods), "level": "workload",
                                 "model": "model"})

    class Loaded:
        model, version = Model(), "7"

    class Store:
        def get(self, kind):
            return Loaded() if kind == "runtime" else None

    async def store():
        return Store()

    app.dependency_overrides[deps.get_store] = store
    r = c.post("/v1/runtime", json={"pods": [{"workload": "w"}]})
    assert r.status_code == 200
    assert r.json()["model_version"] == "7" and r.json()["predictions"][0]["p50"] == 2.0
