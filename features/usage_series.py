"""Per-(pod, GPU) usage series in the Nixtla long format (`unique_id, ds, y`).

`unique_id` is "namespace/pod/node/gpu"; `y` is the metric averaged per bin (a level, so the
usage forecaster aggregates with `agg="mean"`). Bins are regularized with the demand series'
helper (features.demand_series.regularize), so both forecasters see identical grids.
"""
from __future__ import annotations

import pandas as pd

from features.demand_series import parse_freq, regularize
from features.schema import LONG_COLUMNS
from foresight.errors import ForesightError

USAGE_METRICS = {"sm": "DCGM_FI_PROF_SM_ACTIVE", "fb": "DCGM_FI_DEV_FB_USED",
                 "power": "DCGM_FI_DEV_POWER_USAGE"}


def usage_long(samples: pd.DataFrame, metric: str = "sm", freq: str = "1min") -> pd.DataFrame:
    """Mean of `metric` (a short name of USAGE_METRICS or a DCGM name) per bin per (pod, GPU)."""
    name = USAGE_METRICS.get(metric, metric)
    step = parse_freq(freq)
    s = samples[(samples["metric"].astype(str) == name) & (samples["pod"].astype(str) != "")]
    if s.empty:
        raise ForesightError(f"no samples of {name} with a pod label")
    uid = (s["namespace"].astype(str) + "/" + s["pod"].astype(str) + "/" +
           s["node"].astype(str) + "/" + s["gpu"].astype(str))
    d = pd.DataFrame({"unique_id": uid.to_numpy(),
                      "ds": pd.to_datetime(s["ts"], utc=True).dt.floor(step).to_numpy(),
                      "y": s["value"].to_numpy(dtype=float)})
    d = d.groupby(["unique_id", "ds"], sort=True)["y"].mean().reset_index()
    # a pod's series ends when it ends: no fill past its last sample
    return regularize(d, freq, agg="mean")[LONG_COLUMNS]
