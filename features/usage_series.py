"""Per-(pod, GPU) usage series in the Nixtla long format (`unique_id, ds, y`).

`unique_id` is "namespace/pod/node/gpu"; `y` is the metric averaged per bin (a level, so the
usage forecaster aggregates with `agg="mean"`). Bins are regularized with the demand series'
helper (features.demand_series.regularize), so both forecasters see identical grids.
An optional `phase` column (attach_phases) names each bin's phase: a feature of the usage
forecaster ("from a running pod's recent samples and its current phase").
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.demand_series import data_row, parse_freq, parse_times, regularize
from features.schema import LONG_COLUMNS, equals_mask, has_pod
from features.segments import to_ns
from ground.errors import ForesightError
from ground.paths import input_file

USAGE_METRICS = {"sm": "DCGM_FI_PROF_SM_ACTIVE", "fb": "DCGM_FI_DEV_FB_USED",
                 "power": "DCGM_FI_DEV_POWER_USAGE"}


def usage_long(samples: pd.DataFrame, metric: str = "sm", freq: str = "1min") -> pd.DataFrame:
    """Mean of `metric` (a short name of USAGE_METRICS or a DCGM name) per bin per (pod, GPU)."""
    name = USAGE_METRICS.get(metric, metric)
    step = parse_freq(freq)
    s = samples[equals_mask(samples["metric"], name) & has_pod(samples["pod"])]
    if s.empty:
        raise ForesightError(f"no samples of {name} with a pod label")
    # integer series ids and bin numbers: string keys per row dominate at tens of millions
    keys = ["namespace", "pod", "node", "gpu"]
    sid = s.groupby(keys, sort=False, observed=True).ngroup().to_numpy()
    first = np.zeros(sid.max() + 1, dtype=np.int64)
    first[sid[::-1]] = np.arange(len(sid))[::-1]
    k = s.iloc[first]
    uid = (k["namespace"].astype(str) + "/" + k["pod"].astype(str) + "/" +
           k["node"].astype(str) + "/" + k["gpu"].astype(str)).to_numpy()
    width = int(step.value)
    b = to_ns(s["ts"]) // width
    lo = int(b.min())
    span = int(b.max()) - lo + 1
    u, inv = np.unique(sid * span + (b - lo), return_inverse=True)
    y = np.bincount(inv, weights=s["value"].to_numpy(dtype=float)) / np.bincount(inv)
    d = pd.DataFrame({"unique_id": uid[u // span],
                      "ds": pd.to_datetime((u % span + lo) * width, unit="ns", utc=True),
                      "y": y})
    # a pod's series ends when it ends: no fill past its last sample
    return regularize(d, freq, agg="mean")[LONG_COLUMNS]


def attach_phases(long: pd.DataFrame, phases: pd.DataFrame, freq: str = "1min") -> pd.DataFrame:
    """Add a `phase` column to a usage long table: the phase in effect at the *end* of each
    bin (so the phase of bin ds < t is what is known at origin t), "" where none is known.

    `phases` holds intervals (namespace, pod, [node, gpu,] start, end, phase): the simulator's
    truth/phases table, the fingerprint segmentation of the recent samples, or phases the job
    reports itself. Without node/gpu an interval applies to every GPU of the pod.
    """
    ph = phase_times(phases, "phases")
    step = parse_freq(freq)
    out = long.copy()
    parts = out["unique_id"].astype(str).str.split("/", n=3, expand=True)
    if parts.shape[1] < 4 or parts.isna().any().any():
        raise ForesightError("phases: series unique_id must be namespace/pod/node/gpu (as "
                             "`usage series` writes it) to match phase intervals")
    per_gpu = {"node", "gpu"} <= set(phases.columns)
    key = (parts[0] + "/" + parts[1] + ("/" + parts[2] + "/" + parts[3] if per_gpu else ""))
    pkey = ph["namespace"].astype(str) + "/" + ph["pod"].astype(str)
    if per_gpu:
        pkey = pkey + "/" + ph["node"].astype(str) + "/" + ph["gpu"].astype(str)
    left = pd.DataFrame({"k": key.to_numpy(), "t": pd.to_datetime(out["ds"], utc=True) + step
                         - pd.Timedelta("1ns"), "row": np.arange(len(out))}).sort_values("t")
    right = pd.DataFrame({"k": pkey.to_numpy(), "t": ph["start"], "end": ph["end"],
                          "phase": ph["phase"].astype(str)}).sort_values("t")
    m = pd.merge_asof(left, right, on="t", by="k", direction="backward")
    m["phase"] = m["phase"].where(m["t"] < m["end"], "").fillna("")
    out["phase"] = m.sort_values("row")["phase"].to_numpy()
    return out


def phase_times(phases: pd.DataFrame, what: str) -> pd.DataFrame:
    """`phases` with start/end as UTC datetimes (features.demand_series.parse_times), every
    interval given and not ending before it starts; else one line naming the row."""
    need = {"namespace", "pod", "start", "end", "phase"}
    if not need <= set(phases.columns):
        raise ForesightError(f"{what}: need columns {', '.join(sorted(need))}")
    ph = phases.assign(**{c: parse_times(phases[c], f"{what}: column {c}")
                          for c in ("start", "end")})
    for c in ("start", "end"):
        if ph[c].isna().any():  # an interval without its bound would match no bin, silently
            raise ForesightError(f"{what}: column {c}, data row {data_row(ph[c].isna())} is empty")
    back = ph["end"] < ph["start"]
    if back.any():
        r = ph[back].iloc[0]
        raise ForesightError(f"{what}: data row {data_row(back)} ends ({r['end']}) before it "
                             f"starts ({r['start']})")
    return ph


def read_phases(path: str | Path) -> pd.DataFrame:
    """A phase-interval table from Parquet or CSV (see attach_phases for the columns), its
    times checked (phase_times)."""
    p = input_file(path, "phases file", "a Parquet or CSV file")
    try:
        ph = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except pd.errors.EmptyDataError:
        raise ForesightError(f"--phases {p}: phases file is empty") from None
    except Exception as exc:  # parser errors of either format: user input, not a bug
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ForesightError(f"cannot read phases file {p}: {why}") from None
    return phase_times(ph, f"--phases {p}")
