"""`foresight serve` against a (fake) cluster through a kubeconfig: list+watch, score, bind."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from scheduler_hook.fake_kube import FakeKubeAPI, make_node, make_pod
from netutil import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def test_serve_watches_the_cluster_scores_and_binds(tmp_path):
    api = FakeKubeAPI().start()
    api.put("nodes", make_node("a", gpus=2))
    api.put("nodes", make_node("b", gpus=2))
    api.put("pods", make_pod("r", gpus=1, node="a", phase="Running"))
    api.put("pods", make_pod("p", fraction=0.5))
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{api.url}"}}}}]
users: [{{name: u, user: {{token: x}}}}]
contexts: [{{name: c, context: {{cluster: fake, user: u}}}}]
current-context: c
""")
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", "--kubeconfig",
                             str(kc), "--port", str(port), "--host", "127.0.0.1",
                             "--log-level", "warning"], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(httpx.get, url + "/readyz", proc, transport_error=httpx.TransportError)
        pod = api.objects["pods"]["default/p"]
        out = httpx.post(url + "/scheduler/prioritize",
                         json={"Pod": pod, "Nodes": None, "NodeNames": ["a", "b"]}).json()
        scores = {h["Host"]: h["Score"] for h in out}
        assert scores["a"] > scores["b"]  # packing onto the node already in use
        bound = httpx.post(url + "/scheduler/bind", json={
            "PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": "a"})
        assert bound.json() == {"Error": ""}
        after = api.objects["pods"]["default/p"]
        assert after["spec"]["nodeName"] == "a"
        assert after["metadata"]["annotations"]["foresight.io/gpu-index"] == "1"  # GPU 0 is taken
        api.put("nodes", make_node("c", gpus=8))
        deadline = time.time() + 10
        while httpx.get(url + "/readyz").json()["nodes"] != 3:
            assert time.time() < deadline, "watch did not deliver the new node"
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
        api.stop()
