"""Live cluster state: list, then watch, nodes and pods with the `kubernetes` client.

One thread per resource. Each lists (the state is replaced for that resource), then watches from
the list's resourceVersion. `410 Gone` (history compacted) means list again at once; any other
error backs off exponentially with jitter. The state is ready only after both first lists.

Watch events are read as raw JSON lines and parsed with orjson: `kubernetes.watch.Watch` would
also turn every event into model objects (json.loads, json.dumps, then V1Pod.from_dict), which
under a real kube-scheduler cost the extender more CPU per pod than scoring it, on the same GIL
as the answers.
"""
from __future__ import annotations

import gc
import logging
import random
import threading
from typing import Any, Callable, Iterator

import orjson
from kubernetes.client.rest import ApiException

from scheduler_hook.podspec import PodSpecError, parse_pod
from scheduler_hook.state import ClusterState

log = logging.getLogger("foresight.extender.watch")


class ClusterWatcher:
    def __init__(self, state: ClusterState, core_api: Any, watch_timeout_s: int = 300,
                 backoff_s: float = 0.5, backoff_max_s: float = 30.0,
                 workload_labels: tuple[str, ...] | None = None) -> None:
        self.state, self.api = state, core_api
        self.watch_timeout_s, self.backoff_s, self.backoff_max_s = (watch_timeout_s, backoff_s,
                                                                    backoff_max_s)
        self.workload_labels = workload_labels
        self.listed = {"nodes": False, "pods": False}
        self.resyncs = {"nodes": 0, "pods": 0}   # lists after the first (410 or errors)
        self.errors = {"nodes": 0, "pods": 0}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(r,), daemon=True,
                                          name=f"watch-{r}") for r in ("nodes", "pods")]

    def start(self) -> "ClusterWatcher":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # each stream ends after its next event or its server-side timeout

    def _list_fn(self, resource: str) -> Callable[..., Any]:
        return self.api.list_node if resource == "nodes" else self.api.list_pod_for_all_namespaces

    def _run(self, resource: str) -> None:
        delay = self.backoff_s
        while not self._stop.is_set():
            try:
                rv = self._list(resource)
                delay = self.backoff_s
                self._watch(resource, rv)
            except ApiException as exc:
                if exc.status == 410:
                    log.info("%s watch expired (410 Gone): listing again", resource)
                    continue
                self._backoff(resource, exc, delay)
                delay = min(2 * delay, self.backoff_max_s)
            except Exception as exc:  # noqa: BLE001 - network trouble of any kind: back off
                self._backoff(resource, exc, delay)
                delay = min(2 * delay, self.backoff_max_s)

    def _backoff(self, resource: str, exc: Exception, delay: float) -> None:
        self.errors[resource] += 1
        log.warning("%s list/watch failed (%s); retrying in %.1fs", resource,
                    str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__, delay)
        self._stop.wait(delay * random.uniform(0.8, 1.2))

    def _list(self, resource: str) -> str:
        resp = self._list_fn(resource)(_preload_content=False)
        doc = orjson.loads(resp.data)
        items = doc.get("items") or []
        if resource == "nodes":
            self.state.replace_nodes(items)
        else:
            self.state.replace_pods(items, self.workload_labels)
        if self.listed[resource]:
            self.resyncs[resource] += 1
        self.listed[resource] = True
        if all(self.listed.values()) and not self.state.ready:
            self.state.ready = True
            gc.freeze()  # the first full lists are long-lived: keep full collections off them
        return str(doc.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, resource: str, rv: str) -> None:
        """Watch until the server ends the stream; then resume from the last version seen."""
        while not self._stop.is_set():
            for event in self._events(resource, rv):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # a Status: 410 Gone when rv was compacted away
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: "
                                       f"{obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                try:
                    self._apply(resource, kind, obj)
                except (PodSpecError, ValueError, KeyError) as exc:
                    log.warning("skipping malformed %s event: %s", resource, exc)
                if self._stop.is_set():
                    return

    def _events(self, resource: str, rv: str) -> Iterator[dict]:
        """The decoded events of one watch request (newline-delimited JSON)."""
        resp = self._list_fn(resource)(watch=True, resource_version=rv,
                                       timeout_seconds=self.watch_timeout_s,
                                       allow_watch_bookmarks=True, _preload_content=False)
        try:
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=resp.reason)
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                if b"\n" not in chunk:
                    continue  # an event split across chunks
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if buf.strip():
                yield orjson.loads(buf)
        finally:
            resp.close()
            resp.release_conn()

    def _apply(self, resource: str, kind: str, obj: dict) -> None:
        if kind == "BOOKMARK":
            return
        meta = obj["metadata"]
        if resource == "nodes":
            if kind == "DELETED":
                self.state.delete_node(meta["name"])
            else:
                self.state.upsert_node(obj)
        elif kind == "DELETED":
            self.state.delete_pod(meta.get("namespace", "default"), meta["name"])
        else:
            pod = parse_pod(obj, self.workload_labels) if self.workload_labels else parse_pod(obj)
            self.state.upsert_pod(pod)
