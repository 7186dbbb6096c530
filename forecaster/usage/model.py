"""Short-horizon usage forecaster: mean GPU activity / memory / power of a running pod over the
next `horizon` bins, from its recent samples (one global LightGBM over all pods).

No-leakage rule (identical to the demand forecaster's): a forecast at origin `t` uses only bins
with `ds < t`; its target is `mean(y[t <= ds < t + H])` (usage is a level).

Design (issue 12): the loss is the reported metric's (LightGBM `l1`, weighted by each pod's
scale so that the scale-free target still sums to the absolute error); features at several time
scales (forecaster.usage.features); optional time of day and phase. The model predicts either
the level directly or the residual on the best baseline, whichever scores better on the
validation tail of the training window. The same tail decides what is *served*: the model, or
the baseline it did not beat, per series (`served_series_`) and overall (`served_`); the
forecast's `model` column names it. Hurdle (`hurdle=True`): a classifier of "the next horizon's
mean equals the last value" (a flat memory line, an idle pod's exact zeros); where it says so
with probability >= 0.5 the model's forecast is the last value itself, the point forecast an
absolute-error loss calls for when most of the mass sits on one value; kept only if it validates
better than the plain model. p10/p90: split-conformal bounds of each served
predictor's own validation residuals (apart for idle and moving pods), calibrated as an
interval (forecaster/intervals.py); with `recent_intervals`, re-calibrated at each origin
from the served residuals of the re-pick's window; clipped to the metric's physical range
[y_min, y_max].
Artifacts: `model.txt` (LightGBM text) + `manifest.json` (forecaster/usage/artifact.py); never
pickle.
"""
from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd

from forecaster.repick import recent_pick
from forecaster.usage.artifact import SCHEMA_VERSION, load_usage, save_usage
from forecaster.usage.features import (fleet_features, phase_runs, series_features,
                                       typical_phase_bins)
from forecaster.intervals import conformal_quantiles, recent_bounds
from forecaster.usage.presets import PRESETS, preset

__all__ = ["UsageForecaster", "BASELINES", "PRESETS", "SCHEMA_VERSION", "preset",
           "phase_runs", "typical_phase_bins"]

BASELINES = ("last_value", "mean_last_h", "ses")
TUNABLE = {"n_estimators", "learning_rate", "num_leaves", "min_child_samples", "half_life"}
class UsageForecaster:
    """fit(long df) on regular bins; predict_origins(df, start) for a backtest."""

    def __init__(self, horizon: int = 10, val_frac: float = 0.2, coverage: float = 0.8,
                 n_estimators: int = 300, learning_rate: float = 0.05, num_leaves: int = 15,
                 min_child_samples: int = 100, ses_grid: tuple[float, ...] = (
                     0.05, 0.1, 0.2, 0.3, 0.5, 0.8), seed: int = 0, n_jobs: int = 1,
                 min_gain: float = 0.03, select: str = "series", base: str = "auto",
                 time_of_day: bool = False, weight: bool = True, y_min: float = 0.0,
                 y_max: float | None = None, drop: tuple[str, ...] = (),
                 fleet: bool = False, half_life: float | None = None,
                 hurdle: bool = False, recent_window: int | None = None,
                 recent_scope: str = "series", recent_unit: str = "bins",
                 recent_z: float = 0.0, tune: tuple[dict, ...] = (),
                 recent_intervals: bool = False) -> None:
        self.horizon = horizon
        self.val_frac = val_frac
        self.coverage = coverage
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.ses_grid = ses_grid
        self.seed = seed
        self.n_jobs = n_jobs
        # relative validation margin: the model needs it over the best baseline to be served,
        # and a baseline needs it over the model to replace it on one series
        self.min_gain = min_gain
        self.select = select  # "series": fallback per series; "global": one choice for all
        # "auto": level or residual on the best validation baseline, whichever validates
        # better; "residual": always that residual; "none": the level; or a baseline name
        self.base = base
        self.time_of_day = time_of_day
        self.weight = weight
        self.y_min, self.y_max = y_min, y_max
        self.half_life = half_life  # bins; None: every training origin weighs the same
        self.fleet = fleet  # the load of every series in the table, as features
        self.drop = tuple(drop)  # feature names left out (e.g. LONG_RUN on drifting load)
        self.hurdle = hurdle
        # bins of completed horizons that re-pick the served predictor at each origin (None:
        # the fit-time choice throughout)
        self.recent_window = recent_window
        # "series": each series' own recent errors; "fleet": pooled over every series (a
        # load regime is fleet-wide, and one series' rare steps make its own errors noisy)
        self.recent_scope = recent_scope
        # "bins", or "horizons": the window holds recent_window horizons (the same number of
        # independent errors at every horizon); recent_z: evidence needed to leave the
        # fit-time choice (forecaster/repick.py)
        self.recent_unit, self.recent_z = recent_unit, recent_z
        # p10/p90 re-calibrated at each origin from the same window's served residuals
        self.recent_intervals = recent_intervals
        # other tree settings (num_leaves, min_child_samples, learning_rate, n_estimators,
        # half_life) tried beside the constructor's on the validation tail; the best is kept
        # (`params_`): small recency-weighted trees suit a serving fleet whose load drifts
        # within a day, the defaults a steadier fleet (bench/results/usage_backtest.md)
        self.tune = tuple(tune)
        self.phases_, self.ph_typ_ = False, {}

    # ---------------------------------------------------------------- design matrix
    def design(self, df: pd.DataFrame) -> dict:
        """Rows for every (series, origin); `y_true` NaN where the horizon runs past the data."""
        H = self.horizon
        parts, ids, origins, ys, scales, lasts, means, flats = [], [], [], [], [], [], [], []
        ses: dict[float, list] = {a: [] for a in self.ses_grid}
        fl = fleet_features(df) if self.fleet else None
        for uid, g in df.sort_values(["unique_id", "ds"]).groupby("unique_id", sort=False):
            y = g["y"].to_numpy(dtype=float)
            ph = None
            if self.phases_:
                ph = g["phase"].fillna("").to_numpy() if "phase" in g else np.full(len(y), "")
            X, fut, scale = series_features(y, H, g["ds"].to_numpy() if self.time_of_day
                                            else None, ph, self.ph_typ_)
            if fl is not None:
                X = X.join(fl.reindex(pd.DatetimeIndex(g["ds"])).reset_index(drop=True))
            parts.append(X.drop(columns=list(self.drop), errors="ignore"))
            ids.append(np.full(len(y), uid, dtype=object))
            origins.append(g["ds"].to_numpy())
            ys.append(fut), scales.append(scale)
            prev = pd.Series(y).shift(1)
            lasts.append(prev.to_numpy())
            means.append(prev.rolling(H, min_periods=1).mean().to_numpy())
            r = prev.rolling(H, min_periods=1)
            flats.append((r.max() - r.min()).fillna(0.0).to_numpy() <= 0.0)
            for a in self.ses_grid:
                ses[a].append(prev.ewm(alpha=a, adjust=False).mean().to_numpy())
        return {"X": pd.concat(parts, ignore_index=True), "ids": np.concatenate(ids),
                "origins": np.concatenate(origins), "y_true": np.concatenate(ys),
                "scale": np.concatenate(scales), "last_value": np.concatenate(lasts),
                "mean_last_h": np.concatenate(means), "flat": np.concatenate(flats),
                "ses_all": {a: np.concatenate(v) for a, v in ses.items()}}

    def _trees(self, params: dict | None = None) -> dict:
        """LightGBM settings: the constructor's, overridden by one `tune` candidate."""
        p = {k: getattr(self, k) for k in ("n_estimators", "learning_rate", "num_leaves",
                                           "min_child_samples")}
        p.update({k: v for k, v in (params or {}).items() if k in p})
        return {**p, "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8,
                "random_state": self.seed, "n_jobs": self.n_jobs, "verbose": -1}

    def _lgb(self, params: dict | None = None) -> lgb.LGBMRegressor:
        return lgb.LGBMRegressor(objective="l1", **self._trees(params))

    def _train(self, d: dict, rows: np.ndarray, base: str, params: dict | None = None):
        """l1 on the scale-free target; weight = scale makes it the absolute error in the
        metric's own units (what is reported). The Dask regressor takes no weights."""
        target = (d["y_true"][rows] - self._base_values(d, base)[rows]) / d["scale"][rows]
        w = d["scale"][rows] if self.weight else np.ones(int(rows.sum()))
        half_life = (params or {}).get("half_life", self.half_life)
        if half_life:  # recent origins count more: load regimes drift within a day
            t = pd.to_datetime(d["origins"][rows], utc=True)
            age = (t.max() - t) / (d["step"] * half_life)
            w = w * np.power(0.5, np.asarray(age, dtype=float))
        reg = self._lgb(params)
        if (self.weight or half_life) and isinstance(reg, lgb.LGBMRegressor):
            return reg.fit(d["X"][rows], target, sample_weight=w)
        return reg.fit(d["X"][rows], target)

    def _still_labels(self, d: dict) -> np.ndarray:
        """The horizon's mean equals the last value (to float rounding of the mean)."""
        return np.abs(d["y_true"] - d["last_value"]) <= 1e-9 * d["scale"]

    def _train_still(self, d: dict, rows: np.ndarray):
        lab = self._still_labels(d)[rows]
        if lab.all() or not lab.any():  # one class: nothing to learn, a constant answer
            return float(lab.mean())
        p = self._trees(self.params_)
        clf = lgb.LGBMClassifier(**{**p, "n_estimators": p["n_estimators"] // 2})
        return clf.fit(d["X"][rows], lab.astype(int))

    def _p_still(self, d: dict, rows: np.ndarray, clf) -> np.ndarray:
        if isinstance(clf, float):
            return np.full(int(rows.sum()), clf)
        X = d["X"].loc[rows, self.features_] if hasattr(self, "features_") else d["X"][rows]
        if isinstance(clf, lgb.LGBMClassifier):
            return clf.predict_proba(X)[:, 1]
        return clf.predict(X)  # a loaded Booster: the binary objective's probability

    def _hurdled(self, d: dict, rows: np.ndarray, p: np.ndarray, clf) -> np.ndarray:
        return np.where(self._p_still(d, rows, clf) >= 0.5, d["last_value"][rows], p)

    @staticmethod
    def _base_values(d: dict, base: str) -> np.ndarray:
        return np.zeros(len(d["y_true"])) if base == "none" else d[base]

    def _model_p50(self, d: dict, rows: np.ndarray, reg, base: str) -> np.ndarray:
        X = d["X"].loc[rows, self.features_] if hasattr(self, "features_") else d["X"][rows]
        p = self._base_values(d, base)[rows] + reg.predict(X) * d["scale"][rows]
        return np.clip(p, self.y_min, self.y_max_)

    # ---------------------------------------------------------------- fit
    def fit(self, df: pd.DataFrame) -> "UsageForecaster":
        """Train on every origin of `df` (the training data) whose horizon is complete. A
        `phase` column (the phase of each bin) adds the current phase as features."""
        bad = {k for c in self.tune for k in c} - TUNABLE
        if bad:
            raise ValueError(f"tune: unknown setting(s) {', '.join(sorted(bad))} (tunable: "
                             f"{', '.join(sorted(TUNABLE))})")
        self.phases_ = "phase" in df.columns
        self.ph_typ_ = typical_phase_bins(df) if self.phases_ else {}
        self.y_max_ = float(self.y_max if self.y_max is not None else df["y"].max())
        d = self.design(df)
        self.features_ = list(d["X"].columns)  # this fit's columns (a refit may differ)
        # the re-pick treats the model's errors up to here as in-sample (not evidence)
        self.train_end_ = pd.Timestamp(pd.to_datetime(df["ds"], utc=True).max())
        ok = np.isfinite(d["y_true"]) & np.isfinite(d["last_value"])  # >= 1 bin of history
        if ok.sum() < 100:
            raise ValueError("not enough training origins (need >= 100 with a full horizon)")
        maes = {a: float(np.mean(np.abs(d["y_true"][ok] - d["ses_all"][a][ok])))
                for a in self.ses_grid}  # SES constant chosen on the training data
        self.ses_alpha_ = min(maes, key=maes.get)
        d["ses"] = d["ses_all"][self.ses_alpha_]
        # Validation tail: the last val_frac of origins. Fit rows end their horizon before
        # it starts, so no validation bin is a training target.
        t = pd.to_datetime(d["origins"], utc=True)
        step = pd.Series(t[1:] - t[:-1])
        step = step[step > pd.Timedelta(0)].min()
        d["step"] = self.bin_ = step  # predict_latest refuses series of another width
        cut = t[ok].sort_values()[int(ok.sum() * (1 - self.val_frac))]
        fit_rows = ok & np.asarray(t + self.horizon * step <= cut)
        val_rows = ok & np.asarray(t >= cut)
        if fit_rows.sum() < 50 or val_rows.sum() < 50:
            raise ValueError("not enough origins for a validation tail (need >= 50 each side)")
        y_val = d["y_true"][val_rows]
        preds = {b: d[b][val_rows] for b in BASELINES}
        self.val_scores_ = {b: float(np.mean(np.abs(y_val - preds[b]))) for b in BASELINES}
        best_bl = min(BASELINES, key=self.val_scores_.get)
        bases = {"auto": ["none", best_bl], "residual": [best_bl]}.get(self.base, [self.base])
        best = None
        for params in ({}, *map(dict, self.tune)):
            for b in bases:
                pv = self._model_p50(d, val_rows, self._train(d, fit_rows, b, params), b)
                mae = float(np.mean(np.abs(y_val - pv)))
                if best is None or mae < best[0]:
                    best = (mae, b, pv, params)
        self.val_scores_["model"], self.base_, preds["model"], self.params_ = best
        self.hurdle_ = False
        if self.hurdle:
            ph = self._hurdled(d, val_rows, best[2], self._train_still(d, fit_rows))
            mae = float(np.mean(np.abs(y_val - ph)))
            self.val_scores_["model_no_hurdle"] = best[0]
            if mae < best[0]:
                self.hurdle_, self.val_scores_["model"], preds["model"] = True, mae, ph
        # the gate scores the model as it is served (with the hurdle where that validated)
        self.served_ = ("model" if self.val_scores_["model"] < (1 - self.min_gain) *
                        self.val_scores_[best_bl] else best_bl)
        self.served_series_ = self._select_series(d["ids"][val_rows], y_val, preds)
        self.q_ = conformal_quantiles(y_val, preds, d["scale"][val_rows], d["flat"][val_rows],
                                      self.coverage)
        self.model_ = self._train(d, ok, self.base_, self.params_)
        self.still_ = self._train_still(d, ok) if self.hurdle_ else None
        return self

    def _select_series(self, ids: np.ndarray, y: np.ndarray, preds: dict) -> dict:
        """Per series, what is served. A model that did not beat the best baseline overall
        (by min_gain) is served nowhere: per-series wins of an untrusted model are mostly a
        noisy validation tail. Otherwise a series falls back to its own best baseline where
        that baseline beat the model there by min_gain (an idle pod: its last value, 0)."""
        if self.select == "global" or self.served_ != "model":
            return {}
        err = pd.DataFrame({c: np.abs(y - p) for c, p in preds.items()})
        err["uid"] = ids
        m = err.groupby("uid")[["model", *BASELINES]].mean()
        best_bl = m[list(BASELINES)].idxmin(axis=1)
        fall = m[list(BASELINES)].min(axis=1) < (1 - self.min_gain) * m["model"]
        return {str(u): (str(b) if f else "model") for u, f, b in zip(m.index, fall, best_bl)}

    # ---------------------------------------------------------------- predict
    def predict_origins(self, df: pd.DataFrame, start) -> pd.DataFrame:
        """Forecast + baselines at every origin >= start with a complete horizon in `df`."""
        d = self.design(df)
        t = pd.to_datetime(d["origins"], utc=True)
        return self._serve(d, np.asarray((t >= pd.Timestamp(start)) & np.isfinite(d["y_true"])))

    def predict_latest(self, df: pd.DataFrame) -> pd.DataFrame:
        """The forecast of the next horizon from the end of each series in `df` (regular bins,
        the model's metric and bin width): origin = the bin after each series' last one.
        `y_true` is NaN (the future); with a recent window, the re-pick reads the errors of
        the horizons that ended inside `df`."""
        df = df.sort_values(["unique_id", "ds"])
        last = df.groupby("unique_id", sort=False)["ds"].max()
        step = df.groupby("unique_id", sort=False)["ds"].diff().dropna()
        step = step[step > pd.Timedelta(0)].min() if len(step) else pd.NaT
        if pd.isna(step):
            raise ValueError("series: need at least two bins of one series to know the bin "
                             "width")
        self._check_bins(df, step)
        nxt = pd.DataFrame({"unique_id": last.index, "ds": last.to_numpy() + step, "y": np.nan})
        d = self.design(pd.concat([df[["unique_id", "ds", "y"]], nxt], ignore_index=True))
        t = pd.to_datetime(d["origins"], utc=True)
        ends = pd.to_datetime(pd.Series(d["ids"]).map(nxt.set_index("unique_id")["ds"]),
                              utc=True)
        return self._serve(d, np.asarray(t == pd.DatetimeIndex(ends)))

    def _check_bins(self, df: pd.DataFrame, step: pd.Timedelta) -> None:
        """ValueError naming `series.ds` unless every series lies on a grid of the bin width
        fitted, at that width (a model loaded from before it was stored: `df`'s own width)."""
        fitted = getattr(self, "bin_", None)
        grid = pd.Timedelta(fitted) if fitted is not None else step
        gap = df.groupby("unique_id", sort=False)["ds"].diff()
        off = gap.notna() & (gap % grid != pd.Timedelta(0))
        if off.any():
            r = df[off.to_numpy()].iloc[0]
            raise ValueError(f"series.ds: {r['unique_id']!r} at {r['ds']} is off the "
                             f"{grid.total_seconds():g} s grid of its bins")
        if step != grid:
            raise ValueError(f"series.ds: bins {step.total_seconds():g} s apart; the model in "
                             f"service was fitted on {grid.total_seconds():g} s bins")

    def window_bins(self) -> int:
        """The re-pick's window in bins."""
        k = self.horizon if self.recent_unit == "horizons" else 1
        return int(self.recent_window) * k

    def _recent_q(self, d: dict, pick: np.ndarray, keep: np.ndarray, cand: dict,
                  served: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sliding-window conformal bounds (intervals.recent_bounds) of the served residuals
        at the kept rows; the model's residuals up to its training end are in-sample."""
        p = np.choose(pd.Categorical(served, categories=list(cand)).codes, list(cand.values()))
        t, y = pd.to_datetime(d["origins"][pick], utc=True), d["y_true"][pick]
        te = getattr(self, "train_end_", None)
        usable = np.isfinite(y) & ~((served == "model") & np.asarray(
            t <= te if te is not None else np.zeros(len(y), bool)))
        lo, hi = recent_bounds(d["origins"][pick], y, p, d["scale"][pick], d["flat"][pick],
                               usable, keep, self.horizon, self.window_bins(), self.coverage)
        return lo[keep], hi[keep]

    def _serve(self, d: dict, rows: np.ndarray) -> pd.DataFrame:
        """Served p10/p50/p90, the predictor's name and the baselines at the `rows` origins."""
        d["ses"] = d["ses_all"][self.ses_alpha_]
        known = np.isfinite(d["last_value"])
        rows = rows & known
        # every origin with history when the served predictor is re-picked from recent errors
        pick = known if self.recent_window else rows
        ids = d["ids"][pick]
        cand = {b: d[b][pick] for b in BASELINES}
        cand["model"] = self._model_p50(d, pick, self.model_, self.base_)
        if getattr(self, "hurdle_", False):
            cand["model"] = self._hurdled(d, pick, cand["model"], self.still_)
        served = np.asarray([self.served_series_.get(str(u), self.served_) for u in ids],
                            dtype=object)
        rq = None
        if self.recent_window:
            served = recent_pick(ids, d["origins"][pick], d["y_true"][pick], cand, served,
                                 self.horizon, self.window_bins(), self.recent_scope,
                                 self.min_gain, getattr(self, "train_end_", None),
                                 self.recent_z)
            keep = rows[pick]
            if self.recent_intervals:
                rq = self._recent_q(d, pick, keep, cand, served)
            ids, served = ids[keep], served[keep]
            cand = {c: p[keep] for c, p in cand.items()}
        p50, lo, hi = np.zeros(len(ids)), np.zeros(len(ids)), np.zeros(len(ids))
        s, flat = d["scale"][rows], d["flat"][rows]
        for c, p in cand.items():
            for g, fm in (("flat", flat), ("moving", ~flat)):
                m = (served == c) & fm
                q = self.q_[c][g]
                p50[m], lo[m], hi[m] = p[m], p[m] + q[0] * s[m], p[m] + q[1] * s[m]
        if rq is not None:  # the recent window's bounds where it had enough rows
            ok = np.isfinite(rq[0])
            lo[ok], hi[ok] = p50[ok] + rq[0][ok] * s[ok], p50[ok] + rq[1][ok] * s[ok]
        p50 = np.clip(p50, self.y_min, self.y_max_)
        return pd.DataFrame({
            "unique_id": ids, "origin": d["origins"][rows], "y_true": d["y_true"][rows],
            "p10": np.minimum(np.clip(lo, self.y_min, self.y_max_), p50), "p50": p50,
            "p90": np.maximum(np.clip(hi, self.y_min, self.y_max_), p50), "model": served,
            "model_p50": cand["model"], **{b: cand[b] for b in BASELINES}})

    # ---------------------------------------------------------------- artifacts
    def save(self, path: str | Path) -> None:
        save_usage(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "UsageForecaster":
        return load_usage(cls, path)
