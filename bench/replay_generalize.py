"""Placement that generalizes (issue 13): every openb pod list in shared plus generated
GPU-type-constrained variants, `foresight` vs our `fgd` (and `bestfit` where asked), beside the
published FGD numbers where they exist.

Usage: nice .venv/bin/python bench/replay_generalize.py --seeds 42-51 --workers 2
Runs are cached per (trace, policy, seed) in --cache (one JSON line each) so an interrupted
sweep resumes; the table is rebuilt from the cache. Dev seeds (e.g. 0-9) go to another cache
and another output file (--cache / --out) so that they are never mixed with 42-51.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import current_runs, header, input_digest, write  # noqa: E402

from simulator.replay.compare import (SHARED_TRACES, load_published, parse_seeds,  # noqa: E402
                                      run_grid, shared_traces_dir)

RESULTS = Path(__file__).parent / "results"
READING = "## Reading (written by hand)"  # kept when the table is rebuilt
CPU_TRACES = ("cpu037", "cpu072", "cpu235", "cpu300")
# gpushare20 is in shared too but has no published curve (added in issue 13's second pass)
TRACES = (*SHARED_TRACES, "gpushare20", *CPU_TRACES, "gpuspec05", "default-spec10", "default-spec20",
          "default-spec25", "default-spec33")
# extra policies where a Done-when line or the CPU-only finding needs them (--extra)
EXTRA = {"cpu235": ("bestfit", "fgd-randomtie"), "cpu300": ("bestfit", "fgd-randomtie")}


def _load(cache: Path) -> list[dict]:
    return [json.loads(x) for x in cache.read_text().splitlines()] if cache.exists() else []


def _runs(cache: Path, traces: list[str], seeds: list[int], workers: int,
          extra: tuple[str, ...]) -> list[dict]:
    base = shared_traces_dir() / "openb-2023" / "csv"
    runs = current_runs(_load(cache), base)
    for t in traces:
        digest = input_digest(base, t)
        for p in ("fgd", "foresight", *(x for x in EXTRA.get(t, ()) if x in extra)):
            # again: another sweep may share the cache (other traces)
            runs = current_runs(_load(cache), base)
            done = {(r["trace"], r["policy"], r["seed"]) for r in runs}
            todo = [s for s in seeds if (t, p, s) not in done]
            if not todo:
                continue

            def keep(r: dict) -> None:
                r = {k: v for k, v in r.items() if k != "alloc_curve"} | {"digest": digest}
                runs.append(r)
                with cache.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{r['trace']} {r['policy']} {r['seed']}: {r['alloc_at_100']:.2f} "
                      f"({r['seconds']:.1f} s)", flush=True)

            run_grid([t], [p], todo, base, 1.3, max(1, min(workers, 2)), keep, until=100)
    return runs


def _table(runs: list[dict], traces: list[str], seeds: list[int]) -> list[str]:
    pub = load_published(shared_traces_dir() / "fgd-atc23-results")
    pub_mean = pub.groupby(["trace", "policy"])["100"].mean()
    by = {(r["trace"], r["policy"], r["seed"]): r["alloc_at_100"] for r in runs}
    lines = ["| trace | seeds | fgd | foresight | foresight - fgd (SE) | bestfit | fgd - bestfit "
             "| fgd, random CPU-only tie | published FGD | published BestFit | "
             "foresight - published FGD | checks |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        s_ok = [s for s in seeds if (t, "fgd", s) in by and (t, "foresight", s) in by]
        if not s_ok:
            continue
        fgd = np.array([by[(t, "fgd", s)] for s in s_ok])
        fs = np.array([by[(t, "foresight", s)] for s in s_ok])
        d = fs - fgd
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        bf = [by[(t, "bestfit", s)] for s in s_ok if (t, "bestfit", s) in by]
        pf, pb = pub_mean.get((t, "fgd")), pub_mean.get((t, "bestfit"))
        need = 0.3 if t.startswith("default-spec") and int(t[-2:]) >= 20 else -0.05
        checks = [f"fs>=fgd{need:+.2f}: {'yes' if d.mean() >= need else 'NO'}"]
        if pf is not None:
            checks.append(f"fs>=pub: {'yes' if fs.mean() >= pf else 'NO'}")
        if bf and t == "cpu235":
            checks.append(f"fgd-bf>=1.8: {'yes' if fgd.mean() - np.mean(bf) >= 1.8 else 'NO'}")
        if t in ("cpu235", "cpu300"):
            checks.append(f"fs>=fgd: {'yes' if d.mean() >= 0 else 'NO'}")
        row = [t, str(len(s_ok)), f"{fgd.mean():.2f} ± {fgd.std(ddof=1):.2f}",
               f"{fs.mean():.2f} ± {fs.std(ddof=1):.2f}", f"{d.mean():+.2f} ({se:.2f})"]
        row += [f"{np.mean(bf):.2f}", f"{fgd.mean() - np.mean(bf):+.2f}"] if bf else ["", ""]
        rt = [by[(t, "fgd-randomtie", s)] for s in s_ok if (t, "fgd-randomtie", s) in by]
        row.append(f"{np.mean(rt):.2f}" if rt else "")
        row += [f"{pf:.2f}", f"{pb:.2f}", f"{fs.mean() - pf:+.2f}"] if pf is not None else \
            ["", "", ""]
        lines.append("| " + " | ".join(row + ["; ".join(checks)]) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="all")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default=str(RESULTS / "replay_generalize_runs.jsonl"))
    ap.add_argument("--out", default=str(RESULTS / "replay_generalize.md"))
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--extra", default="bestfit,fgd-randomtie",
                    help="which of the extra policies (bestfit, fgd-randomtie) to run on cpu235/300")
    a = ap.parse_args()
    traces = list(TRACES) if a.traces == "all" else a.traces.split(",")
    seeds = parse_seeds(a.seeds)
    cache = Path(a.cache)
    runs = current_runs(_load(cache), shared_traces_dir() / "openb-2023" / "csv") \
        if a.table_only else _runs(cache, traces, seeds, a.workers,
                                                    tuple(a.extra.split(",")))
    lines = header("openb replay beyond the nine published traces: CPU-heavy and "
                   "GPU-type-constrained pod lists (alloc % at 100% arrived load)",
                   "nice .venv/bin/python bench/replay_generalize.py " + " ".join(sys.argv[1:]))
    lines += ["Protocol of ../shared/traces/README.md (openb-2023), tune 1.3, no departures, "
              f"seeds {a.seeds}. `default-specNN`: `gpuspec05` (default + its 369 real "
              "constraints) with more GPU pods constrained until NN % of GPU pods carry a "
              "`gpu_spec` drawn from gpuspec05's mix (simulator/replay/constrain.py). mean ± "
              "std over seeds; `foresight - fgd` is the paired mean with its standard error. "
              "Published numbers exist only for the nine traces of fgd-atc23-results.", ""]
    out = Path(a.out)
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(READING):].rstrip("\n").split("\n") if READING in old else []
    write(out, lines + _table(runs, traces, seeds) + ([""] + kept if kept else []))


if __name__ == "__main__":
    main()
