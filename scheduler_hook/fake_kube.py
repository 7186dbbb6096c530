"""A loopback HTTP server speaking enough of the Kubernetes API for tests and demos.

Serves `GET /api/v1/nodes` and `GET /api/v1/pods` as Lists with metadata.resourceVersion;
with `?watch=true` it streams newline-delimited `{"type", "object"}` events (chunked, as the
apiserver does) newer than `resourceVersion`, and answers an ERROR event with a 410 Status when
that version was compacted away. `GET/PATCH /api/v1/namespaces/N/pods/P` and
`POST .../pods/P/binding` support the extender's bind verb. No real apiserver is needed.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

KINDS = {"nodes": "Node", "pods": "Pod"}


class FakeKubeAPI:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict]] = {"nodes": {}, "pods": {}}
        self.events: list[tuple[int, str, str, dict]] = []  # (rv, resource, type, object)
        self.rv = 100
        self.compacted_rv = 0  # watches starting at or below this get 410 Gone
        self.cond = threading.Condition()
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, body)
        self.fail_next: list[int] = []  # HTTP codes to return on the next list calls
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "FakeKubeAPI":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- mutations (as a controller would make them) ------------------------------------
    @staticmethod
    def _key(resource: str, obj: dict) -> str:
        m = obj["metadata"]
        return m["name"] if resource == "nodes" else f"{m.get('namespace', 'default')}/{m['name']}"

    def put(self, resource: str, obj: dict) -> None:
        with self.cond:
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("kind", KINDS[resource])
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = self._key(resource, obj)
            kind = "MODIFIED" if key in self.objects[resource] else "ADDED"
            self.objects[resource][key] = obj
            self.events.append((self.rv, resource, kind, obj))
            self.cond.notify_all()

    def delete(self, resource: str, key: str) -> None:
        with self.cond:
            obj = self.objects[resource].pop(key)
            self.rv += 1
            self.events.append((self.rv, resource, "DELETED", obj))
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget history: every open or new watch from an older version gets 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self.events.clear()
            self.cond.notify_all()

    # ---- HTTP -----------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length", 0))
                return json.loads(self.rfile.read(n)) if n else None

            def do_GET(self) -> None:  # noqa: N802
                u = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query).items()}
                api.requests.append(("GET", self.path, None))
                parts = u.path.strip("/").split("/")
                if parts[:2] == ["api", "v1"] and len(parts) == 3 and parts[2] in KINDS:
                    if q.get("watch") in ("true", "1"):
                        return self._watch(parts[2], q)
                    if api.fail_next:
                        return self._send(api.fail_next.pop(0), {"kind": "Status", "code": 500})
                    with api.cond:
                        items = list(api.objects[parts[2]].values())
                        rv = str(api.rv)
                    return self._send(200, {"kind": KINDS[parts[2]] + "List", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": rv}, "items": items})
                if len(parts) == 6 and parts[4] == "pods":
                    obj = api.objects["pods"].get(f"{parts[3]}/{parts[5]}")
                    return self._send(200, obj) if obj else self._send(404, {"kind": "Status",
                                                                             "code": 404})
                self._send(404, {"kind": "Status", "code": 404})

            def _watch(self, resource: str, q: dict[str, str]) -> None:
                since = int(q.get("resourceVersion") or 0)
                deadline = time.time() + float(q.get("timeoutSeconds") or 30)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def chunk(obj: Any) -> None:
                    line = json.dumps(obj).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()

                try:
                    while time.time() < deadline:
                        with api.cond:
                            if since < api.compacted_rv:
                                chunk({"type": "ERROR", "object": {
                                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "message": f"too old resource version: {since}",
                                    "reason": "Expired", "code": 410}})
                                break
                            new = [e for e in api.events if e[0] > since and e[1] == resource]
                            if not new:
                                api.cond.wait(timeout=0.2)
                                continue
                        for rv, _, kind, obj in new:
                            chunk({"type": kind, "object": obj})
                            since = rv
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_PATCH(self) -> None:  # noqa: N802
                body = self._body()
                api.requests.append(("PATCH", self.path, body))
                parts = urlparse(self.path).path.strip("/").split("/")
                key = f"{parts[3]}/{parts[5]}"
                obj = api.objects["pods"].get(key)
                if obj is None:
                    return self._send(404, {"kind": "Status", "code": 404})
                ann = (body or {}).get("metadata", {}).get("annotations", {})
                obj["metadata"].setdefault("annotations", {}).update(ann)
                api.put("pods", obj)
                self._send(200, api.objects["pods"][key])

            def do_POST(self) -> None:  # noqa: N802
                body = self._body()
                api.requests.append(("POST", self.path, body))
                parts = urlparse(self.path).path.strip("/").split("/")
                if len(parts) == 7 and parts[6] == "binding":
                    key = f"{parts[3]}/{parts[5]}"
                    obj = api.objects["pods"].get(key)
                    if obj is None:
                        return self._send(404, {"kind": "Status", "code": 404})
                    obj.setdefault("spec", {})["nodeName"] = body["target"]["name"]
                    api.put("pods", obj)
                    return self._send(201, {"kind": "Status", "status": "Success", "code": 201})
                self._send(404, {"kind": "Status", "code": 404})

        return Handler


def make_node(name: str, gpus: int = 8, gpu_mem_mib: int = 81920, product: str = "NVIDIA-H100",
              labels: dict | None = None, annotations: dict | None = None,
              unschedulable: bool = False) -> dict:
    """A v1.Node as kube-apiserver returns it, with GPU feature-discovery labels."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                               "nvidia.com/gpu.product": product,
                                               "nvidia.com/gpu.memory": str(gpu_mem_mib),
                                               **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)},
                   "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def make_pod(name: str, namespace: str = "default", gpus: int = 0, fraction: float | None = None,
             gpu_memory_mib: float | None = None, node: str = "", workload: str = "",
             phase: str = "Pending", priority: int = 0, annotations: dict | None = None) -> dict:
    """A v1.Pod asking whole GPUs (`gpus`) or a KAI share (`fraction` / `gpu_memory_mib`)."""
    ann = dict(annotations or {})
    if fraction is not None:
        ann["gpu-fraction"] = str(fraction)
    if gpu_memory_mib is not None:
        ann["gpu-memory"] = str(gpu_memory_mib)
    res = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}} \
        if gpus else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "labels": {"foresight.io/workload": workload} if workload else {},
                     "annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": res}],
                 "nodeName": node or None, "priority": priority,
                 "schedulerName": "foresight-scheduler"},
        "status": {"phase": phase},
    }
