"""The extender's verbs as plain Python: filter, prioritize, bind over shared state.

The HTTP layer (scheduler_hook.app) only parses, calls these and serializes; the latency
bench calls them directly for the in-process figure.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import orjson

from scheduler_hook import metrics
from scheduler_hook.engine import Scorer
from scheduler_hook.explain import ExplanationStore
from scheduler_hook.podspec import GPU_INDEX_ANNOTATION, PodRequest, parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import BindingArgs, ExtenderArgs, filter_result

log = logging.getLogger("foresight.extender")


class ExtenderHook:
    def __init__(self, state: ClusterState, providers: ProviderSet, cfg: dict[str, Any],
                 core_api: Any = None) -> None:
        self.state, self.providers, self.cfg = state, providers, cfg
        self.scorer = Scorer(state, providers, cfg)
        self.explanations = ExplanationStore(int(cfg.get("explain_keep", 256)))
        self.core_api = core_api  # kubernetes.client.CoreV1Api, needed only by bind
        self.workload_labels = tuple(cfg.get("workload_labels") or ())
        self._frag_table: np.ndarray | None = None
        self._frag_version = -1
        self._frag_done = np.zeros(0, bool)

    def pod(self, obj: dict) -> PodRequest:
        return parse_pod(obj, self.workload_labels) if self.workload_labels else parse_pod(obj)

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        t0 = time.perf_counter()
        pod = self.pod(args.pod)
        try:
            d = self.scorer.decide(pod, args.names)
        except Exception:  # noqa: BLE001 - the hook never blocks scheduling because it broke
            log.exception("filter failed for %s; passing every node", pod.key)
            return filter_result(args, list(args.names), {}, {})
        rejected = d.failed.keys() | d.unresolvable.keys()
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
        """prioritize() already serialized: per-node answer fragments are rendered once per
        node list (the scheduler repeats it), so a 5,000-node answer is a join, not 5,000 dicts."""
        t0 = time.perf_counter()
        pod = self.pod(args.pod)
        try:
            d = self.scorer.decide(pod, args.names)
        except Exception:  # noqa: BLE001
            log.exception("prioritize failed for %s; scoring nothing", pod.key)
            return b"[]"
        with self.state.lock:
            table = self._fragments(d)
        body = b"[" + b",".join(table[d.rows, d.scores].tolist()) + b"]"
        self.explanations.record("prioritize", d, 1000 * (time.perf_counter() - t0))
        return body

    def _fragments(self, d: Any) -> np.ndarray:
        """(state rows, 11) pre-rendered `{"Host":..,"Score":s}`; rendered once per node."""
        st = self.state
        table = self._frag_table
        if table is None or table.shape[0] < len(st.gpu_count) or \
                self._frag_version != st.index_version:
            table = np.full((len(st.gpu_count), 11), None, dtype=object)
            self._frag_table, self._frag_version = table, st.index_version
            self._frag_done = np.zeros(len(st.gpu_count), bool)
        for r in d.rows[~self._frag_done[d.rows]].tolist():
            host = orjson.dumps(st.names[r])
            table[r] = [b'{"Host":' + host + b',"Score":' + str(s).encode() + b"}"
                        for s in range(11)]
            self._frag_done[r] = True
        return table

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

