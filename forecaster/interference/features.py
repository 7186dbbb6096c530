"""Pair table -> directed rows -> the feature matrix the interference trees see.

Every pair row teaches two directions: `a` slowed by `b` (target a_speed) and `b` slowed by
`a` (target b_speed). A directed row has `self_*` and `partner_*` columns plus symmetric
combinations (sum, max, product) and the "summed utilization over 100%" indicator.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from features.pairs import SIDE_FEATURES

#: Activity metrics whose partner-side increase never makes `self` faster (monotone -1).
ACTIVITY = {"gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
            "mem_copy_util", "pcie_tx_mbps", "pcie_rx_mbps", "power_w"}
#: Fractions on a 0-1 scale, and percentages on 0-100: the overload indicators use them.
_OVER = {"gpu_util": 100.0, "sm_active": 1.0, "dram_active": 1.0, "mem_copy_util": 100.0}


def directed(pairs: pd.DataFrame) -> pd.DataFrame:
    """Two directed rows per pair: self=a/partner=b then self=b/partner=a.

    Columns: pair_id, self_workload, partner_workload, self_<f>, partner_<f>, gpu_model,
    sharing, and y when the targets are present.
    """
    n = len(pairs)
    cols: dict[str, list[np.ndarray]] = {}
    for me, other in (("a", "b"), ("b", "a")):
        d: dict[str, np.ndarray] = {"pair_id": np.arange(n).astype(str)}
        for role, side in (("self", me), ("partner", other)):
            wl = f"{side}_workload"
            d[f"{role}_workload"] = (pairs[wl].astype(str).to_numpy(dtype=object) if wl in pairs
                                     else np.full(n, "", dtype=object))
            for f in SIDE_FEATURES:
                col = f"{side}_{f}"
                if col in pairs:
                    d[f"{role}_{f}"] = pairs[col].to_numpy(dtype=float)
                elif f"{other if side == me else me}_{f}" in pairs:
                    # measured on one side only: the other side is missing, not absent, so
                    # both halves of the directed table keep the same columns
                    d[f"{role}_{f}"] = np.full(n, np.nan)
        for c in ("gpu_model", "sharing"):
            if c in pairs:
                d[c] = pairs[c].astype(str).to_numpy(dtype=object)
        if f"{me}_speed" in pairs:
            d["y"] = pairs[f"{me}_speed"].to_numpy(dtype=float)
        for k, v in d.items():  # built as arrays: column-wise DataFrame inserts are slow
            cols.setdefault(k, []).append(v)
    out = [pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})]
    res = pd.concat(out, ignore_index=True)
    if "a_workload" in pairs and "b_workload" in pairs:
        # Identify an unordered pair by its workloads too, so repeated measurements of the
        # same pair fall into the same fold.
        lo = np.minimum(res["self_workload"], res["partner_workload"])
        hi = np.maximum(res["self_workload"], res["partner_workload"])
        res["pair_id"] = lo + "\x1f" + hi
    return res


def side_features(d: pd.DataFrame) -> list[str]:
    """Solo-feature names (without prefix) present on both sides of a directed table."""
    return [f for f in SIDE_FEATURES if f"self_{f}" in d and f"partner_{f}" in d]


def pair_columns(f: str, a: np.ndarray, b: np.ndarray) -> list[tuple[str, np.ndarray, int]]:
    """(name, values, monotone sign) of every column feature `f` contributes, from the `self`
    values `a` and the `partner` values `b`. The one definition shared by the training matrix
    and the prediction fast path, so that the two cannot drift apart."""
    sign = -1 if f in ACTIVITY else 0
    out = [(f"self_{f}", a, 0), (f"partner_{f}", b, sign), (f"sum_{f}", a + b, sign),
           (f"max_{f}", np.maximum(a, b), sign), (f"prod_{f}", a * b, sign)]
    if f in _OVER:
        # fair time-slice share once the summed demand exceeds the GPU: the physical
        # form of the "summed utilization" rule, given to the trees directly
        tot = a + b
        out.append((f"share_{f}", 1.0 / np.maximum(tot / _OVER[f], 1.0), 1))
        out.append((f"over_{f}", np.where(np.isnan(tot), np.nan, (tot > _OVER[f]).astype(float)),
                    -1))
    return out


def numeric_features(d: pd.DataFrame, feats: list[str]) -> tuple[pd.DataFrame, dict[str, int]]:
    """The numeric feature matrix and each column's monotone sign (0 when physics is silent)."""
    X: dict[str, np.ndarray] = {}
    mono: dict[str, int] = {}
    for f in feats:
        a, b = d[f"self_{f}"].to_numpy(float), d[f"partner_{f}"].to_numpy(float)
        for name, values, sign in pair_columns(f, a, b):
            X[name], mono[name] = values, sign
    return pd.DataFrame(X, index=d.index), mono
