"""GenTD26 gateway request rate (`qps_dev.csv`) as one demand series (Nixtla long format).

Rows with an empty `container_ip` and `request_type` "API Requests" are gateway-wide (one
sample per 57 s; the value is a scaled request rate). They are averaged into `freq` bins, and a
bin with no sample is a rate of 0: the trace exports a QPS row only when requests arrived. The
evidence (session 8, from the data, not from scores): none of the 13,936 QPS rows (gateway or
per pod) is 0 while the queue-size gauge scraped beside it is 0 in 1,293 of 1,434 rows; every
gap between gateway rows is a whole number of 57 s scrapes (up to 61 of them); and the gaps
fall where the rate is lowest (the evening, where a 1-min bin holds the smallest quantum,
0.09, or nothing). Until session 7 the last level was carried over such gaps, which held
the evening series at its last non-zero value.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.demand_series import data_row, regularize, seconds_to_utc
from features.schema import LONG_COLUMNS
from ground.errors import ForesightError

GATEWAY = "gateway"


def gateway_qps(path: str | Path, freq: str = "1min", fill: str = "zero") -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ForesightError(f"QPS file not found: {p}")
    raw = pd.read_csv(p, dtype={"container_ip": str})
    g = raw[raw["container_ip"].fillna("").eq("") & raw["request_type"].eq("API Requests")]
    if g.empty:
        raise ForesightError(f"{p.name}: no gateway-wide API Requests rows")
    y = pd.to_numeric(g["value"], errors="coerce")
    bad = ~np.isfinite(y.fillna(np.inf))
    if bad.any():
        raise ForesightError(f"{p.name}: column value, data row {data_row(bad)}: "
                             "not a finite number")
    d = pd.DataFrame({"unique_id": GATEWAY,
                      "ds": seconds_to_utc(g["timestamp_anon"],
                                           f"{p.name}: column timestamp_anon").array,
                      "y": y.to_numpy(float)})
    return regularize(d, freq, agg="mean", fill=fill)[LONG_COLUMNS]
