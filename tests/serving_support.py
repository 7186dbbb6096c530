"""Helpers of the prediction API tests (test_serving.py, test_serving_ops.py)."""
from __future__ import annotations

from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from artifacts.registry import Registry
from serving.app import create_api
from serving.store import ModelStore

ROOT = Path(__file__).resolve().parents[1]
PAIR = {"a_workload": "bert-template", "b_workload": "resnet50-template", "sharing": "mps"}


class Insecure:
    """httpx calls with certificate verification off (self-signed test certificate)."""

    def __getattr__(self, name: str):
        fn = getattr(httpx, name)
        return (lambda *a, **kw: fn(*a, verify=False, **kw)) if name in ("get", "post") else fn


def api_client(reg: Path | None, **kw) -> tuple[TestClient, ModelStore]:
    store = ModelStore(str(reg) if reg else None)
    store.refresh()
    return TestClient(create_api(store, **kw)), store


def republish(reg: Path, kind: str) -> str:
    """Publish the current model files again as a new version (a real pointer move)."""
    r = Registry(reg)
    src, body = r.fetch(kind)
    fields = {k: body[k] for k in ("features", "training_window", "data_hash", "metrics",
                                   "code_version")}
    return r.publish(kind, src, fields)
