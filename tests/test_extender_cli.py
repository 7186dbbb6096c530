"""`foresight serve --only extender --snapshot FILE --port N` as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from scheduler_hook.fake_kube import make_node, make_pod
from netutil import free_port

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "kube-scheduler-1.34"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_serve_snapshot_answers_health_then_scores(tmp_path):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        make_node("gpu-node-1", gpus=8), make_node("gpu-node-2", gpus=8),
        make_pod("r", gpus=4, node="gpu-node-2", phase="Running")]}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", "--only", "extender",
                             "--snapshot", str(snap), "--port", str(port), "--host", "127.0.0.1",
                             "--log-level", "warning"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                health = httpx.get(url + "/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.time() < deadline and proc.poll() is None, proc.stdout.read()
                time.sleep(0.1)
        assert health.json() == {"status": "ok"}
        ready = httpx.get(url + "/readyz").json()
        assert ready["ready"] and ready["nodes"] == 2 and ready["scoring"].startswith("fallback")
        body = (FIX / "extender_args_node_cache.json").read_bytes()
        out = httpx.post(url + "/scheduler/prioritize", content=body).json()
        assert [h["Host"] for h in out] == ["gpu-node-1", "gpu-node-2"]
        assert httpx.post(url + "/scheduler/filter", content=b"{").status_code == 400
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_user_errors_are_one_line(tmp_path):
    r = run_cli("serve", "--only", "bogus", "--snapshot", "x.json")
    assert r.returncode == 2 and "'extender', 'api' or 'all'" in r.stderr \
        and "Traceback" not in r.stderr
    r = run_cli("serve", "--snapshot", str(tmp_path / "missing.json"), "--port", "1")
    assert r.returncode == 2 and "snapshot not found" in r.stderr
    from foresight.cli import main

    assert main(["serve", "--snapshot", str(tmp_path), "--registry", str(tmp_path / "nope")]) == 2
