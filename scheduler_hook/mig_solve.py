"""Exact MIG geometry choice: a small integer program over classes of alike nodes.

Nodes of one GPU model, GPU count, strategy, current devices and number of pods to wait for
are interchangeable, so the program counts how many nodes of each class take each candidate
(y[k, c], integers) instead of choosing per node. Objective, lexicographic through weights:
least unmet compute slices of demand (times each profile's weight), then fewest re-splits
(each costing 1 + drain_cost per pod that must finish first), then fewest stranded compute
slices and named configurations before custom ones. Solved with scipy's HiGHS MILP; None when scipy lacks `milp` or finds no
solution in time (the planner keeps its greedy answer then).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from scheduler_hook import mig


def solve(states: list[Any], cands: dict[str, list[Any]], demand: dict[str, float],
          drain_cost: float, time_limit_s: float = 10.0,
          weights: dict[str, float] | None = None,
          burst: list[tuple[str, float, float]] | None = None) -> dict[str, Any] | None:
    """node name -> chosen Candidate for the nodes to re-split (see module docstring).
    ``burst``: (profile, level, weight) rows, levels of instances above the demand whose
    unmet slices count ``weight`` each (`mig_small.burst_rows`): one more shortfall column
    per row."""
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:  # scipy < 1.9
        return None
    need = {p: math.ceil(d - 1e-9) for p, d in demand.items() if d > 0}
    if not need:
        return {}
    # rows: (profile, level, weight); a burst row is the same profile's supply at a higher level
    rows_ = [(p, need[p], (weights or {}).get(p, 1.0)) for p in sorted(need)]
    rows_ += [(p, math.ceil(d - 1e-9), w) for p, d, w in (burst or []) if d > 0 and w > 0]
    profiles = sorted({r[0] for r in rows_})
    fixed = dict.fromkeys(profiles, 0)  # supply of nodes being re-split already: untouchable
    classes: dict[tuple, list[Any]] = {}
    for s in states:
        if s.busy:
            for p in profiles:
                fixed[p] += s.offer.get(p, 0)
            continue
        key = (s.model.name, s.gpus, s.strategy, tuple(sorted(s.offer.items())), len(s.pods))
        classes.setdefault(key, []).append(s)
    # columns: per class, "keep" then each candidate; then one shortfall per profile
    cols: list[tuple[int, Any]] = []  # (class index, candidate or None = keep)
    groups = list(classes.values())
    for k, members in enumerate(groups):
        cols.append((k, None))
        cols += [(k, c) for c in cands[members[0].name]]
    n_y, n_p = len(cols), len(rows_)
    change_total = sum(len(m) * (1 + drain_cost * len(m[0].pods)) for m in groups)
    big = 1.0 + change_total  # one unmet slice outweighs every re-split together
    tie = 0.2 * drain_cost / (1.0 + sum(len(m) * (mig.COMPUTE_SLICES * m[0].gpus + 1)
                                        for m in groups))  # below one drain step in total
    cost = np.zeros(n_y + n_p)
    offer = np.zeros((n_p, n_y))
    for j, (k, c) in enumerate(cols):
        s = groups[k][0]
        if c is None:
            for i, (p, _, _) in enumerate(rows_):
                offer[i, j] = s.offer.get(p, 0)
            continue
        cost[j] = 1 + drain_cost * len(s.pods) + tie * (
            s.gpus * mig.stranded_compute(c.geometry, s.model) + (0 if c.named else 1))
        for i, (p, _, _) in enumerate(rows_):
            offer[i, j] = s.gpus * c.geometry.get(p, 0)
    for i, (p, _, w) in enumerate(rows_):
        cost[n_y + i] = big * mig.profile_compute(p) * w
    one_each = np.zeros((len(groups), n_y + n_p))
    for j, (k, _) in enumerate(cols):
        one_each[k, j] = 1
    sizes = np.array([len(m) for m in groups], float)
    cover = np.hstack([offer, np.eye(n_p)])  # supply + shortfall >= demand
    lo = np.array([lv - fixed[p] for p, lv, _ in rows_], float)
    upper = np.concatenate([[sizes[k] for k, _ in cols], np.full(n_p, np.inf)])
    res = milp(cost, integrality=np.concatenate([np.ones(n_y), np.zeros(n_p)]),
               bounds=Bounds(np.zeros(n_y + n_p), upper),
               constraints=[LinearConstraint(one_each, sizes, sizes),
                            LinearConstraint(cover, lo, np.full(n_p, np.inf))],
               options={"time_limit": time_limit_s, "mip_rel_gap": 0.0})
    if res.x is None:
        return None
    counts = np.rint(res.x[:n_y]).astype(int)
    out: dict[str, Any] = {}
    nxt = [0] * len(groups)  # which members of a class take the changes: by name, as listed
    for j, (k, c) in enumerate(cols):
        if c is None or counts[j] <= 0:
            continue
        members = sorted(groups[k], key=lambda s: s.name)
        for s in members[nxt[k]:nxt[k] + counts[j]]:
            out[s.name] = c
        nxt[k] += counts[j]
    return out
