"""Prediction REST API operations: token and body limit, hot reload, swaps under load, a
light import, the API served alone over TLS, the batcher."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pandas as pd
import pytest

from serving.app import Settings, create_api
from serving.store import ModelStore
from netutil import free_port, wait_ready
from serving_support import PAIR, ROOT, Insecure, api_client, republish


def test_token_and_body_limit(registry):
    client, _ = api_client(registry, settings=Settings(token="s3cret", max_body_bytes=20_000))
    assert client.get("/healthz").status_code == 200
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).status_code == 401
    bad = client.post("/v1/interference", json={"pairs": [PAIR]},
                      headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    auth = {"Authorization": "Bearer s3cret"}
    assert client.post("/v1/interference", json={"pairs": [PAIR]}, headers=auth).status_code == 200
    big = client.post("/v1/interference", json={"pairs": [PAIR] * 400}, headers=auth)
    assert big.status_code == 413
    # chunked: no Content-Length to refuse up front, the bytes received decide (FastAPI would
    # turn the guard's stop into a bare 400 "error parsing the body")
    body = json.dumps({"pairs": [PAIR] * 400}).encode()
    chunked = client.post("/v1/interference", headers={**auth, "Content-Type": "application/json"},
                          content=iter([body[i:i + 4096] for i in range(0, len(body), 4096)]))
    assert chunked.status_code == 413 and "over 20000 bytes" in chunked.json()["error"]


@pytest.mark.parametrize("body, reason", [
    (b'{"pairs": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested too deeply"),
    (b'{"pairs": [' + b"9" * 5000 + b"]}", "digits"),
])
def test_bodies_the_json_parsers_give_up_on_are_a_422_saying_why(registry, body, reason):
    client, _ = api_client(registry)
    r = client.post("/v1/interference", content=body,
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"].startswith("body: not JSON")
    assert reason in r.json()["error"]


def test_hot_reload_swaps_and_refuses_a_broken_version(reg_copy):
    client, store = api_client(reg_copy)
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).json()["model_version"] == "1"
    v2 = republish(reg_copy, "interference")
    assert store.refresh()["interference"] == f"loaded {v2}"
    assert client.post("/v1/interference", json={"pairs": [PAIR]}).json()["model_version"] == v2
    # v3: a model file whose bytes are not the ones its manifest lists
    v3 = republish(reg_copy, "interference")
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
            v = republish(reg_copy, "interference")
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
    httpx = Insecure()  # the self-signed certificate: TLS on, verification off
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
    client, _ = api_client(registry)
    sizes = [1, 1024]
    bounds = [client.post("/v1/fingerprint", json={"workload": "resnet50-template",
                                                   "batch_size": b}).json() for b in sizes]
    assert all(b["source"] == "key" for b in bounds)
    assert bounds[1]["peak_fb_p50_mib"] > bounds[0]["peak_fb_p50_mib"]
    bad = client.post("/v1/fingerprint", json={"batch_size": 0})
    assert bad.status_code == 422 and bad.json()["error"].startswith("batch_size")
