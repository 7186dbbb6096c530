"""Queue-demand forecaster: a global LightGBM over queues, direct on the horizon's aggregate.

At origin `t` the target is `agg(y[t <= ds < t + H])` (sum for flows such as arriving GPUs,
mean for levels such as pending demand). Features come from mlforecast's `preprocess` (lags,
rolling windows through coreforecast, calendar and Fourier date features), which for row `ds=t`
uses only `y` of bins before `t`, and with `max_horizon=H` hands back the next H values, which
we aggregate into the target: one direct model per horizon, scored at every origin in one pass.

Why residual on persistence: a level series (Helios VC demand) is dominated by persistence, so
the model learns the *change* from the persistence forecast, and its contribution is shrunk by
a factor `lam` chosen on a validation window at the end of the training data (never the test).
Why per-series scaling: one model serves queues of very different sizes, so y is divided by the
queue's mean level on the training data (stored in the manifest).
Quantiles p10/p90: split-conformal on the same validation window, on residuals normalised by a
local scale (recent mean absolute bin-to-bin change), so that intervals widen on busy queues.

Artifacts: `model.txt` (LightGBM text) + `manifest.json`; never pickle.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
from mlforecast import MLForecast
from mlforecast.lag_transforms import RollingMean, RollingStd
from forecaster.manifest import ArtifactError, read_manifest

SCHEMA_VERSION = 1
_DAY = pd.Timedelta("1D")


def _fourier(period: pd.Timedelta, k: int, fn):
    def f(ds: pd.DatetimeIndex) -> np.ndarray:
        phase = (ds.asi8 % period.value) / period.value
        return fn(2 * np.pi * k * phase)

    f.__name__ = f"{fn.__name__}_{int(period.total_seconds() // 3600)}h_{k}"
    return f


def _fourier_features() -> list:
    out = []
    for period, ks in ((_DAY, (1, 2, 3)), (7 * _DAY, (1, 2))):
        for k in ks:
            out += [_fourier(period, k, np.sin), _fourier(period, k, np.cos)]
    return out


@dataclass
class Design:
    """Features and aggregated targets for every origin of a regular long series."""

    ids: np.ndarray
    origins: np.ndarray
    X: pd.DataFrame
    y_true: np.ndarray  # NaN where the horizon runs past the data
    persistence: np.ndarray
    snaive_day: np.ndarray
    snaive_week: np.ndarray
    scale: np.ndarray  # local conformal scale, in series units
    unit: np.ndarray  # per-series unit the model works in
    extra: dict = field(default_factory=dict)


class DemandForecaster:
    """Direct quantile forecaster of demand aggregated over the next `horizon` bins.

    fit(df): df in long format, regular bins of `freq` (see features.demand_series.regularize).
    predict_origins(df, start): p10/p50/p90 at every origin >= start, plus baselines.
    predict(df): the next forecast per queue, at origin = last bin + freq.
    """

    def __init__(self, freq: str = "10min", horizon: int = 6, agg: str = "sum",
                 val_bins: int = 1008, coverage: float = 0.8, n_estimators: int = 200,
                 learning_rate: float = 0.05, num_leaves: int = 31, min_child_samples: int = 50,
                 max_bin: int = 63,
                 shrink_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0), seed: int = 0,
                 n_jobs: int = 1) -> None:
        self.freq = freq
        self.horizon = horizon
        self.agg = agg
        self.val_bins = val_bins
        self.coverage = coverage
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.max_bin = max_bin
        self.shrink_grid = shrink_grid
        self.seed = seed
        self.n_jobs = n_jobs

    # ---- features -------------------------------------------------------------------------
    def _bins(self, td: pd.Timedelta) -> int:
        return int(td // pd.Timedelta(self.freq))

    def _mlf(self) -> MLForecast:
        H, day, week = self.horizon, self._bins(_DAY), self._bins(7 * _DAY)
        lags = sorted({1, 2, 3, 6, 12, day, week} - {0})
        lt: dict[int, list] = {1: [RollingMean(3), RollingMean(max(H, 2)), RollingMean(36),
                                   RollingStd(36), RollingMean(day)]}
        # The same horizon window one day and one week earlier (seasonal-naive as features).
        for back in (day, week):
            if back - H + 1 >= 1:
                lt.setdefault(back - H + 1, []).append(RollingMean(max(H, 2)))
        return MLForecast(models=[], freq=self.freq, lags=lags, lag_transforms=lt,
                          date_features=["hour", "dayofweek", *_fourier_features()], num_threads=1)

    def design(self, df: pd.DataFrame, unit: dict[str, float]) -> Design:
        """Feature rows for every bin of `df` taken as an origin (uses only earlier bins)."""
        H = self.horizon
        d = df.sort_values(["unique_id", "ds"], kind="stable").reset_index(drop=True)
        u = d["unique_id"].map(unit).fillna(1.0).to_numpy()
        d = d.assign(y=d["y"].to_numpy() / u)
        X, Y = self._mlf().preprocess(d[["unique_id", "ds", "y"]], max_horizon=H,
                                      return_X_y=True, dropna=False)
        X = X.reset_index(drop=True)
        Y = np.asarray(Y, dtype=float).reshape(len(d), H)
        y_true = Y.sum(1) if self.agg == "sum" else Y.mean(1)
        mean_prev = X[f"rolling_mean_lag1_window_size{max(H, 2)}"].to_numpy()
        if H == 1:
            mean_prev = X["lag1"].to_numpy()
        day, week = self._bins(_DAY), self._bins(7 * _DAY)
        sn = {}
        for name, back in (("day", day), ("week", week)):
            col = f"rolling_mean_lag{back - H + 1}_window_size{max(H, 2)}"
            v = X[col].to_numpy() if col in X else np.full(len(d), np.nan)
            if H == 1 and f"lag{back}" in X:
                v = X[f"lag{back}"].to_numpy()
            sn[name] = v * (H if self.agg == "sum" else 1)
        pers = mean_prev * H if self.agg == "sum" else X["lag1"].to_numpy()
        X["persistence"] = pers
        X["diff1"] = X["lag1"] - X["lag2"]
        X["dev_day"] = X["lag1"] - X[f"rolling_mean_lag1_window_size{day}"]
        # Daily profile: mean of the same horizon window over the previous 7 days (a smoother
        # seasonal level than one day's window). Window k days back ends before t when H <= day.
        if H <= day:
            ys = d.groupby("unique_id", sort=False)["y"]
            fwd = ys.transform(lambda s: s.rolling(H, min_periods=H).mean().shift(-(H - 1)))
            fg = fwd.groupby(d["unique_id"], sort=False)
            stack = np.column_stack([fg.shift(k * day).to_numpy() for k in range(1, 8)])
            n = np.isfinite(stack).sum(1)
            X["profile_7d"] = np.where(n > 0, np.nansum(stack, 1) / np.maximum(n, 1), np.nan)
        # Local scale: recent mean |bin-to-bin change|, floored by the series' long-run one.
        g = d.groupby("unique_id", sort=False)["y"]
        # Shift within each series: a plain shift would hand one queue's last bin to the next.
        absdiff = g.diff().abs().groupby(d["unique_id"], sort=False).shift(1)
        local = absdiff.groupby(d["unique_id"], sort=False).transform(
            lambda s: s.rolling(self._bins(_DAY), min_periods=1).mean()).to_numpy()
        base = absdiff.groupby(d["unique_id"], sort=False).transform(
            lambda s: s.expanding(min_periods=1).mean()).to_numpy()
        scale = np.nan_to_num(0.5 * local + 0.5 * base, nan=1.0) + 1e-3
        scale = scale * (H if self.agg == "sum" else np.sqrt(H))
        return Design(ids=d["unique_id"].to_numpy(), origins=d["ds"].to_numpy(), X=X,
                      y_true=y_true * u, persistence=pers * u, snaive_day=sn["day"] * u,
                      snaive_week=sn["week"] * u, scale=scale * u, unit=u)

    # ---- fit / predict --------------------------------------------------------------------
    def _lgb(self) -> lgb.LGBMRegressor:
        # n_jobs=1 by default: on a shared 2-core box OpenMP threads contend and run 10x slower.
        return lgb.LGBMRegressor(objective="l1", n_estimators=self.n_estimators,
                                 learning_rate=self.learning_rate, num_leaves=self.num_leaves,
                                 min_child_samples=self.min_child_samples, subsample=0.8,
                                 max_bin=self.max_bin,
                                 subsample_freq=1, colsample_bytree=0.8, random_state=self.seed,
                                 n_jobs=self.n_jobs, verbose=-1)

    def fit(self, df: pd.DataFrame) -> "DemandForecaster":
        """Fit on every origin whose whole horizon lies inside `df` (which is the training data)."""
        step = pd.Timedelta(self.freq)
        units = df.groupby("unique_id")["y"].apply(lambda s: float(s.abs().mean()) or 1.0)
        self.unit_ = {str(k): float(v) for k, v in units.items()}
        des = self.design(df, self.unit_)
        self.features_ = list(des.X.columns)
        end = df["ds"].max() + step
        ok = np.isfinite(des.y_true) & np.isfinite(des.persistence)
        ends = pd.to_datetime(des.origins) + self.horizon * step
        val_start = end - self.val_bins * step
        fit_rows = ok & (ends <= val_start)
        val_rows = ok & (pd.to_datetime(des.origins) >= val_start)
        if fit_rows.sum() < 50 or val_rows.sum() < 20:
            raise ValueError("not enough training data for a validation window: lower val_bins")
        target = (des.y_true - des.persistence) / des.unit
        m = self._lgb().fit(des.X[fit_rows], target[fit_rows])
        # Shrinkage toward persistence and conformal quantiles, both on the validation tail.
        dv = m.predict(des.X[val_rows]) * des.unit[val_rows]
        yv, pv = des.y_true[val_rows], des.persistence[val_rows]
        errs = np.array([np.abs(yv - (pv + lam * dv)) for lam in self.shrink_grid])
        maes = errs.mean(1)
        self.lam_ = self._choose_shrink(errs, des.origins[val_rows])
        self.val_mae_ = {f"lam={lam:g}": float(v) for lam, v in zip(self.shrink_grid, maes)}
        p50 = self._floor(pv + self.lam_ * dv)
        z = (yv - p50) / des.scale[val_rows]
        a = (1 - self.coverage) / 2
        self.q_lo_, self.q_hi_ = (float(np.quantile(z, a)), float(np.quantile(z, 1 - a)))
        self.val_ = {"n_origins": int(val_rows.sum()), "start": str(val_start)}
        # Refit on all training origins: the calibration above is a slight over-estimate of error.
        self.model_ = self._lgb().fit(des.X[ok & (ends <= end)], target[ok & (ends <= end)])
        self.train_end_ = str(end)
        return self

    def _choose_shrink(self, errs: np.ndarray, origins: np.ndarray) -> float:
        """Best shrink on validation, kept only if it beats persistence (lam=0) robustly.

        Why: on level series the learned change is mostly noise; a gain of 1% on one week of
        validation does not carry over. We resample whole days of validation origins (block
        bootstrap, seeded) and keep lam>0 only if it beats lam=0 in >= 90% of resamples.
        """
        grid = np.asarray(self.shrink_grid, dtype=float)
        best = int(np.argmin(errs.mean(1)))
        if grid[best] == 0.0 or 0.0 not in grid:
            return float(grid[best])
        zero = int(np.flatnonzero(grid == 0.0)[0])
        day = pd.to_datetime(origins).floor("1D").to_numpy()
        days, inv = np.unique(day, return_inverse=True)
        gain = errs[best] - errs[zero]  # < 0 where the model helps
        per_day = np.bincount(inv, weights=gain), np.bincount(inv)
        rng = np.random.default_rng(self.seed)
        idx = rng.integers(0, len(days), size=(500, len(days)))
        means = per_day[0][idx].sum(1) / per_day[1][idx].sum(1)
        return float(grid[best]) if np.mean(means < 0) >= 0.9 else 0.0

    @staticmethod
    def _floor(v: np.ndarray) -> np.ndarray:
        return np.maximum(v, 0.0)  # demand is never negative

    def _predict_design(self, des: Design, rows: np.ndarray) -> pd.DataFrame:
        Xr = des.X.loc[rows, self.features_]
        p50 = self._floor(des.persistence[rows]
                          + self.lam_ * self.model_.predict(Xr) * des.unit[rows])
        s = des.scale[rows]
        return pd.DataFrame({
            "unique_id": des.ids[rows], "origin": des.origins[rows], "y_true": des.y_true[rows],
            "p10": self._floor(p50 + self.q_lo_ * s), "p50": p50,
            "p90": np.maximum(p50 + self.q_hi_ * s, p50),
            "persistence": des.persistence[rows], "snaive_day": des.snaive_day[rows],
            "snaive_week": des.snaive_week[rows]})

    def predict_origins(self, df: pd.DataFrame, start) -> pd.DataFrame:
        """Forecasts at every origin >= start whose horizon is complete in `df`."""
        des = self.design(df, self.unit_)
        rows = (pd.to_datetime(des.origins) >= pd.Timestamp(start)) & np.isfinite(des.y_true)
        return self._predict_design(des, np.asarray(rows))

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """The next forecast per queue: origin = each series' last bin + freq."""
        step = pd.Timedelta(self.freq)
        last = df.groupby("unique_id")["ds"].max()
        # One empty bin past the end makes that bin a row; its y is never read as a feature.
        pad = pd.DataFrame({"unique_id": last.index, "ds": last.to_numpy() + step, "y": 0.0})
        des = self.design(pd.concat([df[["unique_id", "ds", "y"]], pad], ignore_index=True),
                          self.unit_)
        end = pd.Series(des.origins).groupby(des.ids).transform("max").to_numpy()
        out = self._predict_design(des, des.origins == end)
        return out.drop(columns="y_true")

    # ---- persistence of the artifact ------------------------------------------------------
    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        text = self.model_.booster_.model_to_string()
        (p / "model.txt").write_text(text)
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items()
                  if not k.endswith("_")}
        manifest = {"schema_version": SCHEMA_VERSION, "kind": "demand", "params": params,
                    "features": self.features_, "unit": self.unit_, "lam": self.lam_,
                    "q_lo": self.q_lo_, "q_hi": self.q_hi_, "val": self.val_,
                    "val_mae": self.val_mae_, "train_end": self.train_end_,
                    "sha256": hashlib.sha256(text.encode()).hexdigest()}
        (p / "manifest.json").write_text(json.dumps(manifest, indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "DemandForecaster":
        p = Path(path)
        man = read_manifest(p, what="demand model")
        text = (p / "model.txt").read_text()
        if hashlib.sha256(text.encode()).hexdigest() != man["sha256"]:
            raise ArtifactError(f"{p}: model.txt does not match its manifest checksum")
        params = man["params"]
        params["shrink_grid"] = tuple(params["shrink_grid"])
        self = cls(**params)
        self.model_ = _BoosterModel(lgb.Booster(model_str=text))
        self.features_, self.unit_ = man["features"], man["unit"]
        self.lam_, self.q_lo_, self.q_hi_ = man["lam"], man["q_lo"], man["q_hi"]
        self.val_, self.val_mae_, self.train_end_ = man["val"], man["val_mae"], man["train_end"]
        return self


class _BoosterModel:
    """A loaded Booster behind the regressor's `predict`."""

    def __init__(self, booster: lgb.Booster) -> None:
        self.booster_ = booster

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.booster_.predict(X)
