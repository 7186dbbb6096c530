"""Live cluster state: list, then watch, nodes and pods with the `kubernetes` client.

One thread per resource. Each lists (the state is replaced for that resource), then watches from
the list's resourceVersion. `410 Gone` (history compacted) means list again at once; any other
error backs off exponentially with jitter. The state is ready only after both first lists.

Watch events are read as raw JSON lines and parsed with orjson: `kubernetes.watch.Watch` would
also turn every event into model objects (json.loads, json.dumps, then V1Pod.from_dict), which
under a real kube-scheduler cost the extender more CPU per pod than scoring it, on the same GIL
as the answers.

Once `attach(loop)` hands it the server's event loop, the watch threads only read and decode:
every change to the state (events, lists) runs on the loop thread, in arrival order, between
two answers. Applied from the watch threads, an event arriving while kube-scheduler waited for
a filter took the GIL from the answer every switch interval and then waited on the state lock
the answer held; on the loop it waits for the answer instead, and the answer for it.
"""
from __future__ import annotations

import asyncio
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
PARSED_KEEP = 4096  # unbound pod versions kept for the answers (about 1 KB each)


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self.after_batch: Callable[[], None] | None = None  # ExtenderHook.after_events
        # unbound pods parsed, by (uid, resourceVersion), for the answers to reuse
        # (ExtenderHook.watched_pods); None: not kept
        self.parsed: dict[tuple[Any, Any], Any] | None = None
        self._threads = [threading.Thread(target=self._run, args=(r,), daemon=True,
                                          name=f"watch-{r}") for r in ("nodes", "pods")]

    def start(self) -> "ClusterWatcher":
        for t in self._threads:
            t.start()
        return self

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Apply state changes on `loop` from now on (None: on the watch threads again)."""
        self._loop = loop

    def _on_loop(self, fn: Callable[..., Any], *args: Any, wait: bool = False) -> None:
        """Run fn(*args) on the attached loop (in order with earlier calls), or here when
        none is attached or it has closed. `wait`: return once it has run."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            done = threading.Event() if wait else None

            def run() -> None:
                try:
                    fn(*args)
                finally:
                    if done is not None:
                        done.set()
            try:
                loop.call_soon_threadsafe(run)
            except RuntimeError:  # closed between the check and the call
                pass
            else:
                while done is not None and not done.wait(0.5):
                    if loop.is_closed() or self._stop.is_set():
                        return
                return
        fn(*args)

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
        # on the loop, waited for: events queued before it must not land after it
        if resource == "nodes":
            self._on_loop(self.state.replace_nodes, items, wait=True)
        else:
            self._on_loop(self.state.replace_pods, items, self.workload_labels, wait=True)
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
            for events in self._events(resource, rv):
                batch = []
                for event in events:
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":  # a Status: 410 Gone when rv was compacted away
                        self._on_loop(self._apply_all, resource, batch)
                        raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}"
                                           f": {obj.get('message')}")
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    batch.append((kind, obj))
                self._on_loop(self._apply_all, resource, batch)  # one wake-up per chunk
                if self._stop.is_set():
                    return

    def _apply_all(self, resource: str, batch: list[tuple[str, dict]]) -> None:
        for kind, obj in batch:
            try:
                self._apply(resource, kind, obj)
            except (PodSpecError, ValueError, KeyError) as exc:
                log.warning("skipping malformed %s event: %s", resource, exc)
        if self.after_batch is not None and batch:
            try:
                self.after_batch()
            except Exception:  # noqa: BLE001 - never stop the watch for it
                log.exception("after-events hook failed")

    def _events(self, resource: str, rv: str) -> Iterator[list[dict]]:
        """The decoded events of one watch request (newline-delimited JSON), a list per
        chunk read."""
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
                yield [orjson.loads(line) for line in lines if line.strip()]
            if buf.strip():
                yield [orjson.loads(buf)]
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
            kept = self.parsed
            if kept is not None and not pod.node and meta.get("uid") and \
                    meta.get("resourceVersion"):
                kept[(meta["uid"], meta["resourceVersion"])] = pod
                if len(kept) > PARSED_KEEP:
                    del kept[next(iter(kept))]  # oldest first: dicts keep insertion order
