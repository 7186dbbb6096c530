"""Per-model-version prediction caches for the hot single-prediction paths.

Why: a miss costs a model call (features, two booster calls, ~1 ms for one pair) and a
thread hand-off (~1.5 ms of server CPU a request in all), a hit ~0.2 ms on the event loop,
and the questions repeat (the same workload pairs, the same job templates). The cache is keyed
by the exact validated input row and by the model version, so a hot swap starts a fresh cache
and an answer never comes from another version. Misses of one request are still predicted in
one vectorized call.
"""
from __future__ import annotations

from artifacts.lru import LRU


class VersionedCaches:
    """One LRU per (kind, version); a new version of a kind drops the old one's cache."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._by: dict[str, tuple[str, LRU]] = {}

    def for_model(self, kind: str, version: str) -> LRU:
        cur = self._by.get(kind)
        if cur is None or cur[0] != version:
            cur = (version, LRU(self.size))
            self._by[kind] = cur
        return cur[1]
