"""Prediction REST API: routes on a real (small) registry, errors, the extender mounted on it
(security, hot reload, concurrency, the API alone: test_serving_ops.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from serving.app import Settings, create_api
from artifacts.adapters import install
from serving.store import ModelStore
from artifacts.registry import Registry
from serving_support import PAIR, api_client


def test_interference_batch_is_one_vectorized_predict_matching_the_model(registry):
    client, store = api_client(registry)
    model = store.get("interference").model
    calls = []
    orig = model.predict
    model.predict = lambda df: calls.append(len(df)) or orig(df)  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    rows = [{**PAIR, "a_sm_active": float(rng.uniform()), "b_gpu_util": float(rng.uniform(0, 100))}
            for _ in range(300)]
    r = client.post("/v1/interference", json={"pairs": rows})
    assert r.status_code == 200, r.text
    assert calls == [300]  # one predict call for the whole batch
    got = pd.DataFrame(r.json()["predictions"])
    # the model itself needs both sides' column (the API pads the missing twin with NaN)
    want = orig(pd.DataFrame(rows).assign(b_sm_active=np.nan, a_gpu_util=np.nan))
    np.testing.assert_allclose(got[want.columns].to_numpy(), want.to_numpy(), rtol=1e-9)
    assert (got["a_speed_p10"] <= got["a_speed_pred"] + 1e-12).all()
    assert r.json()["model_version"] == "1"
    # small requests (single predictions) go through the version's cache: rows asked before
    # are not predicted again, and answer the same as in the batch
    few = client.post("/v1/interference", json={"pairs": rows[:5]})
    again = client.post("/v1/interference", json={"pairs": rows[:5] + [{**PAIR, "a_sm_active": 2e-3}]})
    assert calls == [300, 5, 1]
    assert again.json()["predictions"][:5] == few.json()["predictions"] == r.json()["predictions"][:5]


def test_batch_with_uneven_rows_predicts_as_the_model_does_on_the_same_table(registry):
    """The API builds the model's table column by column (absent value: NaN; a feature given
    for one side only: its twin all NaN); the answers are the model's on that table."""
    client, store = api_client(registry)
    rng = np.random.default_rng(1)
    rows = []
    for i in range(150):  # above the cached size: the batch path
        r = {**PAIR, "a_sm_active": float(rng.uniform())}
        if i % 3 == 0:
            r["gpu_model"] = "A100"
        if i % 4 == 0:
            r["b_gpu_util"] = float(rng.uniform(0, 100))
        if i % 5 == 0:
            del r["sharing"]
        rows.append(r)
    got = client.post("/v1/interference", json={"pairs": rows})
    assert got.status_code == 200, got.text
    want = store.get("interference").model.predict(
        pd.DataFrame.from_records(rows).assign(b_sm_active=np.nan, a_gpu_util=np.nan))
    np.testing.assert_allclose(pd.DataFrame(got.json()["predictions"])[want.columns].to_numpy(),
                               want.to_numpy(), rtol=1e-12)


def test_a_body_that_is_not_json_is_a_422_saying_so(registry):
    client, _ = api_client(registry)
    for body in (b'{"pairs": [', b"\xff\xfe", b'{"pairs": [1e400]}'):
        r = client.post("/v1/interference", content=body,
                        headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), (body, r.status_code)
        assert r.json()["error"].startswith(("body", "pairs")), r.json()
    r = client.post("/v1/interference", content=b'{"pairs": [', headers={"content-type": "application/json"})
    assert r.json()["error"].startswith("body: not JSON (at character 11")
    for route in ("/v1/interference", "/v1/usage", "/v1/runtime", "/v1/mig/plan"):
        # not UTF-8: FastAPI's own parser would answer a bare 400 no route documents
        r = client.post(route, content=b">\xff,/\xe0_", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"].startswith("body: not JSON"), route
    r = client.post("/v1/mig/plan", json={"custom": 0})  # the schema says boolean
    assert r.status_code == 422 and r.json()["error"].startswith("custom"), r.json()
    r = client.post("/v1/mig/plan", json={"forecast": [{"unique_id": "q|mig:1g.18gb",
                                                          "p90": False}]})  # ... and number
    assert r.status_code == 422 and "p90" in r.json()["error"], r.json()
    r = client.post("/v1/mig/plan", json={"forecast": [{"unique_id": "q|mig:1g.18gb",
                                                          "p90": 2}]})  # an int is a number
    assert r.status_code != 422, r.json()
    r = client.post("/v1/mig/plan", content=b'{"forecast": [{"unique_id": "q|mig:1g.18gb", '
                    b'"p10": NaN, "p90": 2}]}', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "p10" in r.json()["error"], r.json()  # unused, still NaN


@pytest.mark.parametrize("pairs, field", [
    ([{**PAIR, "a_sm_activ": 0.2}], "pairs.0.a_sm_activ"),           # misspelt column
    ([PAIR, {**PAIR, "b_sm_active": 1.5}], "pairs.1.b_sm_active"),  # out of range
    ([{**PAIR, "sharing": "hyper"}], "pairs.0.sharing"),
    ([{"a_workload": "x", "sharing": "mps"}], "pairs.0: side 'b'"),  # side b not described
    ([{**PAIR, "a_speed": 0.9}], "pairs.0.a_speed"),                 # targets are not inputs
    ([PAIR] * 10_001, "pairs:"),                                      # batch limit
    ([], "pairs:"),
])
def test_bad_input_is_422_naming_the_field(registry, pairs, field):
    client, _ = api_client(registry)
    r = client.post("/v1/interference", json={"pairs": pairs})
    assert r.status_code == 422
    assert r.json()["error"].startswith(field), r.json()["error"]


def test_missing_models_are_503_with_a_reason(tmp_path):
    client, _ = api_client(tmp_path / "empty")
    for method, path, body in [("post", "/v1/interference", {"pairs": [PAIR]}),
                               ("post", "/v1/fingerprint", {"workload": "w"}),
                               ("get", "/v1/fingerprints/w", None), ("get", "/v1/demand", None),
                               ("post", "/v1/score", {"pod": make_pod("p", gpus=1),
                                                      "nodes": ["a"]})]:
        r = getattr(client, method)(path, **({"json": body} if body else {}))
        assert r.status_code == 503, (path, r.text)
        assert "unavailable" in r.json()["error"] or "no cluster state" in r.json()["error"]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "no interference model published" in ready.json()["models"]["interference"]["error"]


def test_fingerprint_routes(registry):
    client, store = api_client(registry)
    known = client.post("/v1/fingerprint", json={"workload": "bert-template"}).json()
    assert known["source"] == "key" and known["workload"] == "bert-template"
    assert known["peak_fb_upper_mib"] >= known["peak_fb_p50_mib"] > 0
    assert "phases" in known["fingerprint"] and "example_run" not in known["fingerprint"]
    new = client.post("/v1/fingerprint", json={"image": "registry.example/bert:1.0",
                                               "gpu_request": 1, "queue": "research"}).json()
    assert new["source"] == "model" and new["workload"] in store.get("fingerprint").model \
        .fingerprints.fingerprints_
    one = client.get("/v1/fingerprints/bert-template")
    assert one.status_code == 200 and one.json()["fingerprint"]["runs"] > 0
    by_name = client.get("/v1/fingerprints/bert")  # the pods' workload name: its template
    assert by_name.status_code == 200 and by_name.json()["workload"] == "bert-template"
    assert by_name.json()["fingerprint"] == one.json()["fingerprint"]
    miss = client.get("/v1/fingerprints/nope")
    assert miss.status_code == 404 and "bert-template" in miss.json()["detail"]["known"]
    assert client.post("/v1/fingerprint", json={"gpu_request": -1}).json()["error"] \
        .startswith("gpu_request")


def test_demand_from_a_posted_series_and_from_the_server_file(registry, tmp_path):
    from serving.demand import DemandService

    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    rows = [{"unique_id": q, "ds": d.isoformat(), "y": float((i % 24) * k)}
            for q, k in (("dev", 1.0), ("research", 0.3)) for i, d in enumerate(ds)]
    client, _ = api_client(registry)
    r = client.post("/v1/demand", json={"series": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["horizon"] == "3h" and {f["queue"] for f in body["forecasts"]} == {"dev", "research"}
    for f in body["forecasts"]:
        assert 0 <= f["p10"] <= f["p50"] <= f["p90"]
        assert f["origin"].startswith("2026-01-04T00:00")  # the bin after the last one
    bad = client.post("/v1/demand?horizon=5h", json={"series": rows})
    assert bad.status_code == 422 and bad.json()["error"].startswith("horizon")
    # one time with an offset among naive ones: refused, not shifted by pandas
    mixed = [{**rows[0], "ds": "2026-01-01T02:00:00+02:00"}, *rows[1:]]
    bad = client.post("/v1/demand", json={"series": mixed})
    assert bad.status_code == 422 and "series.ds" in bad.json()["error"] and \
        "mixed" in bad.json()["error"], bad.text
    csv = tmp_path / "demand.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    store = ModelStore(str(registry))
    store.refresh()
    c2 = TestClient(create_api(store, demand=DemandService(csv)))
    got = c2.get("/v1/demand", params={"queue": "dev"}).json()
    assert [f["queue"] for f in got["forecasts"]] == ["dev"]
    assert got["forecasts"][0]["p50"] == pytest.approx(
        [f for f in body["forecasts"] if f["queue"] == "dev"][0]["p50"])
    assert c2.get("/v1/demand", params={"queue": "zzz"}).json()["error"].startswith("queue")


def test_demand_names_the_predictor_of_each_queue(registry):
    """Per queue the response says which predictor made p50: the model, or the baseline it
    fell back to on validation, and then p50 is that baseline's value."""
    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    rows = [{"unique_id": q, "ds": d.isoformat(), "y": float((i % 24) * k)}
            for q, k in (("dev", 1.0), ("research", 0.3)) for i, d in enumerate(ds)]
    client, store = api_client(registry)
    model = store.get("demand").model
    published = dict(model.served_)
    for q, f in ((f["queue"], f) for f in client.post("/v1/demand", json={"series": rows}).json()["forecasts"]):
        assert f["model"] == model.served(q)
    try:
        model.served_ = {"dev": "persistence", "research": "model"}
        got = {f["queue"]: f for f in client.post("/v1/demand", json={"series": rows}).json()["forecasts"]}
    finally:
        model.served_ = published
    assert got["dev"]["model"] == "persistence" and got["research"]["model"] == "model"
    # persistence over a 3-bin horizon: the sum of the last 3 bins of `dev` (21 + 22 + 23)
    assert got["dev"]["p50"] == pytest.approx(66.0)
    assert got["dev"]["p10"] <= 66.0 <= got["dev"]["p90"]


def test_demand_shape_mix_comes_from_the_published_artifact(registry, tmp_path):
    from serving.demand import DemandService
    from training.kinds import demand as kind

    path, manifest = Registry(registry).fetch("demand")
    assert kind.SHAPE_MIX_FILE in manifest["files"]  # checksummed like the model files
    pub = json.loads((path / kind.SHAPE_MIX_FILE).read_text())
    assert pub["arrivals"] > 0 and pub["by_queue"]
    assert sum(x["share"] for x in pub["shapes"]) == pytest.approx(1.0, abs=1e-4)
    assert all(x["gpus"] >= 1 and 0 < x["milli"] <= 1000 for x in pub["shapes"])
    assert pub["as_of"] <= manifest["training_window"]["end"]  # no arrival after the window
    assert 0 <= manifest["metrics"]["shape_mix_tv"] <= 1
    csv = tmp_path / "demand.csv"
    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    pd.DataFrame({"unique_id": "dev", "ds": ds, "y": 1.0}).to_csv(csv, index=False)
    store = ModelStore(str(registry))
    store.refresh()
    client = TestClient(create_api(store, demand=DemandService(csv)))  # no hook: no cluster
    body = client.get("/v1/demand").json()
    assert body["shape_mix"] == pub["shapes"]
    assert body["shape_mix_source"].startswith("forecast published with demand model version")
    q = sorted(pub["by_queue"])[0]
    pd.DataFrame({"unique_id": q, "ds": ds, "y": 1.0}).to_csv(csv, index=False)
    assert client.get("/v1/demand", params={"queue": q}).json()["shape_mix"] == pub["by_queue"][q]
    # a demand version published before the mix was: the mix of pods seen (here: none)
    store.get("demand").model.shape_mix_ = None
    old = client.get("/v1/demand", params={"queue": q}).json()
    assert old["shape_mix"] is None and old["shape_mix_source"].startswith("none")


def _hook_api(registry: Path, pods: list[dict]) -> tuple[TestClient, ExtenderHook]:
    """The API with the extender mounted over two 4-GPU nodes a, b and the registry's models."""
    st = ClusterState()
    for n in ("a", "b"):
        st.upsert_node(make_node(n, gpus=4))
    for p in pods:
        st.upsert_pod(p)
    st.ready = True
    providers = ProviderSet()
    hook = ExtenderHook(st, providers, load_config())
    store = ModelStore(str(registry))
    install(store, providers, 3600)
    store.refresh()
    assert not providers.fallback  # interference and fingerprint adapters are in service
    return TestClient(create_api(store, hook, Settings(extender=True))), hook


def test_score_reuses_the_extender_engine_with_registry_models(registry):
    client, hook = _hook_api(registry, [make_pod("r0", gpus=1, node="a", phase="Running",
                                                 workload="resnet50-template")])
    pod = make_pod("p", gpus=1, workload="bert-template")
    r = client.post("/v1/score", json={"pod": pod, "nodes": ["a", "b", "ghost"]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["scoring"] == "model-based" and out["unknown_nodes_ignored"] == 1
    want = hook.scorer.decide(hook.pod(pod), ["a", "b", "ghost"])
    assert {n["node"]: n["score"] for n in out["nodes"]} == \
        dict(zip(want.names, want.scores.tolist()))
    assert {"memory_fit", "colocation"} <= set(out["nodes"][0]["components"])
    prio = client.post("/scheduler/prioritize", json={"Pod": pod, "NodeNames": ["a", "b"]})
    assert prio.status_code == 200  # the extender verbs are mounted in the same app
    assert client.post("/scheduler/filter", content=b"").status_code == 400  # was a 500
    assert client.post("/v1/score", json={"pod": {"spec": 3}, "nodes": ["a"]}).status_code == 422
    odd = client.post("/v1/score", json={"pod": {**pod, "metadata": {
        **pod["metadata"], "uid": {"a": 1}}}, "nodes": ["a"]})
    assert odd.status_code == 422 and "metadata.uid" in odd.json()["error"]
    new = make_pod("q", gpus=3, workload="never-seen")  # a class no node was scored for yet
    none = client.post("/v1/score", json={"pod": new, "nodes": ["ghost"]})
    assert none.status_code == 200 and none.json()["nodes"] == [], none.text  # was a 503


def test_score_explains_a_repeated_question_once_and_again_after_a_change(registry):
    client, hook = _hook_api(registry, [])
    st = hook.state
    explained = []
    decide = hook.scorer.decide

    def spy(*a, **kw):
        d = decide(*a, **kw)
        orig = d.explain
        d.explain = lambda *x, **y: explained.append(1) or orig(*x, **y)
        return d

    hook.scorer.decide = spy
    ask = {"pod": make_pod("p", gpus=1, workload="bert-template"), "nodes": ["a", "b"]}
    first, second = (client.post("/v1/score", json=ask) for _ in range(2))
    assert first.status_code == 200 and second.content == first.content and len(explained) == 1
    st.upsert_pod(make_pod("r0", gpus=4, node="a", phase="Running", workload="resnet50-template"))
    third = client.post("/v1/score", json=ask).json()  # node a is full now: a new answer
    assert len(explained) == 2 and third["time"] >= first.json()["time"]
    assert {n["node"]: n["score"] for n in third["nodes"]} != \
        {n["node"]: n["score"] for n in first.json()["nodes"]}
