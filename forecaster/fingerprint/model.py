"""Per-workload phase fingerprints from segmented (pod, GPU) telemetry.

A fingerprint (DESIGN.md "Phases and fingerprints") is, per workload key and per phase: mean,
p50 and p95 of every metric, the time share, the typical duration, plus the transition matrix
between phases, the iteration period (when samples are <= 1 s apart) and the peak framebuffer
(p95 and max over runs). Stored as one human-readable, versioned JSON document.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from features.segments import WideSeries, shared_mask
from forecaster.fingerprint.period import detect_period
from forecaster.fingerprint.segmentation import PhaseSegmenter, _runs, _step_s

SCHEMA_VERSION = 1
DEFAULT_KEY = ("foresight.io/job-template",)
# Pod label with the job's per-GPU batch size (the configuration that sets its peak memory),
# as the simulator writes it and as kube-state-metrics renames it.
BATCH_LABELS = ("foresight.io/batch-size", "label_foresight_io_batch_size")


_WORKER: dict = {}  # set in each forked worker only (`_init_worker`); empty in the parent


def _init_worker(seg: PhaseSegmenter, ws: WideSeries) -> None:
    # a fork Pool hands initargs to the child without pickling: the series are not copied
    _WORKER["work"] = (seg, ws)


def _label_chunk(idx: list[int]) -> list[np.ndarray]:
    seg, ws = _WORKER["work"]
    return [_label_one(seg, ws, k) for k in idx]


def _label_one(seg: PhaseSegmenter, ws: WideSeries, k: int) -> np.ndarray:
    t, v = ws.series(k)
    return seg.label_series(v, ws.columns, _step_s(t))


def workload_keys(pods: pd.DataFrame, labels: pd.DataFrame | None,
                  key: tuple[str, ...] = DEFAULT_KEY) -> pd.Series:
    """Workload key per (namespace, pod): the key labels' values joined by '/'.

    Pods without every key label fall back to the `workload` column of the pods table.
    """
    idx = pd.MultiIndex.from_frame(pods[["namespace", "pod"]].astype(str))
    fallback = pd.Series(pods["workload"].astype(str).to_numpy(), index=idx)
    if labels is None or labels.empty:
        return fallback
    lab = labels[labels["label"].isin(key)]
    wide = lab.pivot_table(index=["namespace", "pod"], columns="label", values="value",
                           aggfunc="first")
    if not all(k in wide.columns for k in key):
        return fallback
    wide = wide[list(key)].dropna()
    joined = wide.astype(str).agg("/".join, axis=1)
    return joined.reindex(idx).fillna(fallback)


def workload_aliases(pods: pd.DataFrame, keys: pd.Series) -> dict[str, str]:
    """{pods-table workload: fingerprint key} where every pod of that workload has one key
    and the two differ. The scheduler hook and the interference model name a pod by its
    workload (`foresight.io/workload`, `app.kubernetes.io/name`, ...); fingerprints may be
    keyed by other labels (the job template): without this, the extender's memory fit and
    power scores found no fingerprint for any pod so labelled (`make demo`'s among them)."""
    w = pods["workload"].astype(str).to_numpy()
    k = keys.astype(str).to_numpy()
    df = pd.DataFrame({"workload": w, "key": k})
    df = df[(df["workload"] != "") & (df["workload"] != df["key"])]
    one = df.groupby("workload")["key"].agg(["nunique", "first"])
    return {str(a): str(b) for a, b in one.loc[one["nunique"] == 1, "first"].items()}


def _stats_block(block: np.ndarray, columns: list[str]) -> dict:
    """mean/p50/p95 of every column (one partition pass per column, NaN-aware if needed)."""
    out = {}
    for i, c in enumerate(columns):
        x = block[:, i]
        if np.isnan(x).any():
            x = x[np.isfinite(x)]
        if len(x) == 0:
            out[c] = {"mean": None, "p50": None, "p95": None}
            continue
        p50, p95 = np.percentile(x, [50, 95])
        out[c] = {"mean": round(float(x.mean()), 6), "p50": round(float(p50), 6),
                  "p95": round(float(p95), 6)}
    return out


class FingerprintModel:
    """fit(wide series, pods, labels) -> fingerprints; save/load as JSON."""

    def __init__(self, key: tuple[str, ...] = DEFAULT_KEY, method: str = "cpd",
                 penalty: float = 10.0, period_max_step_s: float = 1.0,
                 period_window: int = 2048, n_jobs: int = 1) -> None:
        self.key = key
        self.n_jobs = n_jobs
        self.method = method
        self.penalty = penalty
        self.period_max_step_s = period_max_step_s
        self.period_window = period_window

    def segmenter(self, ws: WideSeries | None = None) -> PhaseSegmenter:
        seg = PhaseSegmenter(method=self.method, penalty=self.penalty)
        return seg.fit(ws) if ws is not None else seg

    def label_all(self, ws: WideSeries) -> list[np.ndarray]:
        """Phase label per sample of every series; n_jobs > 1 forks workers (series are
        independent once the segmenter is fitted)."""
        seg = self.segmenter(ws)
        if self.n_jobs <= 1 or len(ws) < 2 * self.n_jobs:
            return [_label_one(seg, ws, k) for k in range(len(ws))]
        import multiprocessing as mp

        # interleaved chunks balance long and short series across workers
        chunks = [list(range(i, len(ws), self.n_jobs)) for i in range(self.n_jobs)]
        with mp.get_context("fork").Pool(self.n_jobs, initializer=_init_worker,
                                         initargs=(seg, ws)) as pool:
            parts = pool.map(_label_chunk, chunks)
        out: list = [None] * len(ws)
        for idx, labs in zip(chunks, parts):
            for k, lab in zip(idx, labs):
                out[k] = lab
        return out

    def runs(self, ws: WideSeries, labels: list[np.ndarray]) -> pd.DataFrame:
        """One row per (pod, GPU) series: peak framebuffer, period, duration, start-up done."""
        rows = []
        sm_col = ws.columns.index("sm") if "sm" in ws.columns else None
        fb_col = ws.columns.index("fb") if "fb" in ws.columns else None
        for k in range(len(ws)):
            t, v = ws.series(k)
            lab = labels[k]
            step = float(np.median(np.diff(t))) / 1e9 if len(t) > 1 else np.nan
            period = None
            if sm_col is not None and step <= self.period_max_step_s:
                st = _runs(lab)
                en = np.r_[st[1:], len(lab)]
                comp = [(b - a, a) for a, b in zip(st, en) if lab[a] == "compute"]
                if comp:
                    n, a = max(comp)
                    period = detect_period(v[a:a + min(n, self.period_window), sm_col], step)
            rows.append({**ws.keys.iloc[k].to_dict(), "samples": len(t), "step_s": step,
                         "peak_fb_mib": float(np.nanmax(v[:, fb_col])) if fb_col is not None
                         and len(v) else np.nan,
                         "past_startup": bool(np.any(lab != "startup")),
                         "period_s": period})
        return pd.DataFrame(rows)

    def fit(self, ws: WideSeries, pods: pd.DataFrame,
            labels: pd.DataFrame | None = None) -> "FingerprintModel":
        keys = workload_keys(pods, labels, self.key)
        self.aliases_ = workload_aliases(pods, keys)
        lab = self.label_all(ws)
        runs = self.runs(ws, lab)
        runs["shared"] = shared_mask(ws)
        runs["workload"] = [keys.get((a, b), "unknown") for a, b in
                            zip(runs["namespace"], runs["pod"])]
        self.runs_ = runs
        self.fingerprints_ = {}
        for w, g in runs.groupby("workload"):
            # a shared GPU's metrics mix two pods: use exclusive runs when there are any
            solo = g[~g["shared"]]
            self.fingerprints_[str(w)] = self._one(ws, lab, solo if len(solo) else g)
        return self

    def _one(self, ws: WideSeries, lab: list[np.ndarray], g: pd.DataFrame) -> dict:
        vals = np.vstack([ws.series(k)[1] for k in g.index])
        labs = np.concatenate([lab[k] for k in g.index])
        steps = g["step_s"].to_numpy()
        dt = np.concatenate([np.full(len(lab[k]), s) for k, s in zip(g.index, steps)])
        durs, trans = {}, {}
        for k, s in zip(g.index, steps):
            st = _runs(lab[k])
            en = np.r_[st[1:], len(lab[k])]
            for i, (a, b) in enumerate(zip(st, en)):
                durs.setdefault(lab[k][a], []).append((b - a) * s)
                if i + 1 < len(st):
                    trans.setdefault(lab[k][a], {}).setdefault(lab[k][st[i + 1]], 0)
                    trans[lab[k][a]][lab[k][st[i + 1]]] += 1
        total = float(dt.sum()) or 1.0
        phases = {}
        for ph in sorted(set(labs)):
            m = labs == ph
            d = np.asarray(durs.get(ph, [0.0]))
            phases[ph] = {
                "time_share": round(float(dt[m].sum()) / total, 6),
                "duration_s": {"p50": round(float(np.median(d)), 3),
                               "p90": round(float(np.percentile(d, 90)), 3),
                               "segments": int(len(d))},
                "metrics": _stats_block(vals[m], ws.columns),
            }
            if "power" in ws.columns:
                phases[ph]["power_w"] = phases[ph]["metrics"]["power"]["mean"]
        transitions = {a: {b: round(n / sum(row.values()), 6) for b, n in sorted(row.items())}
                       for a, row in sorted(trans.items())}
        full = g[g["past_startup"]]
        peaks = full["peak_fb_mib"].dropna().to_numpy()
        per = [p for p in g["period_s"] if p is not None and p == p]
        n_per = int(sum(1 for s in g["step_s"] if s <= self.period_max_step_s))
        return {
            "example_run": self._example(ws, lab, g),
            "runs": int(g["pod"].nunique()), "series": int(len(g)),
            "sample_step_s": round(float(np.median(steps)), 3),
            "phases": phases, "transitions": transitions,
            "iteration_period_s": (round(float(np.median(per)), 4) if per and
                                   len(per) * 2 > n_per else None),
            "peak_fb_mib": {"p95": round(float(np.percentile(peaks, 95)), 1) if len(peaks)
                            else None, "max": float(peaks.max()) if len(peaks) else None,
                            "runs": int(len(peaks))},
        }

    @staticmethod
    def _example(ws: WideSeries, lab: list[np.ndarray], g: pd.DataFrame,
                 points: int = 600, hours: float = 4.0) -> dict:
        """The first `hours` of the longest run, for `fingerprint show`: its phase segments
        and a block-averaged copy (<= `points` points) of SM activity, framebuffer, power."""
        k = int(g["samples"].idxmax())
        t, v = ws.series(k)
        keep = (t - t[0]) <= hours * 3600e9 if len(t) else np.zeros(0, bool)
        t, v, labk = t[keep], v[keep], lab[k][keep]
        rel = (t - t[0]) / 1e9
        st = _runs(labk)
        en = np.r_[st[1:], len(labk)]
        step = float(np.median(np.diff(rel))) if len(rel) > 1 else 0.0
        block = max(1, int(np.ceil(len(t) / points)))
        n = len(t) // block * block or len(t)
        series = {"t_s": [round(float(x), 1) for x in rel[:n:block]]}
        for c in ("sm", "fb", "power"):
            if c in ws.columns and n:
                x = v[:n, ws.columns.index(c)]
                x = x.reshape(-1, block).mean(1) if len(x) % block == 0 else x[::block]
                series[c] = [round(float(y), 4) for y in np.nan_to_num(x)]
        return {"namespace": str(g.loc[k, "namespace"]), "pod": str(g.loc[k, "pod"]),
                "start": str(pd.Timestamp(int(t[0]), tz="UTC")) if len(t) else None,
                "step_s": step,
                "segments": [[str(labk[a]), round(float(rel[a]), 1),
                              round(float((b - a) * step), 1)] for a, b in zip(st, en)],
                "series": series}

    # ---- artifact -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "key": list(self.key), "method": self.method,
                "penalty": self.penalty, "metrics_units": {
                    "sm": "fraction", "tensor": "fraction", "dram": "fraction",
                    "rx": "bytes/s", "tx": "bytes/s", "fb": "MiB", "power": "W",
                    "util": "percent", "mem": "percent"},
                "workloads": self.fingerprints_, "aliases": getattr(self, "aliases_", {})}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, sort_keys=False))

    @classmethod
    def load(cls, path: str | Path) -> "FingerprintModel":
        doc = json.loads(Path(path).read_text())
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"fingerprint schema_version {doc.get('schema_version')!r} "
                             f"is not {SCHEMA_VERSION}")
        m = cls(key=tuple(doc["key"]), method=doc["method"], penalty=doc["penalty"])
        m.fingerprints_ = doc["workloads"]
        m.aliases_ = doc.get("aliases") or {}  # artifacts saved before aliases: none
        return m


def job_table(pods: pd.DataFrame, labels: pd.DataFrame | None,
              key: tuple[str, ...] = DEFAULT_KEY, image_label: str = "image",
              batch_labels: tuple[str, ...] = BATCH_LABELS) -> pd.DataFrame:
    """What is known about each pod before it starts: workload key, image, namespace, queue,
    requested GPUs, priority, and its per-GPU batch size when a label carries it (NaN
    otherwise) (one row per (namespace, pod))."""
    out = pods[["namespace", "pod", "queue", "priority", "gpu_request"]].copy()
    out["workload"] = workload_keys(pods, labels, key).to_numpy()
    idx = pd.MultiIndex.from_frame(out[["namespace", "pod"]].astype(str))
    img = pd.Series("", index=idx)
    bs = pd.Series(np.nan, index=idx)
    if labels is not None and not labels.empty:
        li = labels[labels["label"] == image_label].set_index(["namespace", "pod"])["value"]
        img = li[~li.index.duplicated()].reindex(img.index).fillna("")
        lb = labels[labels["label"].isin(batch_labels)].set_index(["namespace", "pod"])["value"]
        bs = pd.to_numeric(lb[~lb.index.duplicated()], errors="coerce").reindex(idx)
    out["image"] = img.to_numpy()
    out["batch_size"] = bs.to_numpy(dtype=float)
    return out.reset_index(drop=True)


def peak_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Peak framebuffer per pod from FingerprintModel.runs_: exclusive GPUs only (a shared
    GPU's framebuffer is the sum of its pods), runs that got past start-up, max over GPUs."""
    r = runs[~runs["shared"] & runs["past_startup"]]
    return r.groupby(["namespace", "pod"], as_index=False)["peak_fb_mib"].max()
