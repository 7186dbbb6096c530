"""What keeps the small MIG profiles (at most 3 compute slices: 1g, 2g, 3g) from paying for the
large ones' gains in the geometry plan (issue 28: 1g-3g pods waited hours for the 4g/7g gains):
`protect_small` weights their unmet slices first, and burst levels (`small_bursts`, or
`burst_levels` from their past concurrency) give the slices no demand needs to them, each at a
weight below any slice of demand. scheduler_hook.mig_plan reads them through `burst_rows`.
"""
from __future__ import annotations

import math
from typing import Any

from scheduler_hook import mig

BURST_WEIGHT = 0.5  # a slice of a burst level counts less than any slice of demand
BURST_QUANTILES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)


def burst_levels(samples: dict[str, Any], pods: dict[str, float], max_compute: int = 3,
                 quantiles: tuple[float, ...] = BURST_QUANTILES, top: float = BURST_WEIGHT
                 ) -> list[tuple[str, float, float]]:
    """Burst rows for the 1g-3g profiles sized from their past concurrency (issue 28):
    ``samples[p]`` = instances of p in use at evenly spaced times of the past week, ``pods[p]``
    = its pods then. Between two quantiles of p's concurrency, one more instance of p spares
    about ``pods[p] x (q_k - q_k-1) / (L_k - L_k-1)`` pods a wait (the share of time p's
    concurrency sits there, per instance: the pods arriving when its instances are all in
    use); per compute slice, that divided by p's slices. Each level's weight makes the
    marginal per-slice value of an instance on its segment that value, so the plan spreads
    the slices no demand needs over the 1g-3g profiles where they spare most waiting pods,
    instead of by slices alone (the single burst level at `BURST_WEIGHT` gave every slice
    the same value: the 1g profiles, with the largest levels, took them from 2g).
    Scaled so the first slice above the demand is worth ``top`` (below any slice of demand)."""
    import numpy as np

    segs: dict[str, list[tuple[float, float]]] = {}  # p -> [(level, marginal per slice)]
    for p, x in samples.items():
        c = mig.profile_compute(p)
        x = np.asarray(x, float)
        if c > max_compute or not len(x) or not pods.get(p):
            continue
        lv = [math.ceil(float(np.quantile(x, q)) - 1e-9) for q in quantiles]
        out, prev_l, prev_q = [], None, None
        for q, l in zip(quantiles, lv):
            if prev_l is None:
                prev_l, prev_q = l, q
                out.append((float(l), math.inf))  # up to the median: as much as possible
                continue
            if l <= prev_l:
                continue
            out.append((float(l), pods[p] * (q - prev_q) / (l - prev_l) / c))
            prev_l, prev_q = l, q
        segs[p] = out
    finite = [m for v in segs.values() for _, m in v if math.isfinite(m)]
    scale = top / max(finite) if finite else top
    rows = []
    for p, v in segs.items():
        # marginal values made non-increasing along the levels (a later segment never worth
        # more than an earlier one), then each row's weight = its marginal - the next one's
        ms = [min(top, m * scale) for _, m in v]
        for i in range(len(ms) - 2, -1, -1):
            ms[i] = max(ms[i], ms[i + 1])
        for i, (l, _) in enumerate(v):
            w = ms[i] - (ms[i + 1] if i + 1 < len(ms) else 0.0)
            if w > 0 and l > 0:
                rows.append((p, l, w))
    return rows


def protect_small(demand: dict[str, float], max_compute: int = 3, factor: float = 100.0
                  ) -> dict[str, float]:
    """Weights that put the profiles of at most ``max_compute`` slices first: a slice of their
    demand left unmet outweighs ``factor`` slices of the larger profiles'. Without them a
    7g instance counts 7x a 1g one, so the plan moves capacity from the many small pods to
    the few large ones (issue 28: 1g-3g pods waited hours for the 4g/7g gains).

    Their bursts as well (`small_bursts`, the ``burst`` argument of `plan`): the mean alone
    left the 1g-3g pods queueing minutes at their peaks (helios 3.5 min p95 vs 0 under
    all-balanced), so slices that no profile's demand needs go to 1g-3g instances up to a
    burst level, each such slice at `BURST_WEIGHT`: below any slice of demand, so the larger
    profiles keep every instance their demand asks for."""
    return {p: factor if mig.profile_compute(p) <= max_compute else 1.0 for p in demand}


def small_bursts(bursts: dict[str, float], max_compute: int = 3) -> dict[str, float]:
    """The burst levels of the profiles `protect_small` puts first (the others dropped)."""
    return {p: v for p, v in bursts.items() if mig.profile_compute(p) <= max_compute}


Burst = dict[str, float] | list[tuple[str, float, float]]


def burst_rows(burst: Burst | None) -> list[tuple[str, float, float]]:
    """(profile, level, weight) rows of a ``burst``: a dict profile -> level is one row each
    at `BURST_WEIGHT`; a list of rows (`burst_levels`) is taken as it is."""
    if not burst:
        return []
    if isinstance(burst, dict):
        return [(p, float(v), BURST_WEIGHT) for p, v in sorted(burst.items())]
    return [(p, float(v), float(w)) for p, v, w in burst]
