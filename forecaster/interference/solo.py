"""Measured solo features of the workloads a model was trained on, keyed by workload and mode.

The scheduler hook and `/v1/interference` often know a pod only by its workload key. The
mechanism part needs busy shares and step times; for a workload the training table measured,
its median solo features (per sharing mode, and over all modes) fill what a request leaves out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from features.pairs import SIDE_FEATURES

_SEP = "\x1f"


def solo_table(pairs: pd.DataFrame) -> dict[str, dict[str, float]]:
    """{"workload<US>sharing": {feature: median}} and {"workload<US>": ...} over all modes."""
    sides = []
    for s in ("a", "b"):
        if f"{s}_workload" not in pairs:
            return {}
        cols = {f: pairs[f"{s}_{f}"] for f in SIDE_FEATURES if f"{s}_{f}" in pairs}
        sides.append(pd.DataFrame({"workload": pairs[f"{s}_workload"].astype(str),
                                   "sharing": pairs.get("sharing", pd.Series("", index=pairs.index))
                                   .astype(str), **cols}))
    long = pd.concat(sides, ignore_index=True)
    long = long[long["workload"] != ""]
    feats = [c for c in long.columns if c not in ("workload", "sharing")]
    if not feats or long.empty:
        return {}
    out: dict[str, dict[str, float]] = {}
    for keys, by in ((["workload", "sharing"], True), (["workload"], False)):
        med = long.groupby(keys)[feats].median()
        for idx, row in med.iterrows():
            w, m = (idx if by else (idx, ""))
            vals = {f: float(v) for f, v in row.items() if np.isfinite(v)}
            if vals:
                out[f"{w}{_SEP}{m}"] = vals
    return out


def with_solo_only(table: dict[str, dict[str, float]], solo: pd.DataFrame | None
                   ) -> dict[str, dict[str, float]]:
    """`table` plus the all-modes entry of every workload of `solo` (one row per workload:
    `workload` and side feature columns, e.g. features.pair_build.workload_solo) that
    `table` lacks. A workload the pairs measured keeps the pairs' values."""
    if solo is None or solo.empty or "workload" not in solo:
        return table
    out = dict(table)
    feats = [f for f in SIDE_FEATURES if f in solo]
    for row in solo.itertuples(index=False):
        w = str(getattr(row, "workload"))
        vals = {f: float(getattr(row, f)) for f in feats
                if np.isfinite(float(getattr(row, f)))}
        if w and vals and f"{w}{_SEP}" not in out:
            out[f"{w}{_SEP}"] = vals
    return out


def fill_solo(cols: dict[str, np.ndarray], n: int, solo: dict[str, dict[str, float]],
              feats: list[str]) -> dict[str, np.ndarray]:
    """`cols` (pair_arrays output) with missing solo features of known workloads filled."""
    sharing = cols.get("sharing", np.full(n, "", object))
    out = dict(cols)
    for side in ("a", "b"):
        names = cols.get(f"{side}_workload")
        if names is None:
            continue
        rows = [solo.get(f"{w}{_SEP}{m}") or solo.get(f"{w}{_SEP}") for w, m in zip(names, sharing)]
        if not any(rows):
            continue
        for f in feats:
            have = np.asarray(out.get(f"{side}_{f}", np.full(n, np.nan)), float)
            known = np.array([np.nan if r is None else r.get(f, np.nan) for r in rows])
            out[f"{side}_{f}"] = np.where(np.isnan(have), known, have)
    return out
