"""Prediction REST API: routes on a real (small) registry, errors, security, hot reload."""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
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
from netutil import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]
PAIR = {"a_workload": "bert-template", "b_workload": "resnet50-template", "sharing": "mps"}


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Path:
    """Every kind published by the training pipeline on a small synthetic cluster (~15 s)."""
    from training import sources
    from training.pipeline import TrainConfig, run

    reg = tmp_path_factory.mktemp("reg") / "registry"
    res = run(sources.synthetic(seed=0, days=2.5, nodes=2), str(reg),
              TrainConfig(holdout=pd.Timedelta("18h"), n_estimators=40, threads=1,
                          demand_freq="1h", demand_horizon=3))
    assert {k.kind: k.status for k in res.kinds}["interference"] == "published"
    return reg


@pytest.fixture()
def reg_copy(registry, tmp_path) -> Path:
    dst = tmp_path / "registry"
    shutil.copytree(registry, dst)
    return dst


class _Insecure:
    """httpx calls with certificate verification off (self-signed test certificate)."""

    def __getattr__(self, name: str):
        fn = getattr(httpx, name)
        return (lambda *a, **kw: fn(*a, verify=False, **kw)) if name in ("get", "post") else fn


def _client(reg: Path | None, **kw) -> tuple[TestClient, ModelStore]:
    store = ModelStore(str(reg) if reg else None)
    store.refresh()
    return TestClient(create_api(store, **kw)), store


def _republish(reg: Path, kind: str) -> str:
    """Publish the current model files again as a new version (a real pointer move)."""
    r = Registry(reg)
    src, body = r.fetch(kind)
    fields = {k: body[k] for k in ("features", "training_window", "data_hash", "metrics",
                                   "code_version")}
    return r.publish(kind, src, fields)


def test_interference_batch_is_one_vectorized_predict_matching_the_model(registry):
    client, store = _client(registry)
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
    client, store = _client(registry)
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
    client, _ = _client(registry)
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
    client, _ = _client(registry)
    r = client.post("/v1/interference", json={"pairs": pairs})
    assert r.status_code == 422
    assert r.json()["error"].startswith(field), r.json()["error"]


def test_missing_models_are_503_with_a_reason(tmp_path):
    client, _ = _client(tmp_path / "empty")
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
    client, store = _client(registry)
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
    miss = client.get("/v1/fingerprints/nope")
    assert miss.status_code == 404 and "bert-template" in miss.json()["detail"]["known"]
    assert client.post("/v1/fingerprint", json={"gpu_request": -1}).json()["error"] \
        .startswith("gpu_request")


def test_demand_from_a_posted_series_and_from_the_server_file(registry, tmp_path):
    from serving.demand import DemandService

    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    rows = [{"unique_id": q, "ds": d.isoformat(), "y": float((i % 24) * k)}
            for q, k in (("dev", 1.0), ("research", 0.3)) for i, d in enumerate(ds)]
    client, _ = _client(registry)
    r = client.post("/v1/demand", json={"series": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["horizon"] == "3h" and {f["queue"] for f in body["forecasts"]} == {"dev", "research"}
    for f in body["forecasts"]:
        assert 0 <= f["p10"] <= f["p50"] <= f["p90"]
        assert f["origin"].startswith("2026-01-04T00:00")  # the bin after the last one
    bad = client.post("/v1/demand?horizon=5h", json={"series": rows})
    assert bad.status_code == 422 and bad.json()["error"].startswith("horizon")
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
    client, store = _client(registry)
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


def test_token_and_body_limit(registry):
    client, _ = _client(registry, settings=Settings(token="s3cret", max_body_bytes=20_000))
    assert client.get("/healthz").status_code == 200
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).status_code == 401
    bad = client.post("/v1/interference", json={"pairs": [PAIR]},
                      headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    auth = {"Authorization": "Bearer s3cret"}
    assert client.post("/v1/interference", json={"pairs": [PAIR]}, headers=auth).status_code == 200
    big = client.post("/v1/interference", json={"pairs": [PAIR] * 400}, headers=auth)
    assert big.status_code == 413


def test_hot_reload_swaps_and_refuses_a_broken_version(reg_copy):
    client, store = _client(reg_copy)
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).json()["model_version"] == "1"
    v2 = _republish(reg_copy, "interference")
    assert store.refresh()["interference"] == f"loaded {v2}"
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).json()["model_version"] == v2
    # v3: a model file whose bytes are not the ones its manifest lists
    v3 = _republish(reg_copy, "interference")
    model_dir = reg_copy / "models" / "interference" / v3 / "model"
    (model_dir / "point.txt").write_text("tree\n")
    assert store.refresh()["interference"].startswith(f"refused {v3}")
    r = client.post("/v1/interference", json={"pairs": [PAIR]})
    assert r.status_code == 200 and r.json()["model_version"] == v2  # the old one keeps serving
    ready = client.get("/readyz").json()["models"]["interference"]
    assert ready["version"] == v2 and f"version {v3} refused" in ready["error"]
    prom = client.get("/metrics").text
    assert 'foresight_api_model_refused{kind="interference"} 1.0' in prom
    assert 'foresight_api_model_version{kind="interference"} %s' % float(v2) in prom


def test_swap_under_concurrent_load_drops_no_request(reg_copy):
    import uvicorn

    store = ModelStore(str(reg_copy))
    store.refresh()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_api(store), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 10
    while not server.started:
        assert time.time() < deadline
        time.sleep(0.02)
    results: list[tuple[int, str]] = []
    stop = threading.Event()

    def fire() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            while not stop.is_set():
                r = c.post("/v1/interference", json={"pairs": [PAIR] * 20})
                results.append((r.status_code, r.json().get("model_version", "")))

    workers = [threading.Thread(target=fire) for _ in range(4)]
    try:
        for w in workers:
            w.start()
        swapped = []
        for _ in range(3):  # three swaps while requests are in flight
            time.sleep(0.4)
            v = _republish(reg_copy, "interference")
            assert store.refresh()["interference"] == f"loaded {v}"
            swapped.append(v)
        time.sleep(0.4)
    finally:
        stop.set()
        for w in workers:
            w.join(10)
        server.should_exit = True
    codes = [c for c, _ in results]
    assert len(codes) > 20 and set(codes) == {200}, set(codes)
    assert {"1", swapped[-1]} <= {v for _, v in results}  # served old and new versions


def test_import_does_no_model_work():
    code = ("import sys, serving.app, serving.store, artifacts.adapters;"
            "assert 'lightgbm' not in sys.modules, 'lightgbm imported';"
            "from serving.store import ModelStore; s = ModelStore('/nonexistent');"
            "assert s.models == {}")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cli_only_api_serves_the_api_alone(registry, tmp_path):
    port = free_port()
    tok = tmp_path / "token"
    tok.write_text("abc\n")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: cannot make a test certificate")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", "--only", "api",
                             "--registry", str(registry), "--port", str(port), "--host",
                             "127.0.0.1", "--token-file", str(tok), "--log-level", "warning",
                             "--tls-cert", str(cert), "--tls-key", str(key)], cwd=ROOT)
    url = f"https://127.0.0.1:{port}"
    httpx = _Insecure()  # the self-signed certificate: TLS on, verification off
    try:
        wait_ready(httpx.get, url + "/readyz", proc, transport_error=httpx.TransportError)
        h = {"Authorization": "Bearer abc"}
        assert httpx.post(url + "/v1/interference", json={"pairs": [PAIR]},
                          headers=h).status_code == 200
        assert httpx.post(url + "/scheduler/filter", content=b"{}").status_code == 404
        assert httpx.get(url + "/docs").status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_batcher_merges_concurrent_requests_and_isolates_a_bad_one():
    from foresight.errors import ForesightError
    from serving.batcher import MicroBatcher

    class Slow:
        def predict(self, df):
            time.sleep(0.05)
            if (df.get("a_workload") == "bad").any():
                raise ForesightError("bad row")
            v = df["a_sm_active"].to_numpy()
            return pd.DataFrame({"a_speed_pred": v, "b_speed_pred": v, "a_speed_p10": v,
                                 "b_speed_p10": v})

    b, model, out = MicroBatcher(), Slow(), {}

    def ask(i: int) -> None:
        w = "bad" if i == 3 else "ok"
        try:
            out[i] = b.predict(model, [{"a_workload": w, "b_workload": "x",
                                        "a_sm_active": i / 100}])["a_speed_pred"].tolist()
        except ForesightError as exc:
            out[i] = str(exc)

    def run(ids) -> None:
        threads = [threading.Thread(target=ask, args=(i,)) for i in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)

    run([i for i in range(12) if i != 3])
    assert all(out[i] == [i / 100] for i in range(12) if i != 3)  # each got its own rows
    assert b.calls < 11  # merged: fewer predict calls than the 11 requests
    run([3, 4, 5])  # a failing request, merged or not, fails alone
    assert out[3] == "bad row" and out[4] == [0.04] and out[5] == [0.05]


def test_fingerprint_bound_follows_the_batch_size(registry):
    client, _ = _client(registry)
    sizes = [1, 1024]
    bounds = [client.post("/v1/fingerprint", json={"workload": "resnet50-template",
                                                   "batch_size": b}).json() for b in sizes]
    assert all(b["source"] == "key" for b in bounds)
    assert bounds[1]["peak_fb_p50_mib"] > bounds[0]["peak_fb_p50_mib"]
    bad = client.post("/v1/fingerprint", json={"batch_size": 0})
    assert bad.status_code == 422 and bad.json()["error"].startswith("batch_size")
