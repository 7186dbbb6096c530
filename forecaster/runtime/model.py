"""Run time of a pending pod: p10/p50/p90 from the pods table, by workload with fallbacks.

A pod's run time is `finished - started` (seconds). Quantiles of log run time are kept per key
at each level of a hierarchy (default: workload -> queue x GPU request x priority -> queue ->
every pod); a pod is answered by the first level whose key has at least `min_count` finished
runs (a new workload gets its queue's shape). Empirical quantiles, not a model, because the
pods table carries identity and shape only: there is nothing for a booster to split on that
the key does not already say (bench/results/runtime.md measures it against the baselines).

The [p10, p90] interval is calibrated, not taken raw: per-key quantiles from a handful of runs
are too narrow, and run times drift. The last `val_frac` of the training pods (by finish time)
is held out, the interval widened (or narrowed) around p50 in log space by one factor chosen so
that `coverage` of those pods fall inside, and the stats are then refit on every training pod.

The point forecast may be calibrated too (`calibrate_p50`): one shift of log p50, the one with
the least absolute error (s) on a slice built as the held-out test is (the last `val_frac` of
training pods by *creation*, each answered from the pods *finished* before the first of them).
Why: a held-out window holds only the pods that finished in it, so it is short-biased against
a history that has had time to finish its long runs; on DLRM the per-key medians sat above
70 % of later run times (bench/results/runtime.md). The interval keeps its own calibration and
p50 is clipped into it.

Remaining run time of a *running* pod (`predict_remaining`): with heavy-tailed run times the
time left given survival to age a is nothing like the unconditional quantile minus a. It is
read from the key's own finished runs longer than a (quantiles of {d - a : d > a}, survival
analysis' conditional residual life, as Slurm-style backfill would want), per key with the
same fallbacks, a level answering when at least `min_count` of its runs outlived a. Raw, not
calibrated: the interval's widening is fitted on pods at age 0. Fitted models only (the run
histories are not in the manifest).

Baselines, in every output: `last` (the workload's most recent finished run; queue median for
a new workload) and `queue_median` (the queue's median run time). Artifact: one JSON
manifest (no pickle).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from forecaster.manifest import ArtifactError, read_manifest

SCHEMA_VERSION = 1
LEVELS: tuple[tuple[str, ...], ...] = (("workload",), ("queue", "gpu_request", "priority"),
                                       ("queue",), ())
QUANTILES = {"p10": 0.1, "p50": 0.5, "p90": 0.9}
MIN_RUNTIME_S = 1.0
# shifts of log p50 tried by the point calibration; 0 first so that a tie keeps the median
# key stride of the sorted histories: log run times (>= 0, below 24: e^24 s is 800 years) and
# log elapsed (clipped to [-20, 40]) of one key stay clear of the next key's
SPAN = 64.0
# min_count="auto": the candidates, chosen by p50 MAE on the pods created last in the
# training window (the grid bench/runtime.py chose from on its dev splits)
MIN_COUNTS = (3, 5, 10, 20)
DEFAULT_MIN_COUNT = 5  # and "auto"'s where the training window is too small to choose
SHIFTS = np.concatenate([[0.0], np.round(np.arange(-3.0, 3.01, 0.1), 1)])


def runtime_table(pods: pd.DataFrame, until: pd.Timestamp | float | None = None
                  ) -> pd.DataFrame:
    """Pods with a measured run time (started and finished, before ``until`` when given):
    the pods table plus ``runtime_s``, sorted by finish time."""
    need = {"started", "finished"}
    if missing := need - set(pods.columns):
        raise ValueError(f"pods table lacks {', '.join(sorted(missing))}")
    t = pods.dropna(subset=["started", "finished"])
    if until is not None:
        t = t[t["finished"] < until]
    rt = t["finished"] - t["started"]
    if isinstance(rt.dtype, pd.api.types.DatetimeTZDtype) or np.issubdtype(
            rt.dtype, np.timedelta64):
        rt = rt.dt.total_seconds()
    t = t.assign(runtime_s=np.maximum(rt.astype(float), MIN_RUNTIME_S))
    return t.sort_values("finished", kind="mergesort", ignore_index=True)


def _keys(df: pd.DataFrame, cols: tuple[str, ...]) -> pd.Series:
    if not cols:
        return pd.Series("*", index=df.index)
    parts = [df[c].astype(str) if c in df else pd.Series("", index=df.index) for c in cols]
    out = parts[0]
    for p in parts[1:]:
        out = out + "|" + p
    return out


def _runs(lg: np.ndarray, keys: np.ndarray) -> dict:
    """One level's run histories: log run times sorted by (key, value), each key's first
    position and count, and ``comp`` = key index * SPAN + value (one sorted array, so that a
    single searchsorted finds every pod's position within its own key)."""
    names, code = np.unique(keys.astype(str), return_inverse=True)
    order = np.lexsort((lg, code))
    count = np.bincount(code, minlength=len(names))
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    return {"keys": list(names), "ld": lg[order], "start": start, "count": count,
            "comp": code[order] * SPAN + lg[order]}


def merge_runs(levels: list[list[dict]]) -> tuple[list[dict], list[int]]:
    """Several models' ``runs_`` as one (keys renamed by model): per level the concatenated
    histories, and per model the offset to add to its `key_codes` at each level (a list per
    level). Lets a caller holding one model per refit ask them all in one call."""
    out, offsets = [], []
    for lv in zip(*levels):
        n_keys = np.cumsum([0] + [len(r["keys"]) for r in lv])
        n_runs = np.cumsum([0] + [len(r["ld"]) for r in lv])
        out.append({"keys": [f"{m}:{k}" for m, r in enumerate(lv) for k in r["keys"]],
                    "ld": np.concatenate([r["ld"] for r in lv]),
                    "start": np.concatenate([r["start"] + n_runs[m] for m, r in enumerate(lv)]),
                    "count": np.concatenate([r["count"] for r in lv]),
                    "comp": np.concatenate([r["comp"] + n_keys[m] * SPAN
                                            for m, r in enumerate(lv)])})
        offsets.append(list(n_keys[:-1]))
    return out, offsets


def remaining(runs: list[dict], codes: np.ndarray, elapsed_s, q: float, min_count: int,
              with_next: bool = False):
    """Quantile ``q`` of {d - a : d > a} over each row's key histories (``codes`` (n, levels)
    from `key_codes`, a = ``elapsed_s``), from the first level where at least ``min_count``
    runs outlived a (the last level: at least one); NaN where none. Linear interpolation of
    the log run times, as `_stats` does: at a = 0 it is the key's unconditional quantile.

    ``with_next``: also the age up to which the answer's end (a + remaining) stays the same:
    the shortest run longer than a among the levels consulted (the survivors change only
    there), so that a caller asking again and again may cache it."""
    codes = np.asarray(codes, np.int64)
    a = np.broadcast_to(np.asarray(elapsed_s, float), (len(codes),))
    la = np.clip(np.log(np.maximum(a, 1e-9)), -20.0, 40.0)  # runs are >= 1 s: log >= 0
    out = np.full(len(codes), np.nan)
    nxt = np.full(len(codes), np.inf)
    todo = np.ones(len(codes), bool)
    for i, r in enumerate(runs):
        c = codes[:, i]
        ok = todo & (c >= 0)
        if not ok.any():
            continue
        cc = c[ok]
        pos = np.searchsorted(r["comp"], cc * SPAN + la[ok], side="right")
        m = r["start"][cc] + r["count"][cc] - pos  # runs of the key longer than a
        if with_next:
            at = np.where(m > 0, np.exp(r["ld"][np.minimum(pos, len(r["ld"]) - 1)]), np.inf)
            nxt[ok] = np.minimum(nxt[ok], at)
        need = 1 if i == len(runs) - 1 else min_count
        good = m >= max(need, 1)
        x = q * (np.maximum(m, 1) - 1)
        lo = np.floor(x).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(m, 1) - 1)
        ld = r["ld"]
        top = len(ld) - 1
        v = ld[np.minimum(pos + lo, top)] + (x - lo) * (
            ld[np.minimum(pos + hi, top)] - ld[np.minimum(pos + lo, top)])
        rows = np.flatnonzero(ok)[good]
        out[rows] = np.exp(v[good]) - a[rows]
        todo[rows] = False
    return (out, nxt) if with_next else out


def _seconds(col: pd.Series) -> np.ndarray:
    """Times as float seconds (datetime columns, tz-aware or not, from the epoch)."""
    if pd.api.types.is_datetime64_any_dtype(col):
        epoch = pd.Timestamp(0, tz=getattr(col.dt, "tz", None))
        return (col - epoch).dt.total_seconds().to_numpy(float)
    return pd.to_numeric(col, errors="coerce").to_numpy(float)


class RuntimePredictor:
    """Hierarchical empirical quantiles of run time, with a calibrated [p10, p90]."""

    def __init__(self, levels: tuple[tuple[str, ...], ...] = LEVELS,
                 min_count: int | str = DEFAULT_MIN_COUNT,
                 coverage: float = 0.8, val_frac: float = 0.2,
                 calibrate_p50: bool = False) -> None:
        self.levels = tuple(tuple(lv) for lv in levels)
        self.min_count = min_count
        self.coverage = coverage
        self.val_frac = val_frac
        self.calibrate_p50 = calibrate_p50

    # -- fitting --------------------------------------------------------------------------
    def _stats(self, t: pd.DataFrame) -> list[dict[str, list[float]]]:
        """Per level: key -> [count, log p10, log p50, log p90]."""
        out = []
        lg = np.log(t["runtime_s"].to_numpy(float))
        for cols in self.levels:
            k = _keys(t, cols).to_numpy()
            g = pd.Series(lg).groupby(k)
            q = g.quantile([0.1, 0.5, 0.9]).unstack()
            n = g.size()
            out.append({str(key): [float(n[key]), *map(float, q.loc[key].to_numpy())]
                        for key in n.index})
        return out

    def fit(self, pods: pd.DataFrame) -> "RuntimePredictor":
        t = runtime_table(pods)
        if len(t) < 2:
            raise ValueError(f"{len(t)} pods with a run time: too few to fit")
        self.scale_, self.shift_ = 1.0, 0.0
        self.min_count_ = self._choose_min_count(t) if self.min_count == "auto" \
            else int(self.min_count)
        if self.calibrate_p50:
            self.shift_ = self._point_shift(t)
        n_val = int(len(t) * self.val_frac)
        if n_val >= 20 and len(t) - n_val >= 20:
            # choose the interval's widening on pods finished after the others (time order)
            self.stats_ = self._stats(t.iloc[:-n_val])
            self.scale_ = self._calibrate(t.iloc[-n_val:])
        self.stats_ = self._stats(t)
        lg = np.log(t["runtime_s"].to_numpy(float))
        self.last_ = {str(k): float(v) for k, v in
                      pd.Series(lg).groupby(_keys(t, ("workload",)).to_numpy()).last().items()}
        self.queue_median_ = {str(k): float(v) for k, v in pd.Series(lg).groupby(
            _keys(t, ("queue",)).to_numpy()).median().items()}
        self.global_median_ = float(np.median(lg))
        self.runs_ = [_runs(lg, _keys(t, cols).to_numpy()) for cols in self.levels]
        self.n_train_ = int(len(t))
        self.served_ = "model"
        return self

    def _inner_split(self, t: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """(pods finished before the last `val_frac` of creations, pods created in it): the
        retraining job's own split, inside the training window; None under 20 pods a side."""
        c = _seconds(t["created"] if "created" in t else t["started"])
        if np.isnan(c).all():
            return None
        t_v = float(np.nanquantile(c, 1 - self.val_frac))
        hist, val = t[_seconds(t["finished"]) < t_v], t[c >= t_v]
        return None if len(hist) < 20 or len(val) < 20 else (hist, val)

    def _choose_min_count(self, t: pd.DataFrame) -> int:
        """The MIN_COUNTS value whose model, fitted on the inner split's history, has the
        least p50 MAE on its pods created last (the default where the split is too small)."""
        split = self._inner_split(t)
        if split is None:
            return DEFAULT_MIN_COUNT
        hist, val = split
        y = val["runtime_s"].to_numpy(float)
        err = [np.abs(RuntimePredictor(self.levels, mc, self.coverage, self.val_frac,
                                       self.calibrate_p50).fit(hist).predict(val)["p50"]
                      .to_numpy(float) - y).mean() for mc in MIN_COUNTS]
        return int(MIN_COUNTS[int(np.argmin(err))])

    def _point_shift(self, t: pd.DataFrame) -> float:
        """Shift of log p50 with the least MAE on the pods created last, predicted from the
        pods finished before them (0 when either side is under 20 pods)."""
        split = self._inner_split(t)
        if split is None:
            return 0.0
        hist, val = split
        sub = RuntimePredictor(self.levels, self.min_count_, self.coverage, self.val_frac)
        mid = sub.fit(hist)._lookup(val)[:, 1]
        y = val["runtime_s"].to_numpy(float)
        err = np.abs(np.exp(mid[None, :] + SHIFTS[:, None]) - y[None, :]).mean(axis=1)
        return float(SHIFTS[int(np.argmin(err))])

    def _calibrate(self, val: pd.DataFrame) -> float:
        base = self._lookup(val)
        y = np.log(val["runtime_s"].to_numpy(float))
        lo, mid, hi = base[:, 0], base[:, 1], base[:, 2]
        # smallest s with the share of y in [mid - s (mid - lo), mid + s (hi - mid)] >= coverage
        need = np.where(y < mid, (mid - y) / np.maximum(mid - lo, 1e-9),
                        (y - mid) / np.maximum(hi - mid, 1e-9))
        return float(np.clip(np.quantile(need, self.coverage), 0.25, 20.0))

    # -- prediction -----------------------------------------------------------------------
    def _lookup(self, df: pd.DataFrame) -> np.ndarray:
        """(n, 4): log p10, log p50, log p90 and the level index that answered."""
        out = np.full((len(df), 4), np.nan)
        todo = np.ones(len(df), bool)
        for i, cols in enumerate(self.levels):
            if not todo.any():
                break
            st = self.stats_[i]
            if not st:
                continue
            names = list(st)
            vals = np.array([st[k] for k in names], float)
            idx = pd.Index(names).get_indexer(_keys(df, cols).to_numpy()[todo])
            ok = idx >= 0
            ok[ok] = (vals[idx[ok], 0] >= self.min_count_) | (not cols)
            rows = np.flatnonzero(todo)[ok]
            out[rows, :3] = vals[idx[ok], 1:]
            out[rows, 3] = i
            todo[rows] = False
        return out

    def predict(self, pods: pd.DataFrame) -> pd.DataFrame:
        """p10/p50/p90 run time (s) per row, the level that answered (``level``: its column
        names, ``global`` for every pod) and both baselines."""
        b = self._lookup(pods)
        s = self.scale_
        lo = b[:, 1] - s * (b[:, 1] - b[:, 0])
        hi = b[:, 1] + s * (b[:, 2] - b[:, 1])
        names = ["+".join(c) or "global" for c in self.levels]
        q = _keys(pods, ("queue",)).map(self.queue_median_).fillna(self.global_median_)
        last = _keys(pods, ("workload",)).map(self.last_)
        base = {"last": np.exp(last.fillna(q).to_numpy(float)),
                "queue_median": np.exp(q.to_numpy(float))}
        served = getattr(self, "served_", "model")
        # a baseline of record (the gate kept it: the model did not beat it) serves p50
        p50 = base[served] if served in base else np.clip(
            np.exp(b[:, 1] + getattr(self, "shift_", 0.0)), np.exp(lo), np.exp(hi))
        # widened by a few ulps: a bound equal to an observed run time (integer seconds, the
        # clip floor of a replay) comes back from exp(log(x)) off by one ulp and would miss it
        return pd.DataFrame({
            "p10": np.exp(lo) * (1 - 1e-9), "p50": p50, "p90": np.exp(hi) * (1 + 1e-9),
            "model": served,
            "level": [names[int(i)] if i == i else "" for i in b[:, 3]],
            **base}, index=pods.index)

    def key_codes(self, pods: pd.DataFrame) -> np.ndarray:
        """(n, levels) index of each row's key in ``runs_`` per level (-1: key unseen): the
        part of `predict_remaining` that reads the table, so a caller asking many times about
        the same pods (the replay's drain plan) reads it once."""
        if not hasattr(self, "runs_"):
            raise ValueError("remaining run times need a fitted model (a loaded one carries "
                             "no run histories)")
        out = np.full((len(pods), len(self.levels)), -1, np.int64)
        for i, cols in enumerate(self.levels):
            out[:, i] = pd.Index(self.runs_[i]["keys"]).get_indexer(_keys(pods, cols).to_numpy())
        return out

    def predict_remaining(self, pods: pd.DataFrame, elapsed_s, q: float) -> np.ndarray:
        """Quantile ``q`` of the remaining run time (s) of each pod, running for ``elapsed_s``
        (s, scalar or per row) so far; NaN where no level has a run that long."""
        codes = self.key_codes(pods)  # first: it says what a loaded model lacks
        return remaining(self.runs_, codes, elapsed_s, q, self.min_count_)

    # -- artifact -------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        man = {"schema_version": SCHEMA_VERSION, "kind": "runtime",
               "params": {"levels": [list(c) for c in self.levels], "min_count": self.min_count,
                          "min_count_used": self.min_count_,
                          "coverage": self.coverage, "val_frac": self.val_frac,
                          "calibrate_p50": self.calibrate_p50},
               "scale": self.scale_, "shift": self.shift_, "stats": self.stats_, "last": self.last_,
               "queue_median": self.queue_median_, "global_median": self.global_median_,
               "n_train": self.n_train_, "features": self.features_,
               "served": getattr(self, "served_", "model")}
        (p / "manifest.json").write_text(json.dumps(man))

    @classmethod
    def load(cls, path: str | Path) -> "RuntimePredictor":
        man = read_manifest(path, SCHEMA_VERSION, what="runtime model")
        try:
            pr = man["params"]
            mc = pr["min_count"]
            m = cls(tuple(tuple(c) for c in pr["levels"]), mc if mc == "auto" else int(mc),
                    float(pr["coverage"]), float(pr["val_frac"]),
                    bool(pr.get("calibrate_p50", False)))
            m.scale_, m.stats_ = float(man["scale"]), list(man["stats"])
            m.min_count_ = int(pr.get("min_count_used", mc))  # before "auto": the given one
            m.shift_ = float(man.get("shift", 0.0))  # manifests before the calibration: none
            m.last_, m.queue_median_ = dict(man["last"]), dict(man["queue_median"])
            m.global_median_, m.n_train_ = float(man["global_median"]), int(man["n_train"])
            m.served_ = str(man.get("served", "model"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{path}: runtime manifest is malformed ({exc})") from None
        if len(m.stats_) != len(m.levels):
            raise ArtifactError(f"{path}: runtime manifest has {len(m.stats_)} levels of stats "
                                f"for {len(m.levels)} levels")
        return m

    @property
    def features_(self) -> list[str]:
        return sorted({c for lv in self.levels for c in lv})
