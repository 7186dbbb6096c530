"""The extender's verbs as plain Python: filter, prioritize, bind over shared state.

The HTTP layer (scheduler_hook.app) only parses, calls these and serializes; the latency
bench calls them directly for the in-process figure.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import numpy as np
import orjson

from scheduler_hook import metrics, topology
from scheduler_hook.engine import Scorer
from scheduler_hook.explain import ExplanationStore
from scheduler_hook.podspec import GPU_INDEX_ANNOTATION, PodRequest, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import BindingArgs, ExtenderArgs, filter_result

log = logging.getLogger("foresight.extender")
_TENS = np.array([ord(" ")] * 10 + [ord("1")], np.uint8)  # score -> first byte of its slot
_ONES = np.array([ord("0") + s % 10 for s in range(11)], np.uint8)


class ExtenderHook:
    def __init__(self, state: ClusterState, providers: ProviderSet, cfg: dict[str, Any],
                 core_api: Any = None) -> None:
        self.state, self.providers, self.cfg = state, providers, cfg
        self.scorer = Scorer(state, providers, cfg)
        topology.configure(state, cfg)  # the levels the indicators count domains of
        self.explanations = ExplanationStore(int(cfg.get("explain_keep", 256)))
        self.core_api = core_api  # kubernetes.client.CoreV1Api, needed only by bind
        self.workload_labels = tuple(cfg.get("workload_labels") or ())
        self._templates: dict[int, tuple[list[str], np.ndarray, np.ndarray]] = {}
        self._pieces, self._piece_len = np.zeros(0, object), np.zeros(0, np.int64)
        self._pieces_version = -1
        self._last_pod: tuple[dict, PodRequest] | None = None
        # pending pods as the watch parsed them, by (uid, resourceVersion): kube-scheduler
        # sends the version its informer holds, which the watch has usually parsed already
        # (ClusterWatcher.parsed); one resourceVersion is one content, so this is exact
        self.watched_pods: dict[tuple[Any, Any], PodRequest] = {}
        self._answered: deque[str] = deque(maxlen=8)  # pods whose binding may not be seen yet
        # off by default: under a real kube-scheduler on 2 shared cores it shortened the filter
        # answer (3.4 vs 4.4 ms at 1,000 nodes) but cost 1.5 ms CPU per pod while
        # kube-scheduler ran its own cycle, and the pod took longer overall
        # (bench/results/scheduler_overhead.md); `warm_ahead: true` where the extender has
        # a core to itself
        self.warm_ahead = bool(cfg.get("warm_ahead", False))
        self._warm_for: str | None = None  # schedulerName of the pods answered

    def pod(self, obj: dict) -> PodRequest:
        last = self._last_pod
        if last is not None and last[0] is obj:  # filter then prioritize share one parsed body
            return last[1]
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        key = (meta.get("uid"), meta.get("resourceVersion")) if isinstance(meta, dict) else ()
        # only strings were kept by the watch; anything else is parse_pod's 400 to give
        pod = self.watched_pods.get(key) if key and isinstance(key[0], str) and \
            isinstance(key[1], str) else None
        if pod is None:
            pod = parse_pod(obj, self.workload_labels) if self.workload_labels else \
                parse_pod(obj)
        self._last_pod = (obj, pod)
        return pod

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """The nodes that break no hard constraint pass (filterVerb: filter)."""
        return self._filter(args, best=False)

    def filter_best(self, args: ExtenderArgs) -> dict[str, Any]:
        """Filter and prioritize in one call (filterVerb: filter-best, no prioritizeVerb):
        only the passing nodes with the highest prioritize score pass. Each extender call is
        a round trip kube-scheduler waits for inside its cycle, and on a busy machine the
        trip costs more than the answer; with one node left kube-scheduler also skips its own
        scoring. Between tied nodes kube-scheduler's own scores still decide, as they do when
        the extender's prioritize adds the same amount to each; where its scores differ by
        more than one extender point (10 x weight) the two-call config could pick a node the
        extender scored lower, this one cannot."""
        return self._filter(args, best=True)

    def _filter(self, args: ExtenderArgs, best: bool) -> dict[str, Any]:
        t0 = time.perf_counter()
        pod = self.pod(args.pod)
        try:
            d = self.scorer.decide(pod, args.names)
        except Exception:  # noqa: BLE001 - the hook never blocks scheduling because it broke
            log.exception("filter failed for %s; passing every node", pod.key)
            return filter_result(args, list(args.names), {}, {})
        rejected = d.failed.keys() | d.unresolvable.keys()
        if best:
            passed = _top_scored(args.names, d, rejected)
        else:
            passed = [n for n in args.names if n not in rejected] if rejected \
                else list(args.names)  # unknown names pass
        self.explanations.record("filter", d, 1000 * (time.perf_counter() - t0))
        return filter_result(args, passed, d.failed, d.unresolvable)

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        pod = self.pod(args.pod)
        try:
            d = self.scorer.decide(pod, args.names)
        except Exception:  # noqa: BLE001 - prioritize errors are ignored by the scheduler anyway
            log.exception("prioritize failed for %s; scoring nothing", pod.key)
            return []
        self.explanations.record("prioritize", d, 1000 * (time.perf_counter() - t0))
        return [{"Host": n, "Score": s} for n, s in zip(d.names, d.scores.tolist())]

    def prioritize_json(self, args: ExtenderArgs) -> bytes:
        """prioritize() already serialized. The answer for a node list is a fixed byte
        template with a 2-byte score slot per node (`"Score": 7` / `"Score":10`: JSON allows
        the space), joined from per-node pieces rendered once: a repeated 5,000-node answer
        is then two numpy scatters."""
        t0 = time.perf_counter()
        pod = self.pod(args.pod)
        try:
            d = self.scorer.decide(pod, args.names)
        except Exception:  # noqa: BLE001
            log.exception("prioritize failed for %s; scoring nothing", pod.key)
            return b"[]"
        base, pos = self._template(d)
        buf = base.copy()
        buf[pos] = _TENS[d.scores]
        buf[pos + 1] = _ONES[d.scores]
        self.explanations.record("prioritize", d, 1000 * (time.perf_counter() - t0))
        return buf.tobytes()

    def warm_next(self) -> None:
        """Once a filter or prioritize answer is sent: that pod is answered (its binding may
        not have reached the watch yet), so the next warm is for the pod after it."""
        last = self._last_pod
        if last is not None and self.warm_ahead:
            if not self._answered or self._answered[-1] != last[1].key:
                self._answered.append(last[1].key)
            self._warm_for = last[1].scheduler

    def after_events(self) -> None:
        """Called by the watcher after it applied a batch of events (on the event loop,
        between answers). Bring the row cache up to date for the pod kube-scheduler most
        likely asks about next: the first pending GPU pod of the same schedulerName not
        answered yet (highest priority, then oldest, then first seen, as kube-scheduler's
        queue sorts). A binding reaches the watch one or two scheduling cycles after it was
        decided, so waiting for the answered pod's own binding would warm too late; warming
        after every batch catches up each class once per change. Its filter then only
        gathers. A wrong guess costs CPU, never a decision."""
        sched = self._warm_for
        if sched is None:
            return
        done = self._answered
        with self.state.lock:
            nxt = None
            for p in self.state.pending.values():  # first seen first: min keeps the first
                if p.scheduler == sched and p.key not in done and (
                        nxt is None or (-p.priority, p.created) < (-nxt.priority, nxt.created)):
                    nxt = p
        if nxt is None:
            return
        try:
            self.scorer.warm(nxt)
        except Exception:  # noqa: BLE001 - the filter scores it anyway
            log.exception("warming %s failed", nxt.key)

    def _template(self, d: Any) -> tuple[np.ndarray, np.ndarray]:
        """(answer bytes with blank scores, offset of each node's score slot) for d's nodes.

        Each state row's piece `{"Host":"<name>","Score":  }` is rendered once (until rows
        change owner); a node list is a join of pieces, kept while ClusterState.rows hands out
        the same `known` list object (same node list, same index), so identity is exact."""
        hit = self._templates.get(id(d.names))
        if hit is not None and hit[0] is d.names:
            return hit[1], hit[2]
        st = self.state
        with st.lock:
            if self._pieces_version != st.index_version or len(self._pieces) < len(st.names):
                self._pieces = np.full(len(st.names), None, dtype=object)
                self._piece_len = np.zeros(len(st.names), np.int64)
                self._pieces_version = st.index_version
            todo = d.rows[self._piece_len[d.rows] == 0]
            for r in todo.tolist():
                piece = b'{"Host":' + orjson.dumps(st.names[r]) + b',"Score":  }'
                self._pieces[r], self._piece_len[r] = piece, len(piece)
            lens = self._piece_len[d.rows]
            body = b"[" + b",".join(self._pieces[d.rows].tolist()) + b"]"
        start = 1 + np.concatenate([[0], np.cumsum(lens + 1)[:-1]]).astype(np.int64)
        base, pos = np.frombuffer(body, np.uint8).copy(), start + lens - 3
        if len(self._templates) >= 8:
            self._templates.pop(next(iter(self._templates)))
        self._templates[id(d.names)] = (d.names, base, pos)
        return base, pos

    def bind(self, b: BindingArgs) -> dict[str, str]:
        """Choose GPU(s), record them on the pod, create the Binding; {"Error": ...} on failure."""
        if self.core_api is None:
            return {"Error": "bind needs a Kubernetes API connection (not in snapshot mode)"}
        try:
            resp = self.core_api.read_namespaced_pod(b.name, b.namespace, _preload_content=False)
            obj = orjson.loads(resp.data)
            if b.uid and obj.get("metadata", {}).get("uid") not in (None, b.uid):
                return {"Error": f"pod {b.namespace}/{b.name} has another UID than {b.uid}"}
            pod = self.pod(obj)
            gpus = self.scorer.choose_gpus(pod, b.node)
            if pod.gpus and not gpus:
                return {"Error": f"no GPU on {b.node} can take {pod.key} now"}
            if gpus:
                patch = {"metadata": {"annotations": {
                    GPU_INDEX_ANNOTATION: ",".join(str(g) for g in gpus)}}}
                self.core_api.patch_namespaced_pod(b.name, b.namespace, patch,
                                                   _preload_content=False)
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": b.name, "namespace": b.namespace,
                                 **({"uid": b.uid} if b.uid else {})},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": b.node}}
            self.core_api.create_namespaced_pod_binding(b.name, b.namespace, body,
                                                        _preload_content=False)
        except Exception as exc:  # noqa: BLE001 - reported to the scheduler, which retries
            log.warning("bind %s/%s -> %s failed: %s", b.namespace, b.name, b.node, exc)
            return {"Error": f"bind failed: {type(exc).__name__}: {str(exc)[:200]}"}
        # Account for the pod now rather than when the watch event arrives.
        self.state.upsert_pod(PodRequest(**{**pod.__dict__, "node": b.node,
                                            "gpu_index": tuple(gpus), "phase": "Pending"}))
        log.info("bound %s to %s gpus=%s", pod.key, b.node, gpus)
        return {"Error": ""}

    def readiness(self) -> dict[str, Any]:
        prov = self.providers.status()
        fallback = self.providers.fallback
        metrics.FALLBACK.set(1 if fallback else 0)
        for name, st in prov.items():
            metrics.PROVIDER_FRESH.labels(name).set(1 if st["status"] == "fresh" else 0)
        metrics.READY.set(1 if self.state.ready else 0)
        metrics.NODES.set(len(self.state.nodes))
        return {"ready": bool(self.state.ready), "nodes": len(self.state.nodes),
                "pods": len(self.state.pods), "shapes_seen": int(sum(self.state.shape_counts.values())),
                "scoring": "fallback: allocation-based packing (model missing or stale)"
                if fallback else "model-based", "providers": prov}



def _top_scored(names: list[str], d: Any, rejected: Any) -> list[str]:
    """The passing names (input order) whose prioritize score is the highest. A name the
    extender does not know scores 0, as it does in a prioritize answer (kube-scheduler adds
    nothing for a node the answer leaves out), so unknown names pass only when no known node
    scores above 0."""
    ok = np.ones(len(d.names), bool) if not rejected else \
        np.fromiter((n not in rejected for n in d.names), bool, len(d.names))
    top = int(d.scores[ok].max()) if ok.any() else -1
    if d.ignored and top <= 0:  # unknown names tie with the best known ones (or are all left)
        known = set(d.names)
        best = {d.names[i] for i in np.flatnonzero(ok & (d.scores == top))}
        return [n for n in names if n not in rejected and (n not in known or n in best)]
    return [d.names[i] for i in np.flatnonzero(ok & (d.scores == top))]
