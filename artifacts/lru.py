"""A bounded, thread-safe LRU whose misses are computed in one vectorized call.

Why here: the adapters the extender and the API share cache per model version with it, and the
API's own per-version caches (serving.cache) too.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Sequence


class LRU:
    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def lookup(self, keys: Sequence[Hashable]) -> tuple[list[Any], list[int]]:
        """(values with None where missing, indices of the misses)."""
        out: list[Any] = [None] * len(keys)
        miss: list[int] = []
        with self._lock:
            for i, k in enumerate(keys):
                v = self._d.get(k)
                if v is None:
                    miss.append(i)
                else:
                    out[i] = v
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        return out, miss

    def fill(self, keys: Sequence[Hashable], out: list[Any], miss: list[int],
             vals: Sequence[Any]) -> list[Any]:
        """Put the computed `vals` of the `miss` indices into `out` and into the cache."""
        with self._lock:
            for i, v in zip(miss, vals):
                out[i] = v
                self._d[keys[i]] = v
            while len(self._d) > self.size:
                self._d.popitem(last=False)
        return out

    def get_many(self, keys: Sequence[Hashable], compute: Callable[[list[int]], list[Any]]
                 ) -> list[Any]:
        """Values for `keys`; `compute(miss_indices)` answers the misses in one call."""
        out, miss = self.lookup(keys)
        return self.fill(keys, out, miss, compute(miss)) if miss else out
