"""Training-time benchmark: time per stage and peak memory of the retraining pipeline.

Run: nice .venv/bin/python bench/train_bench.py [--days 30] [--nodes 64] [--step 300] [--runs 3]
     nice .venv/bin/python bench/train_bench.py --cli --runs 3      # `foresight train --synthetic`
Writes bench/results/train_bench.md (or train_cli.md with --cli).

Each run is a fresh subprocess (so peak RSS is that run's): generate the synthetic history
(simulator), then training.pipeline.run on it into an empty registry: hygiene, then per kind
features -> fit -> backtest -> compare -> publish, then the report. Wall and CPU seconds per
stage; peak RSS from getrusage. Medians over runs. With --cli, times the real command twice
per run: first publish (empty registry) and a second run on a new seed (gate against v1).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from benchenv import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one_run(days: float, nodes: int, step: float, n_estimators: int, threads: int) -> dict:
    import pandas as pd

    from training import sources
    from training.pipeline import TrainConfig, run
    from training.report import write_report

    out: dict = {}
    c0, t0 = time.process_time(), time.perf_counter()
    h = sources.synthetic(seed=0, days=days, nodes=nodes, step_s=step)
    out["generate"] = (time.perf_counter() - t0, time.process_time() - c0)
    out["rows"] = len(h.samples)
    with tempfile.TemporaryDirectory() as tmp:
        c0, t0 = time.process_time(), time.perf_counter()
        res = run(h, f"{tmp}/reg", TrainConfig(holdout=pd.Timedelta("3D") if days >= 10
                                                else pd.Timedelta("1D"),
                                                n_estimators=n_estimators, threads=threads))
        out["pipeline"] = (time.perf_counter() - t0, time.process_time() - c0)
        out["stages"] = res.stages
        out["kinds"] = {k.kind: [k.status, k.reason, k.metrics.get("mae")] for k in res.kinds}
        c0, t0 = time.process_time(), time.perf_counter()
        write_report(res, f"{tmp}/reg", f"{tmp}/out")
        out["report"] = (time.perf_counter() - t0, time.process_time() - c0)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def cli_run() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, seed in (("first (publishes v1)", 0), ("second (new seed, gated)", 1)):
            t0 = time.perf_counter()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.run([str(ROOT / ".venv" / "bin" / "foresight"), "train", "--synthetic",
                                "--seed", str(seed), "--registry", f"{tmp}/reg",
                                "--out", f"{tmp}/out{seed}"], capture_output=True, text=True)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode:
                raise SystemExit(p.stderr[-2000:])
            doc = json.loads(Path(f"{tmp}/out{seed}/metrics.json").read_text())
            out[label] = {"wall": time.perf_counter() - t0,
                          "cpu": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                          "status": {k: v["status"] for k, v in doc["kinds"].items()}}
    return out




def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--step", type=float, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n-estimators", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cli", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(cli_run() if a.cli else one_run(a.days, a.nodes, a.step, a.n_estimators, a.threads)))
        return
    runs = []
    for i in range(a.runs):
        argv = [sys.executable, __file__, "--child", "--days", str(a.days), "--nodes",
                str(a.nodes), "--step", str(a.step), "--n-estimators", str(a.n_estimators),
                "--threads", str(a.threads)]
        p = subprocess.run(argv + (["--cli"] if a.cli else []), capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr[-3000:])
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"run {i + 1}: {runs[-1]}", flush=True)
    med = lambda xs: statistics.median(xs)  # noqa: E731
    cmd = "nice .venv/bin/python bench/train_bench.py " + " ".join(sys.argv[1:])
    lines = [f"- command: `{cmd}`", f"- machine: {machine()}",
             f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", f"- runs: {a.runs} (medians)", ""]
    if a.cli:
        title = "`foresight train --synthetic` end to end (4 d x 16 GPUs, defaults)"
        lines += ["| run | median wall s | max wall s | median CPU s | kinds |", "|---|---:|---:|---:|---|"]
        for label in runs[0]:
            w = [r[label]["wall"] for r in runs]
            c = [r[label]["cpu"] for r in runs]
            lines.append(f"| {label} | {med(w):.1f} | {max(w):.1f} | {med(c):.1f} | "
                         f"{runs[0][label]['status']} |")
        path = a.out or ROOT / "bench" / "results" / "train_cli.md"
    else:
        gpus = a.nodes * 4
        title = (f"Retraining pipeline: {a.days:g} days x {gpus} GPUs at {a.step:g} s "
                 f"({runs[0]['rows']:,} GPU samples, {a.n_estimators} trees, {a.threads} LightGBM thread(s))")
        lines += ["| stage | median wall s | min | max |", "|---|---:|---:|---:|"]
        for key in ("generate", "pipeline", "report"):
            w = [r[key][0] for r in runs]
            lines.append(f"| {key} (CPU {med([r[key][1] for r in runs]):.1f} s) | {med(w):.1f} | "
                         f"{min(w):.1f} | {max(w):.1f} |")
        for st in runs[0]["stages"]:
            w = [r["stages"].get(st, float("nan")) for r in runs]
            lines.append(f"| &nbsp; pipeline: {st} | {med(w):.2f} | {min(w):.2f} | {max(w):.2f} |")
        rss = [r["peak_rss_mb"] for r in runs]
        lines += ["", f"Peak RSS (whole process, generation included): median {med(rss):,.0f} MB, "
                  f"max {max(rss):,.0f} MB.", "", f"Kinds (run 1): {runs[0]['kinds']}"]
        path = a.out or ROOT / "bench" / "results" / "train_bench.md"
    Path(path).write_text(f"# {title}\n\n" + "\n".join(lines) + "\n")
    print(Path(path).read_text())


if __name__ == "__main__":
    main()
