"""Straggler signal on the PAI 2020 mini-batch trace (per-worker normalized step times).

    nice .venv/bin/python bench/fingerprint_pai.py [--trace DIR_OR_CSV] [--out NAME.md]
DIR_OR_CSV: a directory of `job_*_norm.csv` files (columns worker, time, batch_time_norm;
`coefficient_variation.csv` beside them is optional) or one such job file.
Part 1 runs the detector on the four real jobs. Part 2 checks sensitivity and false alarms by
injecting a slow worker (x1.10 / x1.20 / x1.50 over the last 40 % of steps) into each job,
one worker at a time, and counting how often it is flagged while the untouched workers keep
their part-1 verdict. Part 3 summarises coefficient_variation.csv (no worker identity there).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fingerprint_common import RESULTS, ROOT, header, table  # noqa: E402
from benchenv import READ_ERRORS, command, fail, shown  # noqa: E402
from forecaster.fingerprint.straggler import flag_stragglers  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "pai-2020-minibatch"
NEED = {"worker", "time", "batch_time_norm"}


def read_jobs(trace: Path) -> dict[str, pd.DataFrame]:
    """Job name -> its per-worker step table, from a directory of job files or one file."""
    files = [trace] if trace.is_file() else sorted(trace.glob("job_*_norm.csv"))
    if not files:
        raise ValueError("no job_*_norm.csv file")
    jobs = {p.stem: pd.read_csv(p, index_col=0) for p in files}
    for name, d in jobs.items():
        if not NEED <= set(d.columns) or d.empty:
            raise ValueError(f"{name}: need rows with columns {', '.join(sorted(NEED))}")
        d["batch_time_norm"] = pd.to_numeric(d["batch_time_norm"], errors="raise")
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACE,
                    help="directory of job_*_norm.csv (or one job file); default the shared one")
    ap.add_argument("--out", default="fingerprint_pai.md", help="results file under bench/results/")
    args = ap.parse_args()
    trace: Path = args.trace
    if not trace.exists():
        raise SystemExit(f"trace not found: {trace}")
    t0 = time.time()
    try:
        jobs = read_jobs(trace)
    except READ_ERRORS as e:
        fail("fingerprint_pai.py", trace, e)
    cv_path = (trace if trace.is_dir() else trace.parent) / "coefficient_variation.csv"
    lines = header("Straggler signal on PAI 2020 mini-batch times",
                   command("fingerprint_pai.py"), [
        f"data: {shown(trace)} ({', '.join(jobs)}; "
        f"{cv_path.name if cv_path.is_file() else 'no coefficient_variation.csv'})",
        "detector: forecaster/fingerprint/straggler.py — step time / median over workers, "
        "rolling median over 20 steps, a step is flagged above 1.05x the workers' median, "
        "straggler = flagged in >= 20 % of steps"])
    rows, base = [], {}
    for name, d in jobs.items():
        r = flag_stragglers(d)
        base[name] = r.set_index("worker")["straggler"]
        for _, x in r.iterrows():
            rows.append({"job": name, "worker": x["worker"], "steps": int(d["time"].nunique()),
                         "median_rel_time": float(x["median_rel_time"]),
                         "flagged_share": float(x["flagged_share"]),
                         "straggler": bool(x["straggler"])})
    df = pd.DataFrame(rows)
    lines += ["## 1. Real jobs: per-worker verdicts (flagged workers and their peers' range)", ""]
    summ = []
    for name, g in df.groupby("job"):
        s = g[g["straggler"]]
        summ.append({"job": name, "workers": len(g), "steps": int(g["steps"].iloc[0]),
                     "flagged": ", ".join(f"w{int(w)} ({m:.2f}x)" for w, m in
                                          zip(s["worker"], s["median_rel_time"])) or "none",
                     "others_median_rel_time": f"{g[~g['straggler']]['median_rel_time'].min():.2f}"
                     f"-{g[~g['straggler']]['median_rel_time'].max():.2f}"})
    lines += table(summ)
    rng = np.random.default_rng(0)
    inj = []
    for factor in (1.10, 1.20, 1.50):
        for name, d in jobs.items():
            steps = np.sort(d["time"].unique())
            t_from = steps[int(len(steps) * 0.6)]
            for w in d["worker"].unique():
                if base[name].get(w, False):
                    continue  # already a straggler: injecting says nothing
                d2 = d.astype({"batch_time_norm": float}).copy()
                m = (d2["worker"] == w) & (d2["time"] >= t_from)
                d2.loc[m, "batch_time_norm"] *= factor
                r = flag_stragglers(d2).set_index("worker")["straggler"]
                others = [v for k, v in r.items() if k != w]
                was = [base[name].get(k, False) for k in r.index if k != w]
                inj.append({"factor": factor, "job": name, "detected": bool(r[w]),
                            "false_alarms": int(sum(o and not b for o, b in zip(others, was)))})
    idf = pd.DataFrame(inj)
    agg = idf.groupby("factor").agg(cases=("detected", "size"), detected=("detected", "mean"),
                                    false_alarms=("false_alarms", "sum")).reset_index()
    lines += ["", "## 2. Injected slow worker (last 40 % of steps), all non-straggler workers", ""]
    lines += table(agg.to_dict("records"))
    per_job = idf.groupby(["factor", "job"])["detected"].mean().unstack().reset_index()
    lines += ["", "Detection rate per job:", ""] + table(per_job.to_dict("records"))
    lines += ["", *cv_summary(trace, cv_path), "", "## Findings", ""]
    # the findings are prose about the dev jobs' tables: another trace gets its tables only
    lines += FINDINGS if Path(os.path.abspath(trace)) == TRACE else [
        f"- none written for {shown(trace)}: the findings of the committed "
        "fingerprint_pai.md are about the dev jobs (job_1 .. job_4); read the tables above"]
    lines += ["", f"wall {time.time() - t0:.0f} s"]
    (RESULTS / args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cv_summary(trace: Path, cv_path: Path) -> list[str]:
    """Part 3 from coefficient_variation.csv (jobs x steps, CV across workers), if present."""
    if not cv_path.is_file():
        return ["## 3. coefficient_variation.csv: not beside the job files, skipped"]
    try:
        cv = pd.read_csv(cv_path, index_col=0).apply(pd.to_numeric, errors="raise")
    except READ_ERRORS as e:
        fail("fingerprint_pai.py", cv_path, e)
    med = cv.median(axis=1)
    return [f"## 3. coefficient_variation.csv ({len(cv)} jobs x up to {cv.shape[1]} steps, "
            "CV across workers)", "",
            f"- median per-job CV: p10 {med.quantile(0.1):.3f}, p50 {med.median():.3f}, "
            f"p90 {med.quantile(0.9):.3f}",
            f"- jobs whose median CV > 0.2 (persistent imbalance): {(med > 0.2).sum()} of "
            f"{len(med)}",
            f"- steps with CV > 3x the job's median CV (transient straggler episodes): "
            f"{float((cv.gt(3 * med, axis=0) & cv.notna()).sum().sum() / cv.notna().sum().sum()):.1%}"]


#: Read from the dev trace's tables (pai-2020-minibatch): written for those four jobs only.
FINDINGS = [
    "- A persistently slow worker is flagged: jobs 1 and 3 each have 2-3 workers "
    "5-9 % slower than their peers for most of the run (plausibly the workers placed "
    "on another node); job 2 has one. In synchronous data parallelism every step "
    "waits for them, so the job runs at their pace.",
    "- Injected slowdowns of 10-50 % are found in jobs 1-3 (except workers that "
    "were already faster than the median by more than the injected factor: the "
    "signal is relative to peers), with no false alarm on any other worker.",
    "- Job 4 is not a straggler case but a bimodal job: half its workers run 3-4x "
    "slower than the other half for the whole run (heterogeneous roles or GPUs). "
    "The median-relative detector flags that slow half and cannot see a further "
    "slowdown of a fast-half worker (it stays below the median): for such jobs the "
    "reference should be per worker group, which the trace does not label.",
    "- coefficient_variation.csv shows the same split over 100 jobs: most jobs are "
    "balanced (median CV < 0.1) while about a third have a persistent imbalance, and "
    "transient episodes (CV > 3x the job's usual) cover a few % of steps."]


if __name__ == "__main__":
    main()
