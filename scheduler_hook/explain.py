"""Last decisions per pod for GET /v1/explain, and the one structured log line per decision."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import orjson

from scheduler_hook.decision import Decision

decision_log = logging.getLogger("foresight.extender.decision")


class ExplanationStore:
    """Bounded LRU of pod key -> {verb: Decision}; reasons render only when asked for."""

    def __init__(self, keep: int = 256) -> None:
        self.keep = keep
        self._items: OrderedDict[str, dict[str, Decision]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, verb: str, d: Decision, ms: float) -> None:
        with self._lock:
            self._items.setdefault(d.pod.key, {})[verb] = d
            self._items.move_to_end(d.pod.key)
            while len(self._items) > self.keep:
                self._items.popitem(last=False)
        if not decision_log.isEnabledFor(logging.INFO):
            return  # rendering the line costs more than the check, and nobody reads it
        best = int(np.argmax(d.total)) if len(d.total) else -1
        decision_log.info(orjson.dumps({
            "event": "decision", "verb": verb, "pod": d.pod.key, "uid": d.pod.uid,
            "shape": list(d.pod.shape), "nodes": len(d.names), "unknown": d.ignored,
            "best": d.names[best] if best >= 0 else None,
            "best_score": int(d.scores[best]) if best >= 0 else None,
            "rejected": len(d.failed) + len(d.unresolvable), "fallback": d.fallback,
            "mix": d.mix_source, "ms": round(ms, 3),
        }).decode())

    def get(self, namespace: str, pod: str, limit: int | None = None) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(f"{namespace}/{pod}")
            found = dict(found) if found else None
        if not found:
            return None
        return {verb: d.explain(limit) for verb, d in found.items()}
