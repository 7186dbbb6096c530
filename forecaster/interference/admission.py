"""The admission bound: the speed a pod's minimum speed (`foresight.io/min-speed`) is held to
when the co-location gate decides, calibrated to the risk an operator names (the share of
unsafe placements admitted) at that minimum speed, instead of a fixed quantile.

Why not the p10 itself: a bound that about one unseen speed in ten falls below must be wide
wherever rows like this one are ever missed by much, and on the H200 pairs it refused 58 % of
the placements that stayed above 0.8 while admitting 0.7 % of the unsafe ones, far inside any
operator's risk (bench/results/interference_h200_pool.md). The gate's question is not "where
is the 10th percentile" but "how often does admitting at this bound let an unsafe placement
through", and the answer depends on the floor: conformal risk control (Angelopoulos et al.,
2022) answers it from the same held-out calibration rows the p10 uses, per sharing mode and
per floor. The bound is point - q * unit, q the smallest value whose finite-sample-corrected
admitted-unsafe rate, (admitted + 1) / (unsafe + 1), stays within the risk at that floor. The
unit is 1 by default (`admit_margin="constant"`), or the p10's learned scale ("scaled"):
ranked by point - k x (point - p10), the held-out rows of the dev pool refuse fewer safe
placements at 5 % admitted-unsafe with k = 0 than with k = 1 (23.0 % vs 32.2 % with both
`conserve` forms; 27.5 % vs 29.8 % before them, lower on each of the six sets;
bench/admission_margin_rank.py): the scale says where the point errs widely, not which side of
a floor an error falls on. One q for every floor had to be the largest any floor needed (2.0
at 0.6 vs 0.4 at 0.8 for MPS on five of the dev sets): as wide as the p10. The p10 is still what the
API publishes as the pessimistic bound; a request that gives a side's minimum speed also gets
the bound at that floor (`a_min_speed`, serving/interference.py).
"""
from __future__ import annotations

import numpy as np

#: The default share of unsafe placements the gate may admit. With the MPS `conserve` form the
#: dev pool's held-out workloads are admitted less often than the calibration rows say (4.4 %
#: at 5 %, refusing 27.2 % of safe placements; 3.8 % / 29.8 % at 4.5 %, the default before it,
#: when held-out rows came out above the rate: 5.3 % at 5 %). Chosen on the dev pool only;
#: bench/results/interference_h200_pool.md.
ADMIT_RISK = 0.05
#: Floors a q is calibrated at (the annotation's usual range: latency-sensitive serving asks
#: 0.8-0.9, batch neighbours 0.5-0.7).
FLOORS = (0.5, 0.6, 0.7, 0.8, 0.9)
#: Each floor's q pools the unsafe rows of floors this close (one floor's few dozen unsafe
#: rows make a noisy q).
POOL_WIDTH = 0.05
#: Unsafe calibration rows a floor needs for a q of its own (fewer: no q, the p10 serves).
MIN_UNSAFE_ROWS = 30


def admission_q(point: np.ndarray, y: np.ndarray, scale: np.ndarray, risk: float,
                floors: tuple[float, ...]) -> float | None:
    """Smallest q >= 0 such that admitting rows with point - q * scale >= m lets through at
    most `risk` of the rows with y < m, finite-sample corrected, pooled over `floors` (each
    (row, m) with y < m is one unsafe placement). None with fewer than MIN_UNSAFE_ROWS."""
    point, y, scale = (np.asarray(a, float) for a in (point, y, scale))
    # an unsafe placement is admitted while q <= its threshold: how far its point clears m,
    # in units of its scale
    t = np.concatenate([(point[y < m] - m) / scale[y < m] for m in floors])
    n = len(t)
    if n < MIN_UNSAFE_ROWS:
        return None
    t = np.sort(t)[::-1]
    k = int(np.floor(risk * (n + 1) - 1))  # at most k may be admitted: q passes the (k+1)-th
    # just past that threshold (1e-9: point - q * scale >= m rounds differently)
    q = float(t[max(k, 0)]) + 1e-9 if k < n else 0.0
    return max(q, 0.0)


def admission_table(point: np.ndarray, y: np.ndarray, scale: np.ndarray, strata: np.ndarray,
                    risk: float) -> dict[str, dict[str, float]]:
    """{sharing mode: {floor: q}} for every floor with enough unsafe rows."""
    strata = np.asarray(strata, object)
    out: dict[str, dict[str, float]] = {}
    for v in np.unique(strata):
        if v == "":
            continue
        s = strata == v
        per = {}
        for f in FLOORS:
            q = admission_q(point[s], y[s], scale[s], risk, (f - POOL_WIDTH, f, f + POOL_WIDTH))
            if q is not None:
                per[f"{f:g}"] = q
        if per:
            out[str(v)] = per
    return out


def q_at(table: dict[str, float], floors: np.ndarray) -> np.ndarray:
    """Each floor's q from one mode's table: between two calibrated floors the larger q of
    the two (the risk holds at both ends), the nearest one outside; NaN without a table."""
    floors = np.asarray(floors, float)
    if not table:
        return np.full(floors.shape, np.nan)
    f = np.array(sorted(float(k) for k in table))
    q = np.array([table[k] for k in sorted(table, key=float)])
    hi = np.clip(np.searchsorted(f, floors, side="left"), 0, len(f) - 1)
    lo = np.clip(np.searchsorted(f, floors, side="right") - 1, 0, len(f) - 1)
    return np.maximum(q[lo], q[hi])


def bound_at(table: dict[str, float], point: np.ndarray, unit: np.ndarray, p10: np.ndarray,
             floor: float | np.ndarray) -> np.ndarray:
    """What a minimum speed `floor` is held to: point - q * unit, q from one mode's table at
    that floor; the p10 where there is no q or no unit; 0 where the unit is infinite (an
    unfamiliar side: no floor above 0 holds)."""
    point, unit, p10 = (np.asarray(a, float) for a in (point, unit, p10))
    q = q_at(table, np.broadcast_to(np.asarray(floor, float), point.shape))
    bound = np.minimum(np.clip(point - np.nan_to_num(q) * np.nan_to_num(unit, posinf=0.0),
                               0.0, 2.0), point)
    # an infinite unit: a side unlike every trained workload (familiar.py), held to nothing
    return np.where(np.isposinf(unit), 0.0, np.where(from_table(table, unit), bound, p10))


def from_table(table: dict[str, float], unit: np.ndarray) -> np.ndarray:
    """Where `bound_at` answers from one mode's table rather than the p10: the mode has a
    table (then `q_at` gives every floor a q) and the row a unit (the API says which)."""
    unit = np.asarray(unit, float)
    return np.full(unit.shape, bool(table)) & ~np.isnan(unit)
