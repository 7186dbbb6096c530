"""The extender verbs answered inside uvicorn's HTTP protocol (scheduler_hook.fastproto) give
the bytes the ASGI road gives, keep connections alive, and leave every other request to ASGI."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import uvicorn

from scheduler_hook.app import create_app
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.fastproto import verb_protocol
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from netutil import free_port

FIX = Path(__file__).parent / "fixtures" / "kube-scheduler-1.34"


def _hook() -> ExtenderHook:
    st = ClusterState()
    for i in range(3):
        st.upsert_node(make_node(f"n{i}", gpus=4))
    st.upsert_pod(make_pod("r", gpus=2, node="n1", phase="Running"))
    st.ready = True
    return ExtenderHook(st, ProviderSet(), load_config())


DIRECT: list[str] = []  # verbs the protocol answered itself (the ASGI road never adds here)


def _serve(fast: bool, max_body: int = 16 * 1024 * 1024) -> tuple[uvicorn.Server, int]:
    app = create_app(_hook())
    port = free_port()

    def counted(path: str, handle: Any) -> Any:
        return lambda body: (DIRECT.append(path), handle(body))[1]

    direct = {p: counted(p, h) for p, h in app.verb_handlers.items()}
    cfg: dict[str, Any] = {"http": verb_protocol(direct, max_body)} if fast else {}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", **cfg))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 10
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    return server, port


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, int]]:
    plain, fast, small = _serve(False), _serve(True), _serve(True, max_body=4096)
    yield {"asgi": plain[1], "fast": fast[1], "small": small[1]}
    for server, _ in (plain, fast, small):
        server.should_exit = True


BODIES = [
    ("/scheduler/filter", json.dumps({"Pod": make_pod("p", gpus=4), "Nodes": None,
                                      "NodeNames": ["n0", "n1", "n2", "ghost"]}).encode()),
    ("/scheduler/prioritize", json.dumps({"Pod": make_pod("p", gpus=1), "Nodes": None,
                                          "NodeNames": ["n0", "n1", "n2"]}).encode()),
    ("/scheduler/filter", (FIX / "extender_args_node_cache.json").read_bytes()),
    ("/scheduler/filter", (FIX / "extender_args_full_nodes.json").read_bytes()),
    ("/scheduler/prioritize", b'{"Pod": 3}'),   # malformed: 400 with the reason
    ("/scheduler/filter", b"not json"),
]


def _answers(port: int) -> list[tuple[int, bytes]]:
    """Every body over ONE keep-alive connection, a GET between verbs (the ASGI road)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    out = []
    for path, body in BODIES:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out.append((resp.status, resp.read()))
        assert resp.getheader("content-type") == "application/json"
        conn.request("GET", "/healthz")
        health = conn.getresponse()
        assert (health.status, json.loads(health.read())) == (200, {"status": "ok"})
    conn.close()
    return out


def test_verbs_answer_the_same_bytes_as_through_asgi_on_a_kept_alive_connection(servers):
    DIRECT.clear()
    fast = _answers(servers["fast"])
    assert DIRECT == [p for p, _ in BODIES]
    asgi = _answers(servers["asgi"])
    assert [s for s, _ in fast] == [200, 200, 200, 200, 400, 400]
    assert fast == asgi
    kept = json.loads(fast[0][1])
    assert kept["NodeNames"] == ["n0", "n1", "n2", "ghost"] or "n1" in kept["FailedNodes"]


def _raw(port: int, request: bytes) -> bytes:
    """Send `request` as is; read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_connection_close_and_http10_are_honoured(servers):
    path, body = BODIES[1]
    for version, extra in ((b"HTTP/1.1", b"Connection: close\r\n"), (b"HTTP/1.0", b"")):
        got = _raw(servers["fast"], b"POST " + path.encode() + b" " + version + b"\r\n"
                   b"Host: x\r\nContent-Type: application/json\r\nContent-Length: " +
                   str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)
        head, _, payload = got.partition(b"\r\n\r\n")  # the server closed: recv returned
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
        assert len(payload) == int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert json.loads(payload)[0]["Host"] == "n0"


def test_expect_continue_and_unknown_paths_take_the_asgi_road(servers):
    path, body = BODIES[1]
    DIRECT.clear()
    with socket.create_connection(("127.0.0.1", servers["fast"]), timeout=5) as s:
        s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        assert s.recv(1024).startswith(b"HTTP/1.1 100")  # uvicorn's ASGI cycle says continue
        s.sendall(body)
        data = b""
        while b"]" not in data:
            data += s.recv(65536)
        assert data.startswith(b"HTTP/1.1 200")
    conn = http.client.HTTPConnection("127.0.0.1", servers["fast"], timeout=5)
    conn.request("POST", "/scheduler/nope", b"{}")
    assert conn.getresponse().status in (404, 405)
    assert DIRECT == []


def test_a_body_over_the_limit_is_a_413_on_the_fast_path_and_the_connection_lives(servers):
    path, body = BODIES[1]
    big = json.dumps({"Pod": make_pod("p", gpus=1), "NodeNames": ["n%d" % i
                                                                  for i in range(2000)]})
    conn = http.client.HTTPConnection("127.0.0.1", servers["small"], timeout=5)
    conn.request("POST", path, big.encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 413 and "over 4096 bytes" in json.loads(resp.read())["error"]
    conn.request("POST", path, body, {"Content-Type": "application/json"})  # same connection
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())[0]["Host"] == "n0"
    conn.close()


def test_a_failing_verb_is_a_json_500_naming_it_not_a_dropped_connection():
    from scheduler_hook.app import verb_handlers

    hook = _hook()
    hook.filter = lambda args: 1 / 0  # a bug inside the hook, not the caller's input
    status, payload = verb_handlers(hook)["/scheduler/filter"](BODIES[0][1])
    assert status == 500
    assert json.loads(payload) == {"error": "extender filter failed: ZeroDivisionError"}


def test_the_asgi_road_holds_the_same_body_limit():
    from fastapi.testclient import TestClient

    app = create_app(_hook())
    app.max_body = 4096  # what serve sets from --max-body-mb
    big = json.dumps({"Pod": make_pod("p", gpus=1), "NodeNames": ["n%d" % i for i in range(2000)]})
    with TestClient(app) as client:
        r = client.post("/scheduler/filter", content=big.encode())
        assert r.status_code == 413 and "over 4096 bytes" in r.json()["error"]
        r = client.post("/scheduler/prioritize", content=BODIES[1][1])
        assert r.status_code == 200 and r.json()[0]["Host"] == "n0"
