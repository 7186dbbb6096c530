"""Shape-mix forecast: the expected share of each pod shape among the next horizon's arrivals.

The scheduler hook's fragmentation score (FGD) weighs free GPU space by how likely each pod
shape is to arrive; this replaces the whole trace's frequencies with a forecast for the next
hours, learned only from arrivals *before* the origin.

API (small on purpose, the hook calls it):

    mix = ShapeMixForecaster(half_life="6h", prior_strength=20.0).fit(arrivals_df)
    mix.predict(origin, queue=None) -> DataFrame[shape, share]     # shares sum to 1

`arrivals_df` has one row per arriving pod: `ds` (arrival time), `shape` (a string such as
"1", "2", "8", "0.5" or "frac:0.25-0.5"; see features.demand_series.pod_shape), optionally
`gpus` (used as a weight when `weight="gpus"`) and `queue` (for per-queue mixes).

Method: exponentially-weighted recent frequencies (half-life `half_life`, arrivals with
ds < origin only), blended with the long-run mix of all arrivals before the origin as a
Dirichlet-style prior of `prior_strength` pseudo-arrivals:
    share(s) = (ew_count(s) + k * longrun_share(s)) / (ew_total + k).
With no arrival before the origin the result is empty. `save`/`load` write a JSON file.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


class ShapeMixForecaster:
    """Recency-weighted pod-shape shares, shrunk toward the long-run mix."""

    def __init__(self, half_life: str = "6h", prior_strength: float = 20.0,
                 weight: str = "count") -> None:
        self.half_life = half_life
        self.prior_strength = prior_strength
        self.weight = weight

    def fit(self, arrivals: pd.DataFrame) -> "ShapeMixForecaster":
        missing = {"ds", "shape"} - set(arrivals.columns)
        if missing:
            raise ValueError(f"arrivals: missing column(s) {', '.join(sorted(missing))}")
        if self.weight not in ("count", "gpus"):
            raise ValueError("weight must be 'count' or 'gpus'")
        a = pd.DataFrame({"ds": pd.to_datetime(arrivals["ds"], utc=True),
                          "shape": arrivals["shape"].astype(str),
                          "queue": arrivals["queue"].astype(str) if "queue" in arrivals else "",
                          "w": (pd.to_numeric(arrivals["gpus"]) if self.weight == "gpus"
                                else 1.0)})
        self.arrivals_ = a.sort_values("ds", kind="stable").reset_index(drop=True)
        return self

    def predict(self, origin, queue: str | None = None) -> pd.DataFrame:
        """Expected share of each shape among arrivals after `origin` (uses ds < origin)."""
        t = pd.Timestamp(origin)
        t = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
        a = self.arrivals_
        a = a[a["ds"] < t]
        if queue is not None:
            a = a[a["queue"] == str(queue)]
        if a.empty:
            return pd.DataFrame({"shape": pd.Series(dtype=str), "share": pd.Series(dtype=float)})
        age = (t - a["ds"]).dt.total_seconds().to_numpy()
        decay = np.exp2(-age / pd.Timedelta(self.half_life).total_seconds()) * a["w"].to_numpy()
        ew = pd.Series(decay).groupby(a["shape"].to_numpy()).sum()
        longrun = a.groupby("shape")["w"].sum()
        longrun = longrun / longrun.sum()
        k = float(self.prior_strength)
        share = (ew.reindex(longrun.index, fill_value=0.0) + k * longrun) / (ew.sum() + k)
        out = share.sort_values(ascending=False).rename("share").rename_axis("shape")
        return out.reset_index()

    def save(self, path: str | Path) -> None:
        a = self.arrivals_.assign(ds=self.arrivals_["ds"].astype(str))
        Path(path).write_text(json.dumps({"kind": "shape_mix", "half_life": self.half_life,
                                          "prior_strength": self.prior_strength,
                                          "weight": self.weight,
                                          "arrivals": a.to_dict(orient="list")}))

    @classmethod
    def load(cls, path: str | Path) -> "ShapeMixForecaster":
        d = json.loads(Path(path).read_text())
        self = cls(d["half_life"], d["prior_strength"], d["weight"])
        a = pd.DataFrame(d["arrivals"])
        a["ds"] = pd.to_datetime(a["ds"], utc=True)
        self.arrivals_ = a
        return self
