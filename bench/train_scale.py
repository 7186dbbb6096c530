"""Retraining at scale: the full job on partitioned synthetic histories of growing size.

Run: nice .venv/bin/python bench/train_scale.py --gpus 128 512 1024 [--days 7] [--step 30]
         [--group-gpus 16] [--work DIR]
Writes bench/results/train_scale.md (and train_scale.json: every size measured so far, so the
sizes can be run at different times; each row keeps its own date and load average).

Per size, two child processes, each timed with os.wait4 (its own wall, CPU and peak RSS):
1. generate: simulator.partitioned.write_partitioned writes the history straight into
   `foresight ingest`'s layout, day by day (the sample rows of one (day, metric) file at a time);
2. train: `foresight train --data DIR` (every kind: node-group features pass out of core, fit,
   backtest, gate, publish into an empty registry, report).
The slope is a least-squares line of train wall and CPU seconds over millions of samples; the
pair-table stage is `interference.partial` + `interference.features` (wall) per million samples.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchenv import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def timed_child(argv: list[str], log: Path) -> dict:
    """Run argv; wall, CPU (user + system) and peak RSS of that process, from wait4."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{argv[:3]} failed:\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_mb": ru.ru_maxrss / 1024,
            "load_before": load0, "load_after": os.getloadavg()[0]}


def generate(days: float, gpus: int, step: float, out: str) -> None:
    from simulator.config import SimConfig
    from simulator.partitioned import write_partitioned
    from training.sources import TRAINING_METRICS

    cfg = SimConfig(seed=0, days=days, nodes=gpus // 4, step_s=step, load=1.0,
                    mps_node_fraction=0.5, metrics=TRAINING_METRICS)
    print(json.dumps(write_partitioned(cfg, out, lambda s: print(s, flush=True))))


def one_size(gpus: int, a) -> dict:
    work = Path(a.work) / f"g{gpus}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = work / "data"
    gen = timed_child([sys.executable, __file__, "--child-generate", str(gpus), "--days",
                       str(a.days), "--step", str(a.step), "--dir", str(data)], work / "gen.log")
    summary = json.loads((work / "gen.log").read_text().strip().splitlines()[-1])
    print(f"{gpus} GPUs generated: {gen} {summary}", flush=True)
    train = timed_child([str(ROOT / ".venv" / "bin" / "foresight"), "train", "--data", str(data),
                         "--registry", str(work / "reg"), "--out", str(work / "out"),
                         "--group-gpus", str(a.group_gpus)], work / "train.log")
    doc = json.loads((work / "out" / "metrics.json").read_text())
    print(f"{gpus} GPUs trained: {train}", flush=True)
    kinds = {k: {"status": v["status"], "mae": v.get("backtest", {}).get("mae"),
                 "best_baseline": (v.get("best_baseline") or [None, None])[0],
                 "baseline_mae": (v.get("best_baseline") or [None, None])[1]}
             for k, v in doc["kinds"].items()}
    disk = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"gpus": gpus, "days": a.days, "step_s": a.step, "group_gpus": a.group_gpus,
            "samples": summary["rows"], "metrics": 11, "pods": summary["pods"],
            "disk_mb": disk / 2**20, "generate": gen, "train": train,
            "stages": doc["stage_seconds"], "job_peak_mb": doc["peak_rss_mb"], "kinds": kinds,
            "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "machine": machine()}


def fit_line(x: list[float], y: list[float]) -> tuple[float, float]:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((v - mx) ** 2 for v in x)
    slope = sum((u - mx) * (v - my) for u, v in zip(x, y)) / sxx if sxx else float("nan")
    return slope, my - slope * mx


def render(runs: list[dict], command: str) -> str:
    from fingerprint_common import table

    runs = sorted(runs, key=lambda r: r["gpus"])
    r0 = runs[0]
    out = [f"# Retraining at scale: {r0['days']:g} days at a {r0['step_s']:g} s step, "
           f"partitioned samples, node groups of {r0['group_gpus']} GPUs", "",
           f"- command: `{command}`", f"- machine now: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC (each size: its own date "
           "and load below)",
           "- job: `foresight train --data DIR --group-gpus G` on a fresh registry (all four "
           "kinds, 200 trees, 1 LightGBM thread); generation: "
           "`simulator.partitioned.write_partitioned`, one (day, metric) partition at a time",
           "- wall, CPU (user + system) and peak RSS of each child process from `os.wait4`; "
           "load = 1-min load average before -> after the job", ""]
    rows = []
    for r in runs:
        M = r["samples"] / 1e6
        t, g = r["train"], r["generate"]
        rows.append({"GPUs": r["gpus"], "samples/metric (M)": f"{M / r['metrics']:.2f}",
                     "samples (M)": f"{M:.1f}", "train wall s": f"{t['wall_s']:.0f}",
                     "train CPU s": f"{t['cpu_s']:.0f}", "train peak RSS GB":
                     f"{t['peak_mb'] / 1024:.2f}", "CPU s per M": f"{t['cpu_s'] / M:.2f}",
                     "wall s per M": f"{t['wall_s'] / M:.2f}",
                     "load": f"{t['load_before']:.1f} -> {t['load_after']:.1f}",
                     "generate wall / CPU s, peak GB": f"{g['wall_s']:.0f} / {g['cpu_s']:.0f}, "
                                                       f"{g['peak_mb'] / 1024:.1f}",
                     "parquet MB": f"{r['disk_mb']:.0f}", "date": r["date"]})
    out += table(rows) + [""]
    if len(runs) >= 2:
        x = [r["samples"] / 1e6 for r in runs]
        sw, iw = fit_line(x, [r["train"]["wall_s"] for r in runs])
        sc, ic = fit_line(x, [r["train"]["cpu_s"] for r in runs])
        sm, im = fit_line([r["gpus"] for r in runs], [r["train"]["peak_mb"] / 1024 for r in runs])
        out += ["Least-squares lines over the sizes above (x = millions of samples, all metrics):",
                f"- train wall = {iw:.0f} s + {sw:.2f} s per M samples",
                f"- train CPU = {ic:.0f} s + {sc:.2f} s per M samples",
                f"- peak RSS = {im:.2f} GB + {sm * 1000:.2f} GB per 1,000 GPUs", ""]
        for name, ys, s_, i_ in (("CPU", [r["train"]["cpu_s"] for r in runs], sc, ic),
                                 ("wall", [r["train"]["wall_s"] for r in runs], sw, iw)):
            res = [f"{y - (i_ + s_ * xi):+.0f}" for xi, y in zip(x, ys)]
            out.append(f"- {name} residuals of the line per size: {', '.join(res)} s")
        out.append("")
    stages = list(dict.fromkeys(k for r in runs for k in r["stages"]))
    out += ["Stage wall seconds (the job's own timers):", "",
            "| stage | " + " | ".join(f"{r['gpus']} GPUs" for r in runs) + " |",
            "|---|" + "---:|" * len(runs)]
    for s in stages:
        out.append(f"| {s} | " + " | ".join(f"{r['stages'].get(s, float('nan')):.1f}"
                                            for r in runs) + " |")
    pair = [(r["stages"].get("interference.partial", 0) + r["stages"].get(
        "interference.features", 0)) / (r["samples"] / 1e6) for r in runs]
    out += ["", "Pair-table stage (interference.partial + interference.features, wall) per "
            "million samples: " + ", ".join(f"{r['gpus']} GPUs {p:.2f} s/M"
                                            for r, p in zip(runs, pair)), ""]
    out += ["Backtest per kind (primary metric MAE vs the best baseline on the same window):",
            "", "| kind | " + " | ".join(f"{r['gpus']} GPUs" for r in runs) + " |",
            "|---|" + "---|" * len(runs)]
    for k in runs[0]["kinds"]:
        cells = []
        for r in runs:
            v = r["kinds"].get(k, {})
            b = v.get("baseline_mae")
            cells.append(f"{v.get('status')}: {v.get('mae') or float('nan'):.4g} vs "
                         f"{v.get('best_baseline')} {b if b is not None else float('nan'):.4g}")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    out += ["", "Notes:", "",
            "- Out of core: the job splits the day/metric partitions by node group (crc32 of the "
            "node name, `features/sample_store.py`), then reads one group (every day and metric "
            "of its nodes) at a time for hygiene and each kind's features "
            "(`training/streaming.py`); the kinds keep the wide series (fingerprints), the 2-min "
            "usage bins and the pair-table parts. `tests/test_train_streaming.py` checks the "
            "tables, hygiene counts and backtest metrics equal to the in-memory path.",
            "- The usage kind trains on at most 1M 2-min bins (whole series drawn at random): "
            "not binding at 128 GPUs, binding at 512 and 1,024; what it costs in MAE is measured "
            "in `bench/results/train_usage_cap.md`. Its backtest scores every series running at "
            "the cutoff.",
            "- Shared machine: other agents' benches set the load average (column `load`, 2 "
            "cores); where it was high the wall time is inflated (the job got a third to a half "
            "of a core), so the linearity is read on CPU seconds, the job's own.",
            "- Pair table: the old per-episode builder took 6.77 s per M samples at a 30 s step "
            "(`bench/results/pairs_speed.md`, 4 d x 64 GPUs, string input); same-process "
            "comparison on the input the job now reads in `bench/results/"
            "pairs_speed_categorical.md`.",
            "- Not linear: `shard` + `read` wall (the regrouping writes 77 files per node group "
            "into the scratch directory, 4,928 at 1,024 GPUs, and reads them back) grows faster "
            "than the samples while total CPU stays on its line: waiting on the disk, not "
            "investigated further.",
            "- pyarrow does the regrouping, chosen by measurement against DuckDB and Polars "
            "(`shard_engines.md`: 68M samples split and read back in 15.1 s vs 15.6 s and "
            "71.9 s; already a dependency; dictionary-encoded string columns arrive as "
            "categoricals). Since 2026-11-25 its split runs one thread per core (the sizes "
            "above ran single-threaded: 13.1 s of 21.5 s was the split there).",
            "", "Machine and load when each size ran:", ""]
    out += [f"- {r['gpus']} GPUs ({r['date']}, `{r.get('command', '')}`): {r['machine']}"
            for r in runs]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[128, 512, 1024])
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--step", type=float, default=30)
    ap.add_argument("--group-gpus", type=int, default=16)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "foresight-train-scale"))
    ap.add_argument("--keep", action="store_true", help="keep the generated partitions")
    ap.add_argument("--fresh", action="store_true", help="forget earlier sizes")
    ap.add_argument("--render", action="store_true",
                    help="rewrite train_scale.md from train_scale.json, run nothing")
    ap.add_argument("--child-generate", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_generate:
        generate(a.days, a.child_generate, a.step, a.dir)
        return
    cache = RESULTS / "train_scale.json"
    runs = {} if a.fresh or not cache.is_file() else {
        r["gpus"]: r for r in json.loads(cache.read_text())}
    command = "nice .venv/bin/python bench/train_scale.py " + " ".join(sys.argv[1:])
    if a.render:
        (RESULTS / "train_scale.md").write_text(render(list(runs.values()), "; ".join(
            dict.fromkeys(r.get("command", "") for r in runs.values()))))
        print((RESULTS / "train_scale.md").read_text())
        return
    for gpus in a.gpus:
        runs[gpus] = one_size(gpus, a)
        runs[gpus]["command"] = command
        cache.write_text(json.dumps(list(runs.values()), indent=1))
        (RESULTS / "train_scale.md").write_text(render(list(runs.values()), command))
    print((RESULTS / "train_scale.md").read_text())


if __name__ == "__main__":
    main()
