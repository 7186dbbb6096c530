"""Predict a new job's fingerprint and an upper quantile of its peak framebuffer before it starts.

- Key known: the workload's fingerprint; peak-framebuffer upper bound = exp(median log peak of
  the workload's runs + a split-conformal quantile of leave-one-run-out log residuals)
  (per workload when it has >= 50 runs; else pooled over workloads).
- Key unknown: LightGBM on metadata (image, namespace, queue, requested GPUs, priority): a
  regressor of log peak framebuffer whose conformal quantile comes from out-of-fold residuals
  grouped by workload (so it is calibrated for *unseen workloads*), and a classifier that
  names the most similar known workload, whose fingerprint is returned.
Artifacts: LightGBM text models + JSON manifest; never pickle.
"""
from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
from forecaster.manifest import read_manifest

SCHEMA_VERSION = 1
CAT_FEATURES = ("image", "namespace", "queue")
NUM_FEATURES = ("gpu_request", "priority")
MIN_RUNS_OWN = 50  # per-workload quantile only with plenty of runs; pooled otherwise


def conformal_q(resid: np.ndarray, coverage: float) -> float:
    """The ceil((n+1)c)/n empirical quantile (inf when too few residuals)."""
    r = np.sort(np.asarray(resid, dtype=float))
    n = len(r)
    k = int(np.ceil((n + 1) * coverage))
    return float(r[k - 1]) if 0 < k <= n else float("inf")


class NewJobPredictor:
    """fit(runs) where runs has workload, CAT_FEATURES, NUM_FEATURES and peak_fb_mib."""

    def __init__(self, coverage: float = 0.95, n_estimators: int = 200, folds: int = 5,
                 seed: int = 0) -> None:
        self.coverage = coverage
        self.n_estimators = n_estimators
        self.folds = folds
        self.seed = seed

    # ---- features -------------------------------------------------------------------------
    def _X(self, df: pd.DataFrame) -> pd.DataFrame:
        X = pd.DataFrame(index=df.index)
        for c in CAT_FEATURES:
            levels = {v: i for i, v in enumerate(self.levels_[c])}
            X[c] = df[c].astype(str).map(levels).astype(float) if c in df else np.nan
        for c in NUM_FEATURES:
            X[c] = pd.to_numeric(df[c], errors="coerce") if c in df else np.nan
        return X

    def _reg(self) -> lgb.LGBMRegressor:
        return lgb.LGBMRegressor(n_estimators=self.n_estimators, learning_rate=0.05,
                                 num_leaves=15, min_child_samples=5, random_state=self.seed,
                                 n_jobs=1, verbose=-1)

    def _fit_reg(self, X: pd.DataFrame, y: np.ndarray):
        return self._reg().fit(X, y, categorical_feature=list(CAT_FEATURES))

    # ---- fit ------------------------------------------------------------------------------
    def fit(self, runs: pd.DataFrame) -> "NewJobPredictor":
        r = runs.dropna(subset=["peak_fb_mib"]).reset_index(drop=True)
        if len(r) < 5:
            raise ValueError("need at least 5 runs with a peak framebuffer")
        r = r.assign(workload=r["workload"].astype(str))
        ly = np.log(r["peak_fb_mib"].to_numpy(dtype=float).clip(1.0))
        self.levels_ = {c: sorted(r[c].astype(str).unique()) if c in r else []
                        for c in CAT_FEATURES}
        # key path: leave-one-run-out residuals against the workload median
        resid = np.full(len(r), np.nan)
        self.center_ = {}
        for w, idx in r.groupby("workload").groups.items():
            v = ly[np.asarray(idx)]
            self.center_[w] = float(np.median(v))
            if len(v) >= 2:
                resid[np.asarray(idx)] = [v[i] - np.median(np.delete(v, i))
                                          for i in range(len(v))]
        ok = np.isfinite(resid)
        self.q_pooled_ = conformal_q(resid[ok], self.coverage)
        self.q_key_ = {}
        for w, idx in r.groupby("workload").groups.items():
            rw = resid[np.asarray(idx)]
            rw = rw[np.isfinite(rw)]
            self.q_key_[w] = conformal_q(rw, self.coverage) if len(rw) >= MIN_RUNS_OWN \
                else self.q_pooled_
        # model path: out-of-fold residuals with whole workloads held out
        X = self._X(r)
        works = sorted(r["workload"].unique())
        oof = np.full(len(r), np.nan)
        if len(works) >= 2:
            fold_of = {w: i % min(self.folds, len(works)) for i, w in enumerate(works)}
            fold = r["workload"].map(fold_of).to_numpy()
            for f in np.unique(fold):
                tr = fold != f
                m = self._fit_reg(X[tr], ly[tr])
                oof[~tr] = m.predict(X[~tr])
        res = ly - oof
        self.q_model_ = conformal_q(res[np.isfinite(res)], self.coverage)
        self.reg_ = self._fit_reg(X, ly)
        codes = {w: i for i, w in enumerate(works)}
        self.works_ = works
        self.clf_ = lgb.LGBMClassifier(n_estimators=100, num_leaves=15, min_child_samples=3,
                                       random_state=self.seed, n_jobs=1, verbose=-1) \
            if len(works) >= 2 else None
        if self.clf_ is not None:
            self.clf_.fit(X, r["workload"].map(codes), categorical_feature=list(CAT_FEATURES))
        return self

    # ---- predict --------------------------------------------------------------------------
    def predict(self, jobs: pd.DataFrame) -> pd.DataFrame:
        """Per job: source (key|model), workload used, peak_fb_p50_mib, peak_fb_upper_mib."""
        jobs = jobs.reset_index(drop=True)
        w = jobs["workload"].astype(str) if "workload" in jobs else pd.Series([""] * len(jobs))
        known = w.isin(list(self.center_)).to_numpy()
        X = self._X(jobs)
        p50 = np.zeros(len(jobs))
        up = np.zeros(len(jobs))
        used = w.to_numpy(dtype=object).copy()
        if known.any():
            c = np.asarray([self.center_[x] for x in w[known]])
            q = np.asarray([self.q_key_[x] for x in w[known]])
            p50[known], up[known] = np.exp(c), np.exp(c + q)
        if (~known).any():
            c = self.reg_.predict(X[~known])
            p50[~known], up[~known] = np.exp(c), np.exp(c + self.q_model_)
            if self.clf_ is not None:
                used[~known] = [self.works_[i] for i in self.clf_.predict(X[~known])]
            else:
                used[~known] = self.works_[0]
        return pd.DataFrame({"source": np.where(known, "key", "model"), "workload": used,
                             "peak_fb_p50_mib": p50.round(1), "peak_fb_upper_mib": up.round(1)})

    # ---- artifact -------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        (p / "peak_fb.txt").write_text(self.reg_.booster_.model_to_string())
        if self.clf_ is not None:
            (p / "workload.txt").write_text(self.clf_.booster_.model_to_string())
        (p / "manifest.json").write_text(json.dumps({
            "schema_version": SCHEMA_VERSION, "coverage": self.coverage,
            "features": list(CAT_FEATURES + NUM_FEATURES), "levels": self.levels_,
            "center_log_mib": self.center_, "q_key": self.q_key_, "q_pooled": self.q_pooled_,
            "q_model": self.q_model_, "workloads": self.works_}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "NewJobPredictor":
        p = Path(path)
        man = read_manifest(p, SCHEMA_VERSION, "new-job model")
        m = cls(coverage=man["coverage"])
        m.levels_, m.center_, m.q_key_ = man["levels"], man["center_log_mib"], man["q_key"]
        m.q_pooled_, m.q_model_, m.works_ = man["q_pooled"], man["q_model"], man["workloads"]
        m.reg_ = _Booster(lgb.Booster(model_file=str(p / "peak_fb.txt")))
        wf = p / "workload.txt"
        m.clf_ = _Booster(lgb.Booster(model_file=str(wf)), classes=True) if wf.exists() else None
        return m


class _Booster:
    """A loaded Booster with the predict() shape of the sklearn wrappers."""

    def __init__(self, booster: lgb.Booster, classes: bool = False) -> None:
        self.booster, self.classes = booster, classes

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        out = self.booster.predict(X)
        return np.argmax(out, axis=1) if self.classes else out
