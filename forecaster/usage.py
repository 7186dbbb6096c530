"""Short-horizon usage forecaster: mean SM activity / framebuffer / power of a running pod over
the next `horizon` bins, from its recent samples (a global LightGBM over all pods).

No-leakage rule (identical to the demand forecaster's): a forecast at origin `t` uses only bins
with `ds < t`; its target is `agg(y[t <= ds < t + H])` (`agg="mean"`: usage is a level).

Why it can beat "mean of the last horizon": jobs move between phases whose levels are known
from their own history (steady-compute level = the running max; an evaluation or a stall is a
dip that ends). So the features describe the pod's current phase relative to its own levels:
recent means vs. the long-run max, how long the current level has lasted, how long since the
pod was last at its compute level. The model predicts the change from a base forecast (the
mean of the last horizon, or the last value for step-like series such as framebuffer; chosen
on the validation tail), in units of the series' running max (one model, every pod and scale).
With a `phase` column (the pod's phase per bin: reported by the job, segmented from its
samples, or the simulator's truth) the current phase is a feature too: which phase, how long
it has lasted, how long that phase usually lasts (in this pod's history and over the training
pods) and its level so far; the phase of bin ds < t is what is known at origin t.
The correction is kept only if it beats its plain base by `min_gain` on the validation tail.
Quantiles p10/p90: split-conformal on a validation tail of the training window.
Artifacts: `model.txt` (LightGBM text) + `manifest.json`; never pickle.
"""
from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
from forecaster.manifest import read_manifest

SCHEMA_VERSION = 2  # 2: optional phase features
WINDOWS = (3, 5, 10, 30, 60)
# Phase names the `phase` column may carry (features.usage_series.attach_phases); anything
# else is "unknown". Fixed codes, so an artifact reads the same codes it was trained on.
PHASE_NAMES = ("startup", "compute", "eval", "checkpoint", "stall", "idle", "serving_busy",
               "serving_idle")


def phase_runs(phase: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin: phase code (-1 unknown), bins since that phase began (1 = first bin), and the
    median length of the same phase's *completed* runs earlier in the series (NaN if none)."""
    codes = {p: i for i, p in enumerate(PHASE_NAMES)}
    code = np.asarray([codes.get(str(p), -1) for p in phase], dtype=float)
    n = len(code)
    age, own = np.ones(n), np.full(n, np.nan)
    done: dict[float, list[int]] = {}
    for i in range(1, n):
        if code[i] == code[i - 1]:
            age[i] = age[i - 1] + 1
        else:
            done.setdefault(code[i - 1], []).append(int(age[i - 1]))
        past = done.get(code[i])
        if past:
            own[i] = float(np.median(past[-20:]))  # recent runs: a job's rhythm drifts
    return code, age, own


def _series_features(y: np.ndarray, H: int, phase: np.ndarray | None = None,
                     typical: dict | None = None
                     ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows for every origin i of one series (history y[:i], phases of bins < i),
    target, base, scale."""
    n = len(y)
    s = pd.Series(y)
    prev = s.shift(1)  # row i sees y[i-1] and earlier only
    scale = np.maximum(prev.expanding().max().to_numpy(), 1e-6)
    f = {"age": np.arange(n, dtype=float)}
    for k in (1, 2, 3):
        f[f"lag{k}"] = s.shift(k).to_numpy() / scale
    for w in WINDOWS + (H,):
        f[f"mean{w}"] = prev.rolling(w, min_periods=1).mean().to_numpy() / scale
    f["std10"] = prev.rolling(10, min_periods=2).std().to_numpy() / scale
    f["max60"] = prev.rolling(60, min_periods=1).max().to_numpy() / scale
    f["min60"] = prev.rolling(60, min_periods=1).min().to_numpy() / scale
    f["mean_all"] = prev.expanding().mean().to_numpy() / scale
    high = (prev.to_numpy() >= 0.8 * scale).astype(float)
    f["high_share60"] = pd.Series(high).rolling(60, min_periods=1).mean().to_numpy()
    # bins since the pod was last near its compute level, and run length of the current level
    idx = np.arange(n, dtype=float)
    last_high = pd.Series(np.where(high > 0, idx, np.nan)).ffill().to_numpy()
    f["since_high"] = np.nan_to_num(idx - last_high, nan=idx)
    lag1 = f["lag1"]
    change = np.r_[True, np.abs(np.diff(np.nan_to_num(lag1))) > 0.1]
    start = pd.Series(np.where(change, idx, np.nan)).ffill().to_numpy()
    f["run_len"] = idx - start
    # the step that began the current level (a partner pod starting on a shared GPU shows as
    # a step up that a second one follows when its start-up ends; a departure as a step down)
    pv = prev.to_numpy()
    st = start.astype(int)
    f["last_step"] = (pv[st] - np.where(st >= 1, pv[np.maximum(st - 1, 0)], np.nan)) / scale
    if phase is not None:  # the phase of the last complete bin: the pod's current phase
        code, age, own = phase_runs(phase)
        sh = lambda a: np.r_[np.nan, a[:-1]]  # noqa: E731  (row i sees bin i-1)
        f["ph"], f["ph_age"], f["ph_own_typ"] = sh(code), sh(age), sh(own)
        f["ph_own_left"] = f["ph_own_typ"] - f["ph_age"]
        # level of the current phase so far, relative to the series' running max
        cs = np.cumsum(y)
        first = np.arange(n) - age.astype(int) + 1  # first bin of the current run
        lvl = (cs - np.where(first > 0, cs[np.maximum(first - 1, 0)], 0.0)) / age
        f["ph_level"] = sh(lvl) / scale
        if typical:  # the phase's typical run length over the training pods
            f["ph_typ"] = np.asarray([typical.get(str(int(c)), np.nan) if np.isfinite(c)
                                      else np.nan for c in f["ph"]])
            f["ph_left"] = f["ph_typ"] - f["ph_age"]
    base = f[f"mean{H}"] * scale
    fut = s[::-1].rolling(H, min_periods=H).mean()[::-1].to_numpy()  # mean of y[i:i+H]
    return pd.DataFrame(f), fut, base, scale


def typical_phase_bins(df: pd.DataFrame) -> dict:
    """Median length (bins) of completed phase runs per phase code over all series of df."""
    runs: dict[str, list[float]] = {}
    for _, g in df.sort_values(["unique_id", "ds"]).groupby("unique_id", sort=False):
        code, age, _ = phase_runs(g["phase"].fillna("").to_numpy())
        ends = np.flatnonzero(np.r_[np.diff(code) != 0, False])  # last bin of a finished run
        for c, a in zip(code[ends], age[ends]):
            if c >= 0:
                runs.setdefault(str(int(c)), []).append(float(a))
    return {c: float(np.median(v)) for c, v in runs.items()}


class UsageForecaster:
    """fit(long df) on regular bins; predict_origins(df, start) for a backtest."""

    def __init__(self, horizon: int = 10, val_frac: float = 0.2, coverage: float = 0.8,
                 n_estimators: int = 300, learning_rate: float = 0.05, num_leaves: int = 31,
                 min_child_samples: int = 50, ses_grid: tuple[float, ...] = (
                     0.05, 0.1, 0.2, 0.3, 0.5, 0.8), seed: int = 0, n_jobs: int = 1,
                 min_gain: float = 0.03) -> None:
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
        self.min_gain = min_gain  # validation gain the model needs over its plain base
        self.phases_, self.ph_typ_ = False, {}

    def design(self, df: pd.DataFrame) -> dict:
        """Rows for every (series, origin); `y_true` NaN where the horizon runs past the data."""
        H = self.horizon
        parts, ids, origins, ys, bases, scales, ses = [], [], [], [], [], [], {a: [] for a in
                                                                           self.ses_grid}
        lasts = []
        for uid, g in df.sort_values(["unique_id", "ds"]).groupby("unique_id", sort=False):
            y = g["y"].to_numpy(dtype=float)
            ph = None
            if self.phases_:
                ph = g["phase"].fillna("").to_numpy() if "phase" in g else np.full(len(y), "")
            X, fut, base, scale = _series_features(y, H, ph, self.ph_typ_)
            parts.append(X)
            ids.append(np.full(len(y), uid, dtype=object))
            origins.append(g["ds"].to_numpy())
            ys.append(fut), bases.append(base), scales.append(scale)
            prev = pd.Series(y).shift(1)
            lasts.append(prev.to_numpy())
            for a in self.ses_grid:
                ses[a].append(prev.ewm(alpha=a, adjust=False).mean().to_numpy())
        return {"X": pd.concat(parts, ignore_index=True), "ids": np.concatenate(ids),
                "origins": np.concatenate(origins), "y_true": np.concatenate(ys),
                "mean_last_h": np.concatenate(bases), "scale": np.concatenate(scales),
                "last_value": np.concatenate(lasts),
                "ses": {a: np.concatenate(v) for a, v in ses.items()}}

    def _lgb(self) -> lgb.LGBMRegressor:
        return lgb.LGBMRegressor(objective="l1", n_estimators=self.n_estimators,
                                 learning_rate=self.learning_rate, num_leaves=self.num_leaves,
                                 min_child_samples=self.min_child_samples, subsample=0.8,
                                 subsample_freq=1, colsample_bytree=0.8,
                                 random_state=self.seed, n_jobs=self.n_jobs, verbose=-1)

    def fit(self, df: pd.DataFrame) -> "UsageForecaster":
        """Train on every origin of `df` (the training data) whose horizon is complete. A
        `phase` column (the phase of each bin) adds the current phase as features."""
        self.phases_ = "phase" in df.columns
        self.ph_typ_ = typical_phase_bins(df) if self.phases_ else {}
        d = self.design(df)
        ok = np.isfinite(d["y_true"]) & np.isfinite(d["mean_last_h"]) & (d["X"]["age"] >= 1)
        if ok.sum() < 100:
            raise ValueError("not enough training origins (need >= 100 with a full horizon)")
        ok &= np.isfinite(d["last_value"])
        t = pd.to_datetime(d["origins"], utc=True)
        cut = t[ok].sort_values()[int(len(t[ok]) * (1 - self.val_frac))]
        fit_rows, val_rows = ok & (t < cut), ok & (t >= cut)
        # The model corrects a base forecast; which base suits the metric (smooth levels vs.
        # step-like framebuffer) is chosen on the validation tail of the training window.
        # The correction is shrunk toward the base (lam in 0..1, as the demand forecaster
        # does), so a metric the model cannot improve (step-like framebuffer) keeps its base.
        best, plain = None, None
        for base in ("mean_last_h", "last_value"):
            target = (d["y_true"] - d[base]) / d["scale"]
            m = self._lgb().fit(d["X"][fit_rows], target[fit_rows])
            corr = m.predict(d["X"][val_rows]) * d["scale"][val_rows]
            for lam in (0.0, 0.25, 0.5, 0.75, 1.0):
                pv = d[base][val_rows] + lam * corr
                mae = float(np.mean(np.abs(d["y_true"][val_rows] - pv)))
                if best is None or mae < best[0]:
                    best = (mae, base, lam, pv)
                if lam == 0.0 and (plain is None or mae < plain[0]):
                    plain = (mae, base, lam, pv)
        # A correction must earn its place: one validation tail is a noisy judge, and a
        # metric whose moves are mostly unforeseeable (framebuffer: partners arriving on a
        # shared GPU) gains a little there and loses on new data. Keep the plain base unless
        # the model is clearly better on validation.
        if best[0] > (1 - self.min_gain) * plain[0]:
            best = plain
        _, self.base_, self.lam_, pv = best
        target = (d["y_true"] - d[self.base_]) / d["scale"]
        z = (d["y_true"][val_rows] - pv) / d["scale"][val_rows]
        a = (1 - self.coverage) / 2
        self.q_lo_, self.q_hi_ = float(np.quantile(z, a)), float(np.quantile(z, 1 - a))
        # SES baseline: its smoothing constant is chosen on the training data too
        maes = {al: float(np.nanmean(np.abs(d["y_true"][ok] - d["ses"][al][ok])))
                for al in self.ses_grid}
        self.ses_alpha_ = min(maes, key=maes.get)
        self.features_ = list(d["X"].columns)
        self.model_ = self._lgb().fit(d["X"][ok], target[ok])
        return self

    def predict_origins(self, df: pd.DataFrame, start) -> pd.DataFrame:
        """Forecast + baselines at every origin >= start with a complete horizon in `df`."""
        d = self.design(df)
        t = pd.to_datetime(d["origins"], utc=True)
        rows = np.asarray((t >= pd.Timestamp(start)) & np.isfinite(d["y_true"]) &
                          np.isfinite(d["mean_last_h"]) & np.isfinite(d["last_value"]))
        s = d["scale"][rows]
        p50 = d[self.base_][rows] + self.lam_ * self.model_.predict(
            d["X"].loc[rows, self.features_]) * s
        p50 = np.maximum(p50, 0.0)
        return pd.DataFrame({
            "unique_id": d["ids"][rows], "origin": d["origins"][rows],
            "y_true": d["y_true"][rows], "p10": np.maximum(p50 + self.q_lo_ * s, 0.0),
            "p50": p50, "p90": np.maximum(p50 + self.q_hi_ * s, p50),
            "last_value": d["last_value"][rows], "mean_last_h": d["mean_last_h"][rows],
            "ses": d["ses"][self.ses_alpha_][rows]})

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        (p / "model.txt").write_text(self.model_.booster_.model_to_string())
        (p / "manifest.json").write_text(json.dumps({
            "schema_version": SCHEMA_VERSION, "horizon": self.horizon, "base": self.base_,
            "lam": self.lam_,
            "features": self.features_, "q_lo": self.q_lo_, "q_hi": self.q_hi_,
            "ses_alpha": self.ses_alpha_, "ses_grid": list(self.ses_grid),
            "phases": self.phases_, "phase_typical_bins": self.ph_typ_}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "UsageForecaster":
        p = Path(path)
        man = read_manifest(p, SCHEMA_VERSION, "usage model")
        m = cls(horizon=man["horizon"], ses_grid=tuple(man["ses_grid"]))
        m.features_, m.q_lo_, m.q_hi_ = man["features"], man["q_lo"], man["q_hi"]
        m.ses_alpha_, m.base_, m.lam_ = man["ses_alpha"], man["base"], man["lam"]
        m.phases_, m.ph_typ_ = man["phases"], man["phase_typical_bins"]
        m.model_ = _Booster(lgb.Booster(model_file=str(p / "model.txt")))
        return m


class _Booster:
    def __init__(self, booster: lgb.Booster) -> None:
        self.booster = booster

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.booster.predict(X)
