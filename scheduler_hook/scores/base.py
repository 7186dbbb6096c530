"""What every score component shares: the per-request context and the result shape.

A component maps the candidate nodes of one request to values in [0, 1] (higher = better
place) in one vectorized pass, and can render a one-line reason for any node on demand
(rendering 5,000 strings per request would cost more than the scoring itself).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Protocol

import numpy as np

from scheduler_hook.podspec import PodRequest
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState


@dataclass
class Context:
    """One scoring request over `rows` of `state` (caller holds state.lock)."""

    state: ClusterState
    rows: np.ndarray
    pod: PodRequest
    providers: ProviderSet
    cfg: dict[str, Any]
    cache: dict[str, Any] = field(default_factory=dict)
    mix_counts: dict[tuple[int, int], float] | None = None  # shapes seen, as the scorer froze them

    @property
    def n(self) -> int:
        return len(self.rows)

    @cached_property
    def gpu_mem(self) -> np.ndarray:
        return self.state.gpu_mem[self.rows]

    @cached_property
    def free(self) -> np.ndarray:
        """Free milli-GPU per GPU slot, (n, G); 0 on padding slots."""
        return self.state.free_milli[self.rows]

    @cached_property
    def usable(self) -> np.ndarray:
        """GPU slots that exist and are neither drained nor failed (fatal XID, DBE)."""
        return self.state.usable[self.rows]

    @cached_property
    def need(self) -> np.ndarray:
        """Milli-GPU the pod needs on each GPU it touches, per node (gpu-memory pods vary)."""
        p = self.pod
        if p.milli >= 0:
            return np.full(self.n, float(p.milli))
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.ceil(1000.0 * p.gpu_memory_mib / self.gpu_mem)
        return np.where(np.isfinite(m), np.minimum(m, 1000.0), 1000.0)

    @cached_property
    def fits(self) -> np.ndarray:
        """(n, G): this GPU could take (its share of) the pod, ignoring health."""
        return self.state.gpu_exists[self.rows] & (self.free >= self.need[:, None] - 1e-9)

    @cached_property
    def feasible(self) -> np.ndarray:
        """(n,): enough healthy GPUs could take the pod (no-GPU pods fit anywhere)."""
        if self.pod.gpus == 0:
            return np.ones(self.n, bool)
        return (self.fits & self.usable).sum(axis=1) >= self.pod.gpus

    def lookup(self, values_by_workload: np.ndarray, codes: np.ndarray,
               fill: float) -> np.ndarray:
        """Map resident workload codes (-1 = empty) through a per-code value table."""
        table = np.append(values_by_workload, fill)  # code -1 reads the last entry
        return table[codes]

    def workload_names(self) -> list[str]:
        names = [""] * len(self.state.workloads)
        for w, c in self.state.workloads.items():
            names[c] = w
        return names


@dataclass
class ComponentResult:
    value: np.ndarray                       # (n,) in [0, 1]
    reason: Callable[[int], str]            # position -> one-line reason
    violation: np.ndarray | None = None     # (n,) bool: hard violation, filter rejects
    violation_reason: Callable[[int], str] | None = None
    unresolvable: bool = False              # preemption cannot fix it
    informative: bool = True                # False: same value everywhere, left out of the mean
    raw: np.ndarray | None = None           # row-local quantity `value` is normalized from
    # positions -> their violation reasons at once (thousands of rejected nodes, few reasons)
    violation_messages: Callable[[list[int]], list[str]] | None = None


class Component(Protocol):
    name: str

    def score(self, ctx: Context) -> ComponentResult: ...


_CONSTANTS: dict[tuple[int, float], np.ndarray] = {}


def constant(ctx: Context, value: float, reason: str) -> ComponentResult:
    # shared read-only arrays: components that are off cost no 5,000-float fill per request
    arr = _CONSTANTS.get((ctx.n, value))
    if arr is None:
        if len(_CONSTANTS) >= 64:
            _CONSTANTS.clear()
        arr = _CONSTANTS[(ctx.n, value)] = np.full(ctx.n, float(value))
        arr.flags.writeable = False
    return ComponentResult(arr, lambda _j: reason, informative=False)


def score_one(component: Component, ctx: Context, j: int) -> tuple[float, str]:
    """(value, reason) of the node at position j: the per-node view the design describes."""
    res = component.score(ctx)
    return float(res.value[j]), res.reason(j)
