"""One pod's scoring decision: the nodes asked about, each component's values and reasons, the
weighted total and the 0-10 scores, and what `/v1/explain` says of it (split from
scheduler_hook/engine.py, which makes them and re-exports the class)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scheduler_hook.podspec import PodRequest
from scheduler_hook.scores.base import ComponentResult
from scheduler_hook.scores.mig import request_text


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
    values: dict[str, np.ndarray] = field(default_factory=dict)
    rescore: Callable[[], dict[str, ComponentResult]] | None = None

    def explain(self, limit: int | None = None) -> dict[str, Any]:
        order = np.argsort(-self.total, kind="stable")
        if limit is not None:
            order = order[:limit]
        results = self.results or (self.rescore() if self.rescore else {})
        values = self.values or {n: r.value for n, r in results.items()}
        nodes = []
        for j in order:
            name = self.names[j]
            nodes.append({
                "node": name, "score": int(self.scores[j]), "total": round(float(self.total[j]), 4),
                "rejected": self.failed.get(name) or self.unresolvable.get(name),
                "components": {c: {"value": round(float(values[c][j]), 4),
                                   "weight": self.weights.get(c, 0.0),
                                   "reason": results[c].reason(int(j)) if c in results else ""}
                               for c in values},
            })
        out = {"pod": self.pod.key, "uid": self.pod.uid, "time": self.ts,
               "fallback": self.fallback, "unknown_nodes_ignored": self.ignored,
               "nodes": nodes}
        if self.pod.mig_count:  # the MIG shape this decision was about
            out["mig"] = {"profile": self.pod.mig_profile, "count": self.pod.mig_count,
                          "strategy": "single" if self.pod.mig_single else "mixed",
                          "request": request_text(self.pod)}
        return out
