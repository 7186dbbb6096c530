"""What was tried to bring the run-time predictor's DLRM p50 MAE under the queue median's
(issue 28, item 4): per-key medians from each key's last N runs only (recency), and shrinkage
of a key's median towards the level below it, on the dev and final splits of bench/runtime.py.

Run: nice .venv/bin/python bench/runtime_variants.py   (writes bench/results/runtime_variants.md)

p50 here is what `RuntimePredictor` answers (the median of log run time of the first level of
workload -> queue x GPU request x priority -> queue -> all whose key has >= min_count runs),
recomputed with pandas so that the variants change one thing each:
- ``last N``: every level's median from its key's last N runs by finish time (the count that
  decides the level is still the key's whole history);
- ``shrink K``: log p50 = (n x key median + K x the answer one level down) / (n + K), from
  the bottom level up (K = 0: the plain model with min_count 1).
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchenv import machine  # noqa: E402
from runtime import split  # noqa: E402

MIN_COUNT = {"openb default": 3, "DLRM 2025": 20}  # bench/runtime.py's dev choices


def level_stats(t: pd.DataFrame, last: int = 0) -> list[tuple[pd.Series, pd.Series]]:
    """Per level (finest first): (runs per key, median log run time per key)."""
    from forecaster.runtime.model import LEVELS, _keys

    lg = pd.Series(np.log(t["runtime_s"].to_numpy(float)))
    out = []
    for cols in LEVELS:
        k = _keys(t, cols).to_numpy()
        n = lg.groupby(k).size()
        use = lg.groupby(k).cumcount(ascending=False).to_numpy() < last if last else \
            np.ones(len(lg), bool)
        out.append((n, lg[use].groupby(k[use]).median()))
    return out


def predict(stats, test: pd.DataFrame, min_count: int, shrink: float | None) -> np.ndarray:
    from forecaster.runtime.model import LEVELS, _keys

    est = np.full(len(test), np.nan)
    for (n, med), cols in reversed(list(zip(stats, LEVELS))):  # coarsest first
        k = _keys(test, cols).to_numpy()
        cnt = n.reindex(k).fillna(0).to_numpy()
        m = med.reindex(k).to_numpy()
        if shrink is None:  # the model: the finest level with enough runs answers
            ok = (cnt >= min_count) | (not cols)
            est = np.where(ok & ~np.isnan(m), m, est)
        else:
            w = cnt / (cnt + shrink) if shrink > 0 else (cnt > 0).astype(float)
            est = np.where(np.isnan(est), m, np.where(cnt > 0, w * np.nan_to_num(m) +
                                                      (1 - w) * est, est))
    return np.exp(est)


def main() -> None:
    from features.trace_pods import dlrm_pods, openb_pods
    from forecaster.runtime.model import runtime_table
    from simulator.replay.compare import shared_traces_dir

    tr = shared_traces_dir()
    cases = {"openb default": openb_pods(tr / "openb-2023" / "csv" /
                                         "openb_pod_list_default.csv"),
             "DLRM 2025": dlrm_pods(tr / "dlrm-2025" / "disaggregated_DLRM_trace.csv")}
    variants = [("model (all runs)", 0, None), *[(f"last {n}", n, None) for n in (5, 20, 50)],
                *[(f"shrink {k}", 0, float(k)) for k in (3, 10, 30, 100)]]
    out = ["# Run-time predictor: variants tried for the DLRM p50 MAE (issue 28)", "",
           "- command: `nice .venv/bin/python bench/runtime_variants.py`",
           f"- machine: {machine()}", f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           "- splits and baselines as `bench/runtime.py` (dev: 50th -> 70th percentile of "
           "creation times; final: after the 70th); p50 MAE in seconds", "",
           "| trace | split | " + " | ".join(v[0] for v in variants) + " | queue median |",
           "|---" * (len(variants) + 3) + "|"]
    for name, pods in cases.items():
        for label, (lo, hi) in (("dev", (0.5, 0.7)), ("final", (0.7, None))):
            train, test = split(pods, lo, hi)
            t, te = runtime_table(train), runtime_table(test)
            y = te["runtime_s"].to_numpy(float)
            q = t.groupby("queue")["runtime_s"].median()
            qm = te["queue"].map(q).fillna(float(t["runtime_s"].median())).to_numpy(float)
            row = []
            for _, last, shrink in variants:
                p = predict(level_stats(t, last), te, MIN_COUNT[name], shrink)
                row.append(f"{np.mean(np.abs(p - y)):.0f}")
            out.append(f"| {name} | {label} | " + " | ".join(row) +
                       f" | {np.mean(np.abs(qm - y)):.0f} |")
            print(out[-1], flush=True)
    (ROOT / "bench" / "results" / "runtime_variants.md").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
