"""Several pods on one shared GPU: the co-location gate's view of each GPU of a node.

A pair table predicts a job's speed beside one partner; a time-sliced or MPS GPU often holds
more (the device plugin's `replicas`). Beside several partners each one's delay per unit of
work adds: 1 / speed = 1 + sum over partners of (1 / s_k - 1). From the pairwise 1/2 of two
always-busy contexts it gives three of them 1/3 each, as round robin does, and it is the rule
the simulator's sharing applies (`simulator.sharing.combine`). On 12 measured triples per mode
of a real H200 (data/h200i) it gives each pod's speed from the measured pairs within 0.013 on
average, closer than the product of slowdowns or the pairwise minimum
(bench/interference_triples.py). The pessimistic side composes each pair's bound the same way,
which is wider than any calibrated bound (nothing measured calibrates a sum), so a crowded GPU
is refused sooner, not later.

A placement is judged per GPU: the pod meets only the residents of the GPU it lands on. The
gate refuses a node when no GPU that fits the pod is safe for it and for every resident there
with a minimum speed, and the binder (`ScoringEngine.choose_gpus`) picks among the safe ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

LOWEST = 0.01  # a predicted speed is never taken below this (its delay stays finite)


def under_floor(bound: np.ndarray, floor: float | np.ndarray) -> np.ndarray:
    """Where a side's bound breaks its minimum speed: the gate refuses such a placement (no
    floor, 0: never; an unknown bound, NaN: never, as "no known slowdown"). The API's
    `/v1/interference` answers `admitted` with the same rule."""
    floor = np.asarray(floor, float)
    return (floor > 0) & (np.nan_to_num(np.asarray(bound, float), nan=1.0) < floor)


def delay(speed: np.ndarray) -> np.ndarray:
    """Extra time per unit of work beside one partner, 1 / speed - 1; 0 where the pair is
    unknown (NaN), as "no known slowdown"."""
    s = np.clip(np.asarray(speed, float), LOWEST, 1.0)
    return np.where(np.isnan(s), 0.0, 1.0 / s - 1.0)


def combined(total_delay: np.ndarray) -> np.ndarray:
    """Speed once the partners' delays are summed."""
    return 1.0 / (1.0 + np.asarray(total_delay, float))


def per_gpu(key: np.ndarray, values: np.ndarray, n: int, n_gpus: int) -> np.ndarray:
    """(n, G): the sum of `values` of residents keyed row * G + GPU."""
    return np.bincount(key, weights=values, minlength=n * n_gpus).reshape(n, n_gpus)


def same_gpu_pairs(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(j, j2): every ordered pair of distinct residents with one key (row * G + GPU), as
    positions into `key`; a GPU holds few, so pairs are found by offsets in key order."""
    order = np.argsort(key, kind="stable")
    ks = key[order]
    a, b = [], []
    for d in range(1, len(ks)):
        same = ks[d:] == ks[:-d]
        if not same.any():
            break  # sorted: no group spans d + 1 positions
        i = np.flatnonzero(same)
        a += [order[i], order[i + d]]
        b += [order[i + d], order[i]]
    if not a:
        return np.zeros(0, int), np.zeros(0, int)
    return np.concatenate(a), np.concatenate(b)


@dataclass
class GpuView:
    """Per GPU of each candidate node (n, G): the pod's combined point speed and bound, the
    slowest resident's combined point speed, whether a floor breaks, and the safe GPUs."""
    pod_point: np.ndarray
    pod_bound: np.ndarray
    res_point: np.ndarray
    pod_broken: np.ndarray
    res_broken: np.ndarray
    candidate: np.ndarray
    crowd: np.ndarray  # residents on each GPU
    res_low: np.ndarray  # the bound of the resident furthest under its floor (NaN: none is)
    res_floor: np.ndarray  # that resident's floor

    @property
    def safe(self) -> np.ndarray:
        return self.candidate & ~self.pod_broken & ~self.res_broken

    @property
    def worst(self) -> np.ndarray:
        return np.minimum(self.pod_point, self.res_point)

    def chosen(self) -> np.ndarray:
        """Per row, the GPU the score reads: the safe GPU with the best worst-side speed,
        else the best candidate, else the best of all."""
        pref = np.where(self.safe, 2.0, np.where(self.candidate, 1.0, 0.0))
        return np.argmax(pref * 10.0 + self.worst, axis=1)


def resident_pairs(codes_a: np.ndarray, codes_b: np.ndarray, mode_names: np.ndarray,
                   modes: np.ndarray, names: list[str],
                   table: Callable[[str, list[str], str], tuple]) -> list[np.ndarray]:
    """Per pair of resident workload codes (flat), the values `table` gives for a workload
    beside others in a mode (point, then p10 and unit where the model has them); `modes`
    indexes `mode_names`."""
    present = np.flatnonzero(np.bincount(np.r_[codes_a, codes_b]))  # unique, without a sort
    pos = np.zeros(int(present.max()) + 1, int)
    pos[present] = np.arange(len(present))
    ia, ib = pos[codes_a], pos[codes_b]
    others = [names[c] for c in present]
    out: list[np.ndarray] = []
    for mi in np.unique(modes):
        rows = modes == mi
        mode = str(mode_names[mi])
        cols = [np.stack(t) for t in zip(*(table(names[c], others, mode) for c in present))]
        out = out or [np.full(len(codes_a), np.nan) for _ in cols]
        for arr, t in zip(out, cols):
            arr[rows] = t[ia[rows], ib[rows]]
    return out


def gpu_view(ctx: Any, model: Any, codes: np.ndarray, modes: np.ndarray, names: list[str],
             s_in: np.ndarray, lo_in: np.ndarray, s_res: np.ndarray, lo_res: np.ndarray,
             bound_at: Callable[[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                                np.ndarray] | None) -> GpuView:
    """The per-GPU view from the pairwise speeds (n, K) of the pod beside each resident
    (s_in, its bound at the pod's floor lo_in) and of each resident beside the pod (s_res,
    lo_res at the resident's floor). `bound_at(mode, point, unit, p10, floor)` gives a
    resident's bound beside another resident (None: the model has only a p10, or none).
    Computed over the residents that share a GPU (flat), not over every node's slots."""
    s, r, pod = ctx.state, ctx.rows, ctx.pod
    n, G = len(r), ctx.free.shape[1]
    gpu = s.res_gpu[r]
    vi, vk = np.nonzero((codes >= 0) & (gpu >= 0) & (gpu < G))
    key = vi * G + gpu[vi, vk]
    slo = s.res_slo[r][vi, vk]
    crowd = np.bincount(key, minlength=n * G).reshape(n, G).astype(float)
    co_pt, co_lo = np.zeros(len(vi)), np.zeros(len(vi))
    j, j2 = same_gpu_pairs(key)
    if len(j):
        # modes as codes: np.unique over thousands of pairs' strings costs milliseconds
        codes_m, mode_names = pd.factorize(modes)
        mode_of_row = np.asarray(codes_m)
        m = mode_of_row[vi[j]]
        cols = resident_pairs(codes[vi[j], vk[j]], codes[vi[j2], vk[j2]], mode_names, m,
                              names, _columns(model, bound_at is not None))
        lo = cols[0] if len(cols) < 2 else cols[1]
        if bound_at is not None:  # each resident's bound at its own floor
            lo = np.empty(len(j))
            for mi in np.unique(m):
                sel = m == mi
                lo[sel] = bound_at(str(mode_names[mi]), cols[0][sel], cols[2][sel],
                                   cols[1][sel], slo[j[sel]])
        co_pt += np.bincount(j, weights=delay(cols[0]), minlength=len(vi))
        co_lo += np.bincount(j, weights=delay(lo), minlength=len(vi))
    res_pt = combined(delay(s_res[vi, vk]) + co_pt)
    res_lo = combined(delay(lo_res[vi, vk]) + co_lo)
    res_point = np.ones(n * G)
    np.minimum.at(res_point, key, res_pt)
    # per GPU, the resident furthest under its own floor (for the refusal's message)
    res_low, res_floor = np.full(n * G, np.nan), np.full(n * G, np.nan)
    bad = np.flatnonzero(under_floor(res_lo, slo))
    if len(bad):
        o = bad[np.lexsort((res_lo[bad] - slo[bad], key[bad]))]
        first = o[np.r_[True, key[o][1:] != key[o][:-1]]]
        res_low[key[first]], res_floor[key[first]] = res_lo[first], slo[first]
    pod_bound = combined(per_gpu(key, delay(lo_in[vi, vk]), n, G))
    return GpuView(pod_point=combined(per_gpu(key, delay(s_in[vi, vk]), n, G)),
                   pod_bound=pod_bound, res_point=res_point.reshape(n, G),
                   pod_broken=under_floor(pod_bound, pod.slo_min_speed),
                   res_broken=np.isfinite(res_low).reshape(n, G),
                   candidate=ctx.fits & ctx.usable, crowd=crowd,
                   res_low=res_low.reshape(n, G), res_floor=res_floor.reshape(n, G))


def _columns(model: Any, admits: bool) -> Callable[[str, list[str], str], tuple]:
    """What `resident_pairs` asks the model per workload: its point speeds beside the others,
    then (where the model has them) their p10s and margin units."""
    def table(w: str, others: list[str], mode: str) -> tuple:
        cols = [model.speeds(w, others, mode)[0]]
        if hasattr(model, "bounds"):
            cols.append(model.bounds(w, others, mode)[0])
        if admits:
            cols.append(model.units(w, others, mode)[0])
        return tuple(cols)
    return table
