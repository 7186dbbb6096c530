"""Queue-demand forecaster: a global LightGBM over queues, direct on the horizon's aggregate.

At origin `t` the target is `agg(y[t <= ds < t + H])` (sum for flows such as arriving GPUs,
mean for levels such as pending demand); features in forecaster/demand/features.py. One direct
model per horizon, fitted with an absolute-error objective (the reported metric is MAE).

Two targets:
- `residual` (default; level series such as Helios VC demand, dominated by persistence): the
  model learns the change from persistence, its contribution shrunk by `lam` chosen on a
  validation window at the end of the training data (never the test).
- `ratio` (bursty arrival series with a drifting level, e.g. the DLRM trace): the aggregate
  divided by the recent level, with features relative to the same level (`multiscale`).
Per-series scaling: y is divided by the queue's mean on the training data (in the manifest).
Quantiles p10/p90: split-conformal on the validation window, on residuals normalised by a
local scale (residual: recent mean |bin-to-bin change|; ratio: the level).

Fallback, per series: on the validation window the model's MAE is compared with persistence
and seasonal naive (day, week); where it does not beat the best of them, that baseline is the
served forecast (`served_[series]`, the `model` column of every output), with its own
conformal interval. With `recent_window`, the served predictor is re-picked at each origin
from the errors of the horizons that ended in that window (request rates change regime within
hours), named per origin. Artifacts: `model.txt` (LightGBM text) + `manifest.json`; never
pickle.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd

from forecaster.booster import LoadedBooster
from forecaster.demand.features import EWMA_ALPHAS, LEVEL_FLOOR, Design, design
from forecaster.manifest import ArtifactError, read_manifest
from forecaster.repick import recent_pick
from forecaster.intervals import recent_bounds

SCHEMA_VERSION = 2
#: Baselines a series may fall back to, in the order ties are broken (mean_last_h, ewma and
#: ewma_mix only for levels, agg="mean"; ewma_mix, the mean of the EWMAs at every alpha of
#: the grid, only with `mix=True`).
FALLBACKS = ("persistence", "mean_last_h", "ewma", "ewma_mix", "snaive_day", "snaive_week")
_LEVEL_ONLY = ("mean_last_h", "ewma", "ewma_mix")
MODEL = "model"
#: the margin the model needs over the recent best baseline to be re-picked (the usage
#: forecaster's default `min_gain`)
RECENT_MIN_GAIN = 0.03
#: fewest days of validation the shrink's bootstrap resamples as days (else by horizons)
MIN_DAY_BLOCKS = 5


class DemandForecaster:
    """Direct quantile forecaster of demand aggregated over the next `horizon` bins.

    fit(df): df in long format, regular bins of `freq` (see features.demand_series.regularize).
    predict_origins(df, start): p10/p50/p90 at every origin >= start, `model`, plus baselines.
    predict(df): the next forecast per queue, at origin = last bin + freq.
    """

    def __init__(self, freq: str = "10min", horizon: int = 6, agg: str = "sum",
                 val_bins: int = 1008, coverage: float = 0.8, n_estimators: int = 200,
                 learning_rate: float = 0.05, num_leaves: int = 31, min_child_samples: int = 50,
                 max_bin: int = 63,
                 shrink_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0), seed: int = 0,
                 n_jobs: int = 1, target: str = "residual", multiscale: bool = False,
                 fallback: bool = True, level_floor: float = LEVEL_FLOOR,
                 unit_scale: bool = True, base: str = "persistence", mix: bool = False,
                 recent_window: int | None = None, recent_z: float = 0.0,
                 recent_intervals: int | None = None) -> None:
        if target not in ("residual", "ratio"):
            raise ValueError(f"target {target!r}: use residual or ratio")
        if base not in ("persistence", "mean_last_h", "ewma") or (base in _LEVEL_ONLY
                                                                   and agg != "mean"):
            raise ValueError(f"base {base!r}: use persistence (or, for agg=mean, mean_last_h "
                             f"or ewma)")
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
        self.target = target
        self.multiscale = multiscale or target == "ratio"  # the ratio target needs the level
        self.fallback = fallback
        self.level_floor = level_floor
        self.unit_scale = unit_scale
        # residual target's base: the last value, or (noisy gauges) the mean of the last H bins
        self.base = base
        # a forecast combination among the fallbacks (levels only): the mean of the EWMAs at
        # every alpha of the grid, robust to the alpha that the training part would pick
        self.mix = mix
        # horizons of ended forecasts that re-pick the served predictor at each origin (None:
        # the validated choice throughout); see _repick
        self.recent_window = recent_window
        # evidence to leave the validated choice (standard errors of the paired difference of
        # recent errors): 0 takes the recent best outright
        self.recent_z = recent_z
        # with recent_window: p10/p90 re-calibrated at each origin from the served residuals
        # of this many ended horizons (forecaster/intervals.recent_bounds)
        self.recent_intervals = recent_intervals

    def design(self, df: pd.DataFrame, unit: dict[str, float]) -> Design:
        des = design(df, unit, self.freq, self.horizon, self.agg, self.multiscale,
                     self.level_floor)
        des.extra["alpha"] = getattr(self, "ewma_alpha_", des.extra["alpha"])
        return des

    # ---- fit / predict --------------------------------------------------------------------
    def _lgb(self) -> lgb.LGBMRegressor:
        # n_jobs=1 by default: on a shared 2-core box OpenMP threads contend and run 10x slower.
        return lgb.LGBMRegressor(objective="l1", n_estimators=self.n_estimators,
                                 learning_rate=self.learning_rate, num_leaves=self.num_leaves,
                                 min_child_samples=self.min_child_samples, subsample=0.8,
                                 max_bin=self.max_bin,
                                 subsample_freq=1, colsample_bytree=0.8, random_state=self.seed,
                                 n_jobs=self.n_jobs, verbose=-1)

    def _train_target(self, des: Design) -> np.ndarray:
        if self.target == "ratio":
            return des.y_true / des.level
        return (des.y_true - des.baseline(self.base)) / des.unit

    def _raw(self, des: Design, rows, model=None) -> np.ndarray:
        """The model's p50 (before any fallback) at `rows`."""
        out = (model or self.model_).predict(des.X.loc[rows, self.features_])
        if self.target == "ratio":
            return self._floor(out * des.level[rows])
        return self._floor(des.baseline(self.base)[rows] + self.lam_ * out * des.unit[rows])

    def _zscale(self, des: Design) -> np.ndarray:
        return des.level if self.target == "ratio" else des.scale

    def fit(self, df: pd.DataFrame) -> "DemandForecaster":
        """Fit on every origin whose whole horizon lies inside `df` (which is the training data)."""
        if self.mix and self.agg != "mean":
            raise ValueError("mix=True combines level baselines: needs agg='mean'")
        if self.recent_intervals and not self.recent_window:
            raise ValueError("recent_intervals re-calibrates from the re-pick's errors: needs "
                             "recent_window")
        step = pd.Timedelta(self.freq)
        units = df.groupby("unique_id")["y"].apply(lambda s: float(s.abs().mean()) or 1.0)
        if not self.unit_scale:  # series already in one unit (GPUs): keep absolute floors
            units = units * 0 + 1.0
        self.unit_ = {str(k): float(v) for k, v in units.items()}
        des = self.design(df, self.unit_)
        self.features_ = list(des.X.columns)
        end = df["ds"].max() + step
        ok = np.isfinite(des.y_true) & np.isfinite(des.baseline(self.base))
        ends = pd.to_datetime(des.origins) + self.horizon * step
        val_start = end - self.val_bins * step
        fit_rows = ok & (ends <= val_start)
        val_rows = ok & (pd.to_datetime(des.origins) >= val_start)
        if des.extra["ewma"]:  # the EWMA baseline's alpha: best on the fitting part
            yf = des.y_true[fit_rows]
            self.ewma_alpha_ = min(des.extra["ewma"], key=lambda a: float(
                np.nanmean(np.abs(des.extra["ewma"][a][fit_rows] - yf))))
            des.extra["alpha"] = self.ewma_alpha_
            ok &= np.isfinite(des.baseline(self.base))
            fit_rows, val_rows = fit_rows & ok, val_rows & ok
        if fit_rows.sum() < 50 or val_rows.sum() < 20:
            raise ValueError("not enough training data for a validation window: lower val_bins")
        target = self._train_target(des)
        m = self._lgb().fit(des.X[fit_rows], target[fit_rows])
        yv, pv = des.y_true[val_rows], des.baseline(self.base)[val_rows]
        if self.target == "residual":
            # Shrinkage toward persistence, chosen on the validation tail.
            dv = m.predict(des.X[val_rows]) * des.unit[val_rows]
            errs = np.array([np.abs(yv - (pv + lam * dv)) for lam in self.shrink_grid])
            self.lam_ = self._choose_shrink(errs, des.origins[val_rows])
            self.val_mae_ = {f"lam={lam:g}": float(v) for lam, v in zip(self.shrink_grid,
                                                                       errs.mean(1))}
        else:
            self.lam_, self.val_mae_ = 1.0, {}
        p50 = self._raw(des, val_rows, m)
        self._select(des, val_rows, p50)
        self.q_ = self._conformal(des, val_rows, p50)
        self.q_lo_, self.q_hi_ = self._q("*", MODEL)
        self.val_ = {"n_origins": int(val_rows.sum()), "start": str(val_start)}
        # Refit on all training origins: the calibration above is a slight over-estimate of error.
        self.model_ = self._lgb().fit(des.X[ok & (ends <= end)], target[ok & (ends <= end)])
        self.train_end_ = str(end)
        return self

    def _conformal(self, des: Design, rows: np.ndarray, p50: np.ndarray) -> dict:
        """Split-conformal [p10, p90] offsets (in z units) per series and predictor, and pooled
        ("*") for series unseen in training. Per series: a pooled quantile would be set by the
        many quiet series (all zeros) and leave the busy ones with no interval at all."""
        a = (1 - self.coverage) / 2
        y, ids = des.y_true[rows], des.ids[rows]
        out: dict[str, dict[str, list[float]]] = {}
        for name in (MODEL, *self.candidates()):
            v = p50 if name == MODEL else des.baseline(name)[rows]
            z = (y - v) / (self._zscale(des)[rows] if name == MODEL else des.scale[rows])
            for uid in ("*", *pd.unique(ids)):
                zz = z[np.isfinite(z) & ((ids == uid) | (uid == "*"))]
                # under 50 points a per-series quantile is noise: the series uses the pooled one
                if len(zz) >= (1 if uid == "*" else 50):
                    out.setdefault(str(uid), {})[name] = [float(np.quantile(zz, a)),
                                                          float(np.quantile(zz, 1 - a))]
        return out

    def _q(self, uid: str, name: str) -> list[float]:
        return self.q_.get(str(uid), {}).get(name) or self.q_["*"].get(name) or [0.0, 0.0]

    def _select(self, des: Design, rows: np.ndarray, p50: np.ndarray) -> None:
        """Per series: MAE of the model and of each baseline on validation; serve the model
        only where it beats every baseline there, else the best baseline (named)."""
        ids, y = des.ids[rows], des.y_true[rows]
        cand = {MODEL: p50, **{b: des.baseline(b)[rows] for b in self.fallbacks()}}
        self.val_scores_, self.served_ = {}, {}
        for uid in pd.unique(ids):
            r = ids == uid
            sc = {k: float(np.mean(np.abs(y[r] - v[r]))) for k, v in cand.items()
                  if np.isfinite(v[r]).all()}
            self.val_scores_[str(uid)] = sc
            best = min((b for b in self.fallbacks() if b in sc), key=sc.get, default=None)
            lose = self.fallback and best is not None and sc[MODEL] >= sc[best]
            self.served_[str(uid)] = best if lose else MODEL

    def fallbacks(self) -> tuple[str, ...]:
        """Baselines a series may fall back to: persistence, seasonal naive and the model's
        own residual base. Why not every level baseline: on Helios the EWMA won validation on
        some VCs at 6 h and lost the test (selection noise, +0.15 % MAE over persistence)."""
        return tuple(b for b in FALLBACKS if b not in _LEVEL_ONLY or b == self.base
                     or (b == "ewma_mix" and self.mix))

    def candidates(self) -> tuple[str, ...]:
        """What may replace the model: the fallbacks, and with a recent window and `mix`,
        the EWMA at each alpha of the grid (`ewma_<alpha>`, re-picked per origin only)."""
        alphas = tuple(f"ewma_{a:g}" for a in EWMA_ALPHAS) if (
            self.recent_window and self.mix) else ()
        return (*self.fallbacks(), *alphas)

    def _repick(self, des: Design, rows: np.ndarray,
                who: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The served predictor per row, re-picked at each origin from the errors of the
        last `recent_window` horizons that have ended (forecaster/repick.py, scope per
        series): a request rate's regime changes within hours (busy, then quiet at night) and
        the validation tail cannot see the next one. The model's errors up to its training
        end are in-sample and do not count. With `recent_intervals`, also the [p10, p90]
        offsets per row (NaN: keep the validation ones)."""
        known = np.isfinite(des.baseline(self.base))
        cand = {MODEL: self._raw(des, known),
                **{b: des.baseline(b)[known] for b in self.candidates()}}
        static = np.array([self.served(u) for u in des.ids[known]], dtype=object)
        pick = recent_pick(des.ids[known], des.origins[known], des.y_true[known], cand, static,
                           self.horizon, self.recent_window * self.horizon, "series",
                           RECENT_MIN_GAIN,
                           pd.Timestamp(self.train_end_) - pd.Timedelta(self.freq),
                           self.recent_z)
        out = who.copy()
        sel = known[rows]
        out[sel] = pick[rows[known]]
        if not self.recent_intervals:
            return out, None
        lo, hi = np.full((2, len(out)), np.nan)
        lo[sel], hi[sel] = (b[rows[known]] for b in self._recent_q(des, known, cand, pick))
        return out, np.stack([lo, hi])

    def _recent_q(self, des: Design, known: np.ndarray, cand: dict,
                  pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sliding-window conformal offsets of the served residuals (in the served
        predictor's scale) over the last `recent_intervals` ended horizons, pooled over series
        as recent_bounds pools a fleet; the model's in-sample targets do not count."""
        names = list(cand)
        p = np.choose(pd.Categorical(pick, categories=names).codes, [cand[n] for n in names])
        scale = np.where(pick == MODEL, self._zscale(des)[known], des.scale[known])
        y, origins = des.y_true[known], des.origins[known]
        ends = pd.to_datetime(origins, utc=True) + self.horizon * pd.Timedelta(self.freq)
        in_sample = (pick == MODEL) & np.asarray(ends <= pd.Timestamp(self.train_end_))
        with np.errstate(divide="ignore", invalid="ignore"):
            usable = np.isfinite((y - p) / scale) & ~in_sample
        return recent_bounds(origins, y, p, scale, np.zeros(len(y), bool), usable,
                             np.ones(len(y), bool), self.horizon,
                             self.recent_intervals * self.horizon, self.coverage)

    def baselines(self) -> tuple[str, ...]:
        """Baseline columns of every output (level baselines only for agg=mean)."""
        return tuple(b for b in FALLBACKS if (b not in _LEVEL_ONLY or self.agg == "mean")
                     and (b != "ewma_mix" or self.mix))

    def _choose_shrink(self, errs: np.ndarray, origins: np.ndarray) -> float:
        """Best shrink on validation, kept only if it beats persistence (lam=0) robustly.

        Why: on level series the learned change is mostly noise; a gain of 1% on one week of
        validation does not carry over. We resample whole days of validation origins (block
        bootstrap, seeded) and keep lam>0 only if it beats lam=0 in >= 90% of resamples.
        Under MIN_DAY_BLOCKS days (a gateway's 3 h, an LLM trace's minutes) the blocks are
        whole horizons: one day resamples only to itself, and any gain was kept.
        """
        grid = np.asarray(self.shrink_grid, dtype=float)
        best = int(np.argmin(errs.mean(1)))
        if grid[best] == 0.0 or 0.0 not in grid:
            return float(grid[best])
        zero = int(np.flatnonzero(grid == 0.0)[0])
        at = pd.to_datetime(origins)
        day = at.floor("1D").to_numpy()
        if len(np.unique(day)) < MIN_DAY_BLOCKS:  # too few days to resample: whole horizons
            day = at.floor(self.horizon * pd.Timedelta(self.freq)).to_numpy()
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

    def served(self, uid: str) -> str:
        """The predictor serving series `uid` (a series unseen in training gets the model)."""
        served = getattr(self, "served_", {})
        return served.get(str(uid), served.get("*", MODEL))

    def _predict_design(self, des: Design, rows: np.ndarray) -> pd.DataFrame:
        raw = self._raw(des, rows)
        ids = des.ids[rows]
        who = np.array([self.served(u) for u in ids], dtype=object)
        rq = None
        if self.recent_window:
            who, rq = self._repick(des, rows, who)
        p50, zs = raw.copy(), self._zscale(des)[rows].copy()
        lo, hi = np.zeros(len(raw)), np.zeros(len(raw))
        for uid, name in set(zip(ids, who)):
            r = (ids == uid) & (who == name)
            if name != MODEL:
                p50[r], zs[r] = des.baseline(name)[rows][r], des.scale[rows][r]
            lo[r], hi[r] = self._q(uid, name)
        if rq is not None:
            now = np.isfinite(rq[0])
            lo[now], hi[now] = rq[0][now], rq[1][now]
        p50 = self._floor(np.nan_to_num(p50, nan=0.0))
        return pd.DataFrame({
            "unique_id": ids, "origin": des.origins[rows], "y_true": des.y_true[rows],
            "p10": np.minimum(self._floor(p50 + lo * zs), p50), "p50": p50,
            "p90": np.maximum(p50 + hi * zs, p50), "model": who, "lightgbm": raw,
            **{b: des.baseline(b)[rows] for b in self.baselines()}})

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
                    "q": self.q_, "served": self.served_, "val_scores": self.val_scores_,
                    "ewma_alpha": getattr(self, "ewma_alpha_", None),
                    "val": self.val_, "val_mae": self.val_mae_, "train_end": self.train_end_,
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
        self.model_ = LoadedBooster(lgb.Booster(model_str=text))
        self.features_, self.unit_, self.lam_ = man["features"], man["unit"], man["lam"]
        # schema 1 (before per-series fallback): one interval, the model serves every series
        self.q_ = man.get("q") or {"*": {MODEL: [man["q_lo"], man["q_hi"]]}}
        self.q_lo_, self.q_hi_ = self.q_["*"][MODEL]
        self.served_, self.val_scores_ = man.get("served", {}), man.get("val_scores", {})
        if man.get("ewma_alpha") is not None:
            self.ewma_alpha_ = man["ewma_alpha"]
        self.val_, self.val_mae_, self.train_end_ = man["val"], man["val_mae"], man["train_end"]
        return self
