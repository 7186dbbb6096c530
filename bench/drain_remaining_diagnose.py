"""Issue 28, sixth look: how well each rule for a running job's predicted end ranks and
sizes the true remaining run time (no replay: jobs read as started on arrival).

Usage: nice .venv/bin/python bench/drain_remaining_diagnose.py --profiles dlrm,helios \
           --seeds 0-2 [--every 3600]
At every ``--every`` seconds of the 2 measured days, every job running then (arrival <= t <
arrival + duration, 8-GPU nodes' residents and the rest alike) gets a predicted remaining
run time from: the replay's fixed rule (start + p90, once overdue "as long again as it has
run", `effective_end`), and the quantiles 0.5 / 0.9 of the remaining run time given its age
(`RemainingRuntime`), floored or not at start + p90. Printed per rule: Spearman correlation
with the true remaining time (the drain plan orders nodes by it), median |log ratio|, and the
share of true ends before the predicted one, and recall / precision of "ends within the hour"
(what the drain plan acts on). Markdown table to stdout.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rules(jobs, t0: float, t1: float) -> tuple[np.ndarray, dict]:
    from simulator.timeline.runtime import RemainingRuntime, online_models, predicted_runtimes

    models = online_models(jobs, t0, t1)
    p90 = predicted_runtimes(jobs, t0, t1, models=models)["p90"].to_numpy()
    out = {f"given age q={q:g}" + (", floor p90" if fl else ""):
           RemainingRuntime(q).fit(jobs, models, floor_s=p90 if fl else None)
           for q in (0.5, 0.9) for fl in (False, True)}
    return p90, out


def measure(profile: str, seed: int, every: float) -> list[dict]:
    from scheduler_hook.scores.drain import effective_end
    from simulator.replay.compare import shared_traces_dir
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import WARMUP_S, CaseConfig, case_jobs

    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    cfg = CaseConfig(profile=profile, seed=seed, days=2.0)
    jobs = case_jobs(nodes, cfg)
    t0, t1 = -WARMUP_S, cfg.days * 86400.0
    p90, cond = rules(jobs, t0, t1)
    true_end = jobs.arrival + jobs.duration
    rows: dict[str, list] = {"fixed: start + p90, overdue as long again": []}
    rows.update({k: [] for k in cond})
    truth = []
    for t in np.arange(0.0, t1, every):
        run = np.flatnonzero((jobs.arrival <= t) & (true_end > t) & np.isfinite(p90))
        if not len(run):
            continue
        st = jobs.arrival[run]
        truth.append(true_end[run] - t)
        fixed = effective_end(st + p90[run], st, t)
        rows["fixed: start + p90, overdue as long again"].append(fixed - t)
        for k, r in cond.items():
            end, _ = r.end(run, st, t)
            # unknown (older than every run seen): the fixed rule's overdue reading
            rows[k].append(np.where(np.isfinite(end), end, fixed) - t)
    y = np.concatenate(truth)
    out = []
    for k, v in rows.items():
        x = np.concatenate(v)
        rho = pd.Series(x).rank().corr(pd.Series(y).rank())
        out.append({"profile": profile, "seed": seed, "rule": k, "n": len(y),
                    "spearman": rho, "med_abs_log": float(np.median(np.abs(
                        np.log(np.maximum(x, 1.0) / np.maximum(y, 1.0))))),
                    "ends_before": float(np.mean(y <= x)),
                    # what the drain plan needs: which residents free their GPUs soon
                    "recall_1h": float(np.mean(x[y <= 3600] <= 3600)),
                    "precision_1h": float(np.mean(y[x <= 3600] <= 3600))
                    if (x <= 3600).any() else float("nan")})
    return out


def main() -> None:
    from simulator.replay.compare import parse_seeds

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="dlrm,helios")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--every", type=float, default=3600.0)
    a = ap.parse_args()
    if a.every <= 0:
        ap.error("--every must be positive")
    res = pd.DataFrame([r for p in a.profiles.split(",") for s in parse_seeds(a.seeds)
                        for r in measure(p, s, a.every)])
    print("| profile | rule | Spearman (per seed) | median abs log(pred / true) | true end "
          "by the predicted one | ends within 1 h: recall / precision | residents x samples "
          "|\n|---|---|---|---|---|---|---|")
    for (prof, rule), g in res.groupby(["profile", "rule"], sort=False):
        print(f"| {prof} | {rule} | {g.spearman.mean():.3f} ("
              + " / ".join(f"{x:.3f}" for x in g.spearman) + f") | {g.med_abs_log.mean():.2f}"
              f" | {g.ends_before.mean():.3f} | {g.recall_1h.mean():.3f} / "
              f"{g.precision_1h.mean():.3f} | {int(g.n.sum())} |")


if __name__ == "__main__":
    main()
