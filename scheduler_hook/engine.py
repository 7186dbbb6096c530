"""Combine the score components into filter and prioritize decisions for one pod.

Weights come from the config (`weights`, or `fallback_weights` while a model is missing or
stale). Hard violations come only from components that are sure: predicted OOM and SLO breaks
need a fresh model; drained/failed GPUs and a fractional pod with no GPU share left come from
cluster state. A component that raises scores neutral and never rejects a node.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_hook import metrics
from scheduler_hook.podspec import PodRequest
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import ALL
from scheduler_hook.scores.base import ComponentResult, Context, constant
from scheduler_hook.state import ClusterState

log = logging.getLogger("foresight.extender")
ALWAYS_RUN = {"memory_fit", "colocation", "health"}  # they can veto, so filter needs them


@dataclass
class Decision:
    pod: PodRequest
    names: list[str]                 # known input nodes, in input order
    rows: np.ndarray                 # their state rows
    fallback: bool
    weights: dict[str, float]
    results: dict[str, ComponentResult]
    total: np.ndarray                # weighted mean in [0, 1]
    scores: np.ndarray               # integer 0-10
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    ignored: int = 0                 # unknown node names
    mix_source: str = ""
    ts: float = field(default_factory=time.time)

    def explain(self, limit: int | None = None) -> dict[str, Any]:
        order = np.argsort(-self.total, kind="stable")
        if limit is not None:
            order = order[:limit]
        nodes = []
        for j in order:
            name = self.names[j]
            nodes.append({
                "node": name, "score": int(self.scores[j]), "total": round(float(self.total[j]), 4),
                "rejected": self.failed.get(name) or self.unresolvable.get(name),
                "components": {c: {"value": round(float(r.value[j]), 4),
                                   "weight": self.weights.get(c, 0.0), "reason": r.reason(int(j))}
                               for c, r in self.results.items()},
            })
        return {"pod": self.pod.key, "uid": self.pod.uid, "time": self.ts,
                "fallback": self.fallback, "unknown_nodes_ignored": self.ignored,
                "nodes": nodes}


class Scorer:
    def __init__(self, state: ClusterState, providers: ProviderSet, cfg: dict[str, Any]) -> None:
        self.state, self.providers, self.cfg = state, providers, cfg
        self.components = [c() for c in ALL]
        self._last: tuple[Any, ...] | None = None  # filter then prioritize of one pod: one pass

    def decide(self, pod: PodRequest, names: list[str]) -> Decision:
        fallback = self.providers.fallback
        metrics.FALLBACK.set(1 if fallback else 0)
        weights = dict(self.cfg["fallback_weights" if fallback else "weights"])
        with self.state.lock:
            self.state.observe_shape(pod)
            rows, known = self.state.rows(names)
            key = (pod, self.state.version, self.providers.version, fallback)
            last = self._last
            if last is not None and last[0] == key and last[1] is known:
                return last[2]  # same pod, same nodes, nothing changed since: same decision
            ctx = Context(self.state, rows, pod, self.providers, self.cfg)
            results: dict[str, ComponentResult] = {}
            for comp in self.components:
                if weights.get(comp.name, 0.0) <= 0 and comp.name not in ALWAYS_RUN:
                    continue
                try:
                    results[comp.name] = comp.score(ctx)
                except Exception as exc:  # noqa: BLE001 - a model crash must not block scheduling
                    metrics.COMPONENT_ERRORS.labels(comp.name).inc()
                    log.warning("score component %s failed: %s", comp.name, exc)
                    msg = f"component error ({type(exc).__name__}): scored neutral"
                    results[comp.name] = constant(ctx, 0.5, msg)
            total = np.zeros(len(rows))
            wsum = 0.0
            for name, res in results.items():
                w = float(weights.get(name, 0.0))
                if w > 0 and res.informative:  # constants would only squeeze the 0-10 range
                    total += w * res.value
                    wsum += w
            total = total / wsum if wsum > 0 else np.full(len(rows), 0.5)
            failed, unres = self._violations(ctx, results, known)
            mix = ctx.cache.get("shape_mix", (None, ""))[1]
        scores = np.clip(np.rint(10.0 * total), 0, 10).astype(int)
        d = Decision(pod, known, rows, fallback, weights, results, total, scores, failed, unres,
                     len(names) - len(known), mix)
        self._last = (key, known, d)
        return d

    @staticmethod
    def _violations(ctx: Context, results: dict[str, ComponentResult],
                    known: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        failed: dict[str, str] = {}
        unres: dict[str, str] = {}
        for res in results.values():
            if res.violation is None or res.violation_reason is None:
                continue
            target = unres if res.unresolvable else failed
            for j in np.flatnonzero(res.violation):
                target.setdefault(known[j], res.violation_reason(int(j)))
        if ctx.pod.fractional or ctx.pod.milli < 0:  # kube-scheduler cannot see GPU shares
            for j in np.flatnonzero(~ctx.fits.any(axis=1)):
                if known[j] not in unres:
                    failed.setdefault(known[j], f"no GPU with {ctx.need[j]:.0f} milli-GPU free")
        return failed, unres

    def choose_gpus(self, pod: PodRequest, node: str) -> list[int]:
        """GPU indices for `pod` on `node`: for a GPU share the slot whose use raises expected
        fragmentation least; for whole GPUs the first fully free healthy ones. [] = no room."""
        from scheduler_hook.scores.fragmentation import slot_increase

        with self.state.lock:
            rows, known = self.state.rows([node])
            if not known or pod.gpus == 0:
                return []
            ctx = Context(self.state, rows, pod, self.providers, self.cfg)
            if pod.fractional or pod.milli < 0:
                inc = slot_increase(ctx)[0]
                g = int(np.argmin(inc))
                return [g] if np.isfinite(inc[g]) else []
            whole = np.flatnonzero(ctx.usable[0] & (ctx.free[0] >= 1000))
            return [int(x) for x in whole[:pod.gpus]] if len(whole) >= pod.gpus else []
