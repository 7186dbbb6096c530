"""What the predictions say about topology domains (issue 31, the prospective part).

- ``free_soon``: per row, whether every GPU pod on it is predicted to have left within a horizon
  (bound pods: creation time + the `runtime` provider's run time). A gang with a *preferred*
  level that no domain holds now is steered to the smallest domain that will hold it soon.
- ``keep_free``: per row, whether its domain is one of those kept whole-free for the gang demand
  the `demand` forecaster reserves; pods in no gang are sent elsewhere first, and among the
  other domains to the fullest (per-domain fragmentation: partly used domains fill first, as the
  reservation keeps whole 8-GPU nodes free node by node).
"""
from __future__ import annotations

from typing import Any

import numpy as np

SOON_S = 1800.0  # `topology.soon_s`: the horizon when the gang pod's run time is not predicted
# `topology.spread_slowdown`: the replay's spread_rack default, inside the quartiles of Gavel's
# (OSDI'20) measured consolidated / unconsolidated throughput on P100
# (simulator/timeline/topology.py)
SPREAD_SLOWDOWN = 1.3


def soon_horizon_s(runtime_s: float | None, args: dict) -> float:
    """How long a preferred gang may wait for a domain: what spreading would add to its run
    (predicted run time x (slowdown - 1)), else `soon_s`."""
    slow = float(args.get("spread_slowdown", SPREAD_SLOWDOWN))
    if runtime_s is not None and np.isfinite(runtime_s):
        return float(runtime_s) * max(slow - 1.0, 0.0)
    return float(args.get("soon_s", SOON_S))


def row_free_at(state: Any, runtime: Any, now: float) -> np.ndarray:
    """(rows,) predicted time each row's last GPU pod ends: `now` when none runs, inf when a
    pod's run time is not predicted. Per-pod ends are cached per pod key (bound pods do not
    change), each row's latest end per row version: after a binding only that row is read
    again, not every pod of the cluster (caller holds state.lock)."""
    cached = state.__dict__.get("_topology_pod_end")
    if cached is None or cached[0] != id(runtime) or len(cached[1]) > 4 * max(len(state.pods),
                                                                              1024):
        cached = state.__dict__["_topology_pod_end"] = (id(runtime), {})  # new model, or pods
    ends: dict[str, float] = cached[1]                                 # that left: start over
    n = len(state.gpu_count)
    key = (id(runtime), state.index_version, n)
    hit = state.__dict__.get("_topology_row_end")
    if hit is None or hit[0] != key:
        names = {row: name for name, row in state.index.items()}
        hit = state.__dict__["_topology_row_end"] = (key, np.full(n, -np.inf),
                                                     np.full(n, -1, np.int64), names)
    _, last, done, names = hit
    for row in np.flatnonzero(state.row_version != done).tolist():
        done[row] = state.row_version[row]
        latest = -np.inf
        for k in state.by_node.get(names.get(row, ""), ()):
            end = ends.get(k)
            if end is None:
                p = state.pods.get(k)
                if p is None:
                    continue
                rt = runtime.runtime_s(p) if runtime is not None else None
                end = (p.created or now) + float(rt) if rt is not None and np.isfinite(rt) \
                    else np.inf
                ends[k] = end
            latest = max(latest, end)
        last[row] = latest
    return np.maximum(last, now)


def free_soon_milli(state: Any, free_at: np.ndarray, now: float, horizon_s: float
                    ) -> np.ndarray:
    """Free milli-GPU per slot as it will be at `now + horizon_s` if every row whose pods are
    all predicted to have left by then is empty."""
    frees = (free_at <= now + horizon_s) & state.live
    return np.where(frees[:, None] & state.gpu_exists, 1000.0, state.free_milli)


def keep_free(codes: np.ndarray, whole_free: np.ndarray, total: np.ndarray, reserved: float
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """Domains to keep whole-free for ``reserved`` forecast GPUs of gangs.

    ``codes`` (rows,) domain per row (-1: none); ``whole_free`` / ``total`` (rows,) whole free
    GPUs and GPUs per row. Kept: the domains with every GPU free, most GPUs first, until they
    sum to ``reserved``. Returns (kept per row, free share of each row's domain, domains kept).
    """
    m = codes >= 0
    k = int(codes.max()) + 1 if m.any() else 0
    free = np.bincount(codes[m], weights=whole_free[m], minlength=k)
    size = np.bincount(codes[m], weights=total[m], minlength=k)
    share = np.where(size > 0, free / np.maximum(size, 1), 0.0)
    whole = np.flatnonzero((size > 0) & (free >= size))
    order = whole[np.argsort(-size[whole], kind="stable")]
    upto = np.searchsorted(np.cumsum(size[order]), reserved) + 1 if reserved > 0 else 0
    kept_dom = np.zeros(k, bool)
    kept_dom[order[:upto]] = True
    kept = m & kept_dom[np.maximum(codes, 0)]
    return kept, np.where(m, share[np.maximum(codes, 0)], 0.0), int(kept_dom.sum())


def pack_tiers(free_at: np.ndarray, empty: np.ndarray, gang_node: np.ndarray, end: float,
               codes: np.ndarray | None = None, gang_pods: int = 4
               ) -> tuple[np.ndarray, ...]:
    """Node masks a pod in no gang tries in turn, so that gang-capable nodes free up together.

    ``free_at`` (rows,) predicted time each row's last pod ends; ``empty`` rows with nothing
    on them; ``gang_node`` rows a gang pod fits on when empty; ``end`` the pod's predicted
    end. First: rows no gang pod fits, and gang-capable rows already taken until at least
    ``end`` (the pod does not prolong how long they stay taken: a small pod with a long run on
    a node about to drain keeps it from a gang for that whole run). Then: any row already
    taken. Empty gang-capable rows come last (the caller's own fallback).

    With ``codes`` (rows,) the domain (rack) per row, -1: none ("long-runners together"):
    between the two, taken gang-capable rows of domains that cannot hold a ``gang_pods``
    gang before ``end`` anyway (scores.drain.domain_ready): the pod may prolong its row, but
    not the time its domain holds a gang, so long runs gather in domains already lost to
    gangs and leave the others to drain."""
    taken = ~np.asarray(empty, bool)
    small = ~np.asarray(gang_node, bool)
    free_at = np.asarray(free_at, float)
    first = small | (taken & (free_at >= end))
    if codes is None:
        return first, small | taken
    from scheduler_hook.scores.drain import domain_ready

    t = np.where(gang_node, np.where(taken, np.maximum(free_at, -1e18), -1e18), np.inf)
    at = domain_ready(t, codes, gang_pods)[0]
    late = (np.asarray(codes) >= 0) & (at[np.maximum(codes, 0)] >= end)
    return first, first | (taken & late), small | taken
