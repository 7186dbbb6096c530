"""Fingerprint kind: per-workload phase fingerprints + the new-job peak-framebuffer predictor.

Split by time: fingerprints and the predictor are fitted on pods that finished before the
cutoff; the backtest predicts, from what is known before a pod starts (workload key, image,
queue, request), the peak framebuffer of every pod that had not finished by the cutoff and
compares with the peak it showed (each pod's own exclusive-GPU runs). The model never saw
those pods' telemetry.
Baseline: the median peak of the training pods. The artifact holds both files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from artifacts.models import Bundle, load_model
from training.kinds import SkipKind

NAME = "fingerprint"
PRIMARY = "mae"


def _key(df: pd.DataFrame) -> pd.Series:
    return df["namespace"].astype(str) + "/" + df["pod"].astype(str)


def prepare(history, cfg) -> dict:
    return combine([partial(history.samples, history, cfg)], history, cfg)


def partial(samples: pd.DataFrame, history, cfg) -> dict:
    """One node group's share: its (pod, GPU) wide series and each pod's last sample time."""
    from features.schema import has_pod
    from features.segments import wide_series

    s = samples[has_pod(samples["pod"])]
    last = s.groupby(["namespace", "pod"], observed=True, sort=False)["ts"].max()
    last.index = [f"{a}/{b}" for a, b in last.index]
    return {"ws": wide_series(samples), "last": last}


def combine(parts: list[dict], history, cfg) -> dict:
    from features.segments import concat_series
    from forecaster.fingerprint.model import DEFAULT_KEY, FingerprintModel, job_table, peak_runs

    last = pd.concat([p["last"] for p in parts])
    last = last.groupby(level=0).max()
    ws = concat_series([p.pop("ws") for p in parts])
    if len(ws) == 0:
        raise SkipKind("no GPU samples carry a pod label")
    runs = FingerprintModel().fit(ws, history.pods, history.pod_labels).runs_
    jobs = job_table(history.pods, history.pod_labels, DEFAULT_KEY).merge(
        peak_runs(runs), on=["namespace", "pod"])
    times = history.pods.assign(key=_key(history.pods)).drop_duplicates("key").set_index("key")
    # kube_pod_completion_time is often absent: a pod that stopped reporting well before the
    # end of the history has finished when its samples stop
    gone = last[last < history.end - pd.Timedelta("15min")]
    k = _key(jobs)
    jobs = jobs.assign(started=k.map(times["started"]),
                       finished=k.map(times["finished"]).fillna(k.map(gone)))
    return {"history": history, "jobs": jobs, "ws": ws}


def split(data: dict, cutoff: pd.Timestamp) -> tuple[dict, dict]:
    j = data["jobs"]
    tr = j[j["finished"].notna() & (j["finished"] <= cutoff)]
    te = j[~(j["finished"].notna() & (j["finished"] <= cutoff))]
    if len(tr) < 10 or len(te) < 3:
        raise SkipKind(f"{len(tr)} training pods finished / {len(te)} pods still running at "
                       f"{cutoff}: too few pods with a measured peak")
    return {"history": data["history"], "jobs": tr.reset_index(drop=True), "ws": data["ws"]}, \
        {"jobs": te.reset_index(drop=True)}


def fit(train: dict, cfg) -> Bundle:
    from forecaster.fingerprint.model import FingerprintModel
    from forecaster.fingerprint.predict import NewJobPredictor

    h, ws = train["history"], train["ws"]
    keys = set(_key(train["jobs"]))
    # fingerprints see training pods only (their series: each is labelled on its own)
    ws = ws.subset(_key(ws.keys).isin(keys).to_numpy())
    fp = FingerprintModel().fit(ws, h.pods, h.pod_labels)
    try:
        pred = NewJobPredictor(n_estimators=cfg.n_estimators, seed=cfg.seed).fit(train["jobs"])
    except ValueError as exc:
        raise SkipKind(f"new-job predictor: {exc}") from None
    return Bundle(fp, pred)


def score(model: Bundle, test: dict, train: dict) -> tuple[dict, pd.DataFrame]:
    j = test["jobs"]
    p = model.predictor.predict(j.drop(columns=["peak_fb_mib"]))
    y = j["peak_fb_mib"].to_numpy(dtype=float)
    base = float(np.median(train["jobs"]["peak_fb_mib"]))
    pred = pd.DataFrame({"workload": j["workload"], "y": y, "p50": p["peak_fb_p50_mib"],
                         "upper": p["peak_fb_upper_mib"], "source": p["source"]})
    m = {"primary": PRIMARY, "mae": float(np.mean(np.abs(pred["p50"] - y))),
         "baseline_median_mae": float(np.mean(np.abs(base - y))),
         "upper_coverage": float(np.mean(y <= pred["upper"])),
         "backtest_pods": int(len(j)), "train_pods": int(len(train["jobs"])),
         "unit": "MiB peak framebuffer"}
    if model.fingerprints is not None:
        pred.attrs["phase_share"] = {w: {ph: v["time_share"] for ph, v in fp["phases"].items()}
                                     for w, fp in model.fingerprints.fingerprints_.items()}
    return m, pred


def save(model: Bundle, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.fingerprints.save(path / "fingerprints.json")
    model.predictor.save(path / "predictor")


def load(path: Path) -> Bundle:
    return load_model(NAME, path)


def features(model: Bundle) -> list[str]:
    from forecaster.fingerprint.predict import CAT_FEATURES, NUM_FEATURES

    return list(CAT_FEATURES + NUM_FEATURES)


def plot(pred: pd.DataFrame, ax) -> str:
    share = pred.attrs.get("phase_share")
    if share:  # the fingerprints themselves: time share of each phase per workload
        df = pd.DataFrame(share).T.fillna(0.0)
        df.index = [w.replace("-template", "") for w in df.index]
        df.plot.barh(stacked=True, ax=ax, width=0.8, legend=True)
        ax.legend(fontsize=6, ncol=4, loc="lower right")
        ax.set_xlabel("share of run time")
        ax.set_title("fingerprints: phase time share per workload (training pods)", fontsize=9)
        top = df.idxmax(axis=1)
        return ("Largest phase per workload: " +
                ", ".join(f"{w} {ph} {df.at[w, ph]:.0%}" for w, ph in list(top.items())[:6]) + ".")
    return extra_plot(pred, ax)


def extra_plot(pred: pd.DataFrame, ax) -> str:
    """Predicted (before start) vs actual peak framebuffer of the backtest pods."""
    lim = float(max(pred["y"].max(), pred["upper"].max())) / 1024 * 1.05
    ax.scatter(pred["y"] / 1024, pred["p50"] / 1024, s=12, label="p50")
    ax.scatter(pred["y"] / 1024, pred["upper"] / 1024, s=10, marker="^", alpha=0.6,
               label="upper bound")
    ax.plot([0, lim], [0, lim], "k--", lw=0.8)
    ax.set_xlabel("actual peak framebuffer (GiB)")
    ax.set_ylabel("predicted before start (GiB)")
    ax.set_title("new-job peak framebuffer, predicted before start: backtest pods", fontsize=9)
    ax.legend(fontsize=7)
    return (f"{len(pred)} pods: the upper bound covers the actual peak of "
            f"{float((pred['y'] <= pred['upper']).mean()):.0%}; p50 MAE "
            f"{float((pred['p50'] - pred['y']).abs().mean()) / 1024:.2g} GiB.")
