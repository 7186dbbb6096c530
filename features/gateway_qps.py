"""GenTD26 gateway request rate (`qps_dev.csv`) as one demand series (Nixtla long format).

Rows with an empty `container_ip` and `request_type` "API Requests" are gateway-wide (about
one sample per 57 s; the value is a scaled request rate). They are averaged into `freq` bins,
the level carried over bins with no sample (a gauge that was not re-scraped).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from features.demand_series import regularize
from features.schema import LONG_COLUMNS
from foresight.errors import ForesightError

GATEWAY = "gateway"


def gateway_qps(path: str | Path, freq: str = "1min") -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ForesightError(f"QPS file not found: {p}")
    raw = pd.read_csv(p, dtype={"container_ip": str})
    g = raw[raw["container_ip"].fillna("").eq("") & raw["request_type"].eq("API Requests")]
    if g.empty:
        raise ForesightError(f"{p.name}: no gateway-wide API Requests rows")
    d = pd.DataFrame({"unique_id": GATEWAY,
                      "ds": pd.to_datetime(g["timestamp_anon"].astype(float), unit="s", utc=True),
                      "y": g["value"].astype(float).to_numpy()})
    return regularize(d, freq, agg="mean")[LONG_COLUMNS]
