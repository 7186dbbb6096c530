"""`foresight serve --registry R --port N` on a machine with no cluster: the API alone, said so."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from forecaster.interference.model import InterferenceModel
from netutil import start_serve, wait_ready
from test_interference import FAST, make_pairs
from artifacts.registry import Registry

ROOT = Path(__file__).resolve().parents[1]


def _registry(tmp: Path) -> Path:
    """A registry holding one interference model, published as the retraining job does."""
    pairs = make_pairs(n_workloads=8, n_pairs=160, seed=1)
    model_dir = tmp / "model"
    InterferenceModel(**FAST).fit(pairs).save(model_dir)
    reg = tmp / "registry"
    Registry(reg).publish("interference", model_dir, {
        "features": [], "training_window": {}, "data_hash": "test", "code_version": "test",
        "metrics": {"primary": "mae", "mae": 0.01, "baseline_median_mae": 0.02}})
    return reg


def _no_cluster_env(tmp: Path) -> dict[str, str]:
    """A fresh clone's environment: no kubeconfig anywhere, not inside a pod."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KUBERNETES_") and k not in ("KUBECONFIG", "FORESIGHT_API_TOKEN")}
    env.update(HOME=str(tmp / "home"), KUBECONFIG=str(tmp / "home" / "no-such-kubeconfig"))
    return env


def _serve(args: list[str], tmp: Path) -> tuple[subprocess.Popen, str]:
    return start_serve(args, ROOT, env=_no_cluster_env(tmp))


def test_serve_with_no_cluster_serves_the_api_and_says_the_extender_is_off(tmp_path):
    reg = _registry(tmp_path)
    proc, url = _serve(["--registry", str(reg)], tmp_path)
    try:
        wait_ready(httpx.get, url + "/readyz", proc, transport_error=httpx.TransportError)
        ready = httpx.get(url + "/readyz").json()
        assert ready["models"]["interference"]["loaded"]
        r = httpx.post(url + "/v1/interference", json={"pairs": [
            {"a_workload": "w01", "b_workload": "w02", "sharing": "mps"}]})
        assert r.status_code == 200, r.text
        row = r.json()["predictions"][0]
        assert 0 < row["a_speed_pred"] <= 1.5 and row["a_speed_p10"] <= row["a_speed_pred"]
        # the extender verbs are not mounted: nothing pretends to score nodes
        assert httpx.post(url + "/scheduler/prioritize", content=b"{}").status_code == 404
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    lines = out.splitlines()
    off = [ln for ln in lines if ln.startswith("extender off:")]
    assert len(off) == 1 and "no cluster to watch" in off[0], out
    # the default host is every interface and no token was given: a warning says so
    assert any("without authentication" in ln for ln in lines), out
    assert "Traceback" not in out


def test_extender_alone_still_needs_a_cluster(tmp_path):
    proc, _ = _serve(["--only", "extender"], tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no cluster to watch and no --snapshot" in out
    assert "Traceback" not in out


def test_loopback_with_no_token_does_not_warn(tmp_path):
    from foresight.commands.serve import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("10.0.0.5") and not _loopback("node-a")
