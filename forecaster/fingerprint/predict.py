"""Predict a new job's fingerprint and an upper quantile of its peak framebuffer before it starts.

- Key known, with the job's per-GPU batch size (a pre-start label): peak = exp(log of the
  workload's memory model at that batch size + a conformal quantile of leave-one-run-out log
  residuals). The memory model is fixed + per-sample x batch (weights/optimizer state plus
  activations or KV cache), fitted per workload by least squares on relative errors: the
  shape memory actually has, so it extrapolates to batch sizes not seen in training.
- Key known, no batch size (or a workload whose runs carry none): the order statistic of the
  workload's own run peaks that covers `coverage` of new runs (with `confidence`; the same
  rule as `conformal_q`, the runs being exchangeable with the next one: with `confidence`
  from 59 runs at 95 %, on average from 19); with fewer runs, exp(median log peak + the
  conformal quantile of its leave-one-run-out residuals). A workload whose batch size varies
  spreads its peaks far wider than the pooled residuals of the median assume.
  Quantiles are per workload when it has >= 50 runs, else pooled over workloads; residuals
  are one per run (a pod's GPUs are one run), computed on the training runs only.
- Key unknown: LightGBM on metadata (image, namespace, queue, requested GPUs, priority,
  batch size): a
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
from scipy.stats import beta

from forecaster.booster import LoadedBooster
from forecaster.manifest import ArtifactError, read_manifest

SCHEMA_VERSION = 2  # 2: memory model per workload (batch size)
CAT_FEATURES = ("image", "namespace", "queue")
NUM_FEATURES = ("gpu_request", "priority", "batch_size")
MIN_RUNS_OWN = 50  # per-workload quantile only with plenty of runs; pooled otherwise


def conformal_q(resid: np.ndarray, coverage: float, confidence: float | None = None) -> float:
    """Split-conformal quantile of `resid` (inf when too few residuals).

    confidence None: the ceil((n+1)c)-th smallest (covers a new run with probability >= c on
    average over calibration sets). confidence d: the smallest k-th with P(coverage >= c) >= d
    over calibration sets, the coverage of the k-th order statistic being Beta(k, n + 1 - k)
    (training-conditional conformal, Vovk 2012): a bound that is rarely below c, where the
    average-case one misses c half the time. With too few residuals to promise d (n < ~60 at
    c = d = 0.95) it falls back to the average-case quantile rather than to no bound."""
    r = np.sort(np.asarray(resid, dtype=float))
    n = len(r)
    if confidence is None:
        k = int(np.ceil((n + 1) * coverage))
    else:
        ks = np.arange(1, n + 1)
        ok = beta.sf(coverage, ks, n + 1 - ks) >= confidence
        k = int(ks[ok][0]) if ok.any() else int(np.ceil((n + 1) * coverage))
    return float(r[k - 1]) if 0 < k <= n else float("inf")


def memory_model(bs: np.ndarray, y: np.ndarray) -> dict:
    """fixed + per_sample x batch (MiB), both >= 0, minimising sum(((y - fit) / y) ** 2):
    relative errors, because the bound is multiplicative (a log quantile). `ginv` is
    (A'A)^-1 of that scaled design, for the leverage of a new batch size."""
    A = np.column_stack([1.0 / y, bs / y])
    (c0, c1), *_ = np.linalg.lstsq(A, np.ones(len(y)), rcond=None)
    if c1 <= 0:  # batch size does not raise memory here: a constant
        c0, c1 = float(np.exp(np.median(np.log(y)))), 0.0
    elif c0 < 0:  # through the origin
        c0, c1 = 0.0, float(np.sum(bs / y) / np.sum((bs / y) ** 2))
    return {"fixed": float(c0), "per_sample": float(c1),
            "ginv": np.linalg.pinv(A.T @ A).tolist()}


def memory_at(m: dict, bs: float) -> tuple[float, float]:
    """(predicted peak MiB, leverage) of batch size `bs` under memory model `m`: the
    leverage widens the bound where the fit extrapolates (few runs, a new batch size)."""
    yhat = max(m["fixed"] + m["per_sample"] * bs, 1.0)
    a = np.asarray([1.0, bs]) / yhat
    return yhat, float(max(a @ np.asarray(m["ginv"]) @ a, 0.0))


def _loo_scores(bs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-run-out log residuals of the memory model, divided by sqrt(1 + leverage)
    (normalised conformity scores: comparable across well- and sparsely-sampled fits)."""
    out = np.full(len(y), np.nan)
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        if len(np.unique(bs[keep])) < 2:
            continue
        yhat, h = memory_at(memory_model(bs[keep], y[keep]), bs[i])
        out[i] = (np.log(y[i]) - np.log(yhat)) / np.sqrt(1.0 + h)
    return out


def _batch_sizes(df: pd.DataFrame) -> np.ndarray:
    """The `batch_size` column as floats (NaN where absent or not a number)."""
    if "batch_size" not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df["batch_size"], errors="coerce").to_numpy(dtype=float)


def _by_workload(resid: np.ndarray, groups: dict, coverage: float,
                 confidence: float | None) -> tuple[dict, float]:
    """Per-workload conformal quantiles (pooled for workloads with < MIN_RUNS_OWN runs, or
    too few for the confidence asked)."""
    ok = np.isfinite(resid)
    pooled = conformal_q(resid[ok], coverage, confidence)
    q = {}
    for w, idx in groups.items():
        rw = resid[np.asarray(idx)]
        rw = rw[np.isfinite(rw)]
        own = conformal_q(rw, coverage, confidence) if len(rw) >= MIN_RUNS_OWN else np.inf
        q[w] = own if np.isfinite(own) else pooled
    return q, pooled


class NewJobPredictor:
    """fit(runs) where runs has workload, CAT_FEATURES, NUM_FEATURES and peak_fb_mib."""

    def __init__(self, coverage: float = 0.95, confidence: float | None = 0.95,
                 n_estimators: int = 200, folds: int = 5, seed: int = 0) -> None:
        # confidence: the bound covers >= `coverage` of new runs with this probability (an
        # OOM costs far more than a few % of over-reservation); None: on average only
        self.coverage = coverage
        self.confidence = confidence
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
        y = r["peak_fb_mib"].to_numpy(dtype=float).clip(1.0)
        ly = np.log(y)
        self.levels_ = {c: sorted(r[c].astype(str).unique()) if c in r else []
                        for c in CAT_FEATURES}
        groups = r.groupby("workload").groups
        bs = _batch_sizes(r)
        # key path without configuration: leave-one-run-out residuals vs the workload median
        resid = np.full(len(r), np.nan)
        cfg_resid = np.full(len(r), np.nan)
        self.center_, self.mem_, self.own_ = {}, {}, {}
        for w, idx in groups.items():
            idx = np.asarray(idx)
            v = ly[idx]
            self.center_[w] = float(np.median(v))
            own = conformal_q(v, self.coverage, self.confidence)
            if np.isfinite(own):
                self.own_[w] = own
            if len(v) >= 2:
                resid[idx] = [v[i] - np.median(np.delete(v, i)) for i in range(len(v))]
            # key path with configuration: the workload's memory model at the run's batch size
            has = idx[np.isfinite(bs[idx]) & (bs[idx] > 0)]
            if len(np.unique(bs[has])) >= 2:
                self.mem_[w] = memory_model(bs[has], y[has])
                cfg_resid[has] = _loo_scores(bs[has], y[has])
        self.q_key_, self.q_pooled_ = _by_workload(resid, groups, self.coverage,
                                                    self.confidence)
        self.q_cfg_, self.q_cfg_pooled_ = _by_workload(cfg_resid, {
            w: i for w, i in groups.items() if w in self.mem_}, self.coverage, self.confidence) \
            if self.mem_ else ({}, float("inf"))
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
        self.q_model_ = conformal_q(res[np.isfinite(res)], self.coverage, self.confidence)
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
        bs = _batch_sizes(jobs)
        for i in np.flatnonzero(known):
            x = w.iloc[i]
            if x in self.mem_ and np.isfinite(bs[i]) and bs[i] > 0:
                yhat, h = memory_at(self.mem_[x], bs[i])
                c, q = np.log(yhat), self.q_cfg_[x] * np.sqrt(1.0 + h)
            elif x in self.own_:
                c, q = self.center_[x], self.own_[x] - self.center_[x]
            else:
                c, q = self.center_[x], self.q_key_[x]
            p50[i], up[i] = np.exp(c), np.exp(c + q)
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
            "schema_version": SCHEMA_VERSION, "kind": "new-job", "coverage": self.coverage,
            "confidence": self.confidence,
            "features": list(CAT_FEATURES + NUM_FEATURES), "levels": self.levels_,
            "center_log_mib": self.center_, "q_key": self.q_key_, "q_pooled": self.q_pooled_,
            "q_model": self.q_model_, "workloads": self.works_,
            "memory_model_mib": self.mem_, "q_config": self.q_cfg_,
            "q_config_pooled": self.q_cfg_pooled_, "upper_own_log_mib": self.own_}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "NewJobPredictor":
        p = Path(path)
        man = read_manifest(p, None, "new-job model")
        if not isinstance(man, dict):
            raise ArtifactError(f"{p}: not a new-job predictor (manifest.json is no object)")
        kind = man.get("kind")
        if kind not in (None, "new-job"):  # None: written before manifests named their kind
            raise ArtifactError(f"{p} holds a {kind} model, not a new-job predictor (the "
                                "directory of fingerprint build --predictor)")
        lacks = [k for k in _MANIFEST_KEYS if k not in man]
        if lacks:
            raise ArtifactError(f"{p}: not a new-job predictor (its manifest lacks "
                                f"{', '.join(lacks[:3])})")
        if man["schema_version"] != SCHEMA_VERSION:
            raise ArtifactError(f"{p / 'manifest.json'}: new-job model schema_version "
                                f"{man['schema_version']!r}, expected {SCHEMA_VERSION}")
        m = cls(coverage=man["coverage"], confidence=man["confidence"])
        m.levels_, m.center_, m.q_key_ = man["levels"], man["center_log_mib"], man["q_key"]
        m.q_pooled_, m.q_model_, m.works_ = man["q_pooled"], man["q_model"], man["workloads"]
        m.mem_, m.q_cfg_ = man["memory_model_mib"], man["q_config"]
        m.q_cfg_pooled_ = man["q_config_pooled"]
        m.own_ = man.get("upper_own_log_mib", {})  # absent before: the median + residual bound
        m.reg_ = _booster(p / "peak_fb.txt")
        # save writes the classifier whenever there are two workloads: missing then, it is a
        # deleted file (read as absent, every unknown job was named the first workload)
        m.clf_ = _booster(p / "workload.txt", classes=True) if len(m.works_) >= 2 else None
        return m


_MANIFEST_KEYS = ("schema_version", "coverage", "confidence", "levels", "center_log_mib",
                  "q_key", "q_pooled", "q_model", "workloads", "memory_model_mib", "q_config",
                  "q_config_pooled")


def _booster(f: Path, classes: bool = False) -> LoadedBooster:
    """A saved LightGBM text model; a missing, foreign or truncated one is a one-line error.
    Its shape is checked before LightGBM parses it: LightGBM prints a fatal line per tree on
    stderr, and a truncated file aborts the process."""
    try:
        text = f.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ArtifactError(f"{f}: cannot read the model file ({why})") from None
    try:
        if not text.startswith("tree\n") or "\nend of trees\n" not in text:
            raise lgb.basic.LightGBMError("not a whole LightGBM text model")
        return LoadedBooster(lgb.Booster(model_str=text), classes=classes)
    except lgb.basic.LightGBMError:
        raise ArtifactError(f"{f}: not a LightGBM model (corrupted or truncated): rebuild the "
                            "predictor with fingerprint build --predictor") from None
