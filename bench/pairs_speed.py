"""Pair-table build speed: the vectorized builder against the per-episode one it replaced.

Run: nice .venv/bin/python bench/pairs_speed.py [--sizes 2x8 4x16 4x32] [--runs 3]
Writes bench/results/pairs_speed.md.

Each size is DAYSxNODES[@STEP] of the synthetic cluster (4 GPUs per node, STEP seconds, 30 by
default, seed 0); 30 d x 64 nodes @ 300 s is the configuration of bench/results/train_bench.md. The
reference is `features/pairs.py` as of git b9ce7c1 (the code before this change), loaded from
git into this same process, so both run on the same input and the same machine load; its
output must equal the new one's (a difference fails the bench). CPU seconds are given beside
wall seconds: this machine is shared.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchenv import machine  # noqa: E402
from fingerprint_common import table  # noqa: E402

REFERENCE_REV = "b9ce7c1"


def reference_module():
    src = subprocess.run(["git", "show", f"{REFERENCE_REV}:features/pairs.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "pairs_reference.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("pairs_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(fn, *a, **kw):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    import numpy as np
    import pandas as pd

    from features.pairs import build_pair_table
    from training import sources

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["4x16", "8x64@300"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--categorical", action="store_true",
                    help="give the new builder the label columns as categoricals, as the "
                         "training job reads them from Parquet dictionaries (the old builder "
                         "keeps the strings it was given before)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "pairs_speed.md"))
    args = ap.parse_args()
    ref = reference_module()
    rows = []
    for size in args.sizes:
        dims, _, step = size.partition("@")
        days, nodes = dims.split("x")
        h = sources.synthetic(seed=0, days=float(days), nodes=int(nodes),
                              step_s=float(step or 30))
        kw = dict(gpu_sharing=h.gpu_sharing or None, gpu_model=h.gpu_model)
        new_in = h.samples.astype({c: "category" for c in ("node", "gpu", "uuid", "namespace",
                                                           "pod", "metric")}) \
            if args.categorical else h.samples
        new_t, old_t = [], []
        for _ in range(args.runs):
            (p_new, _), w, c = timed(build_pair_table, new_in, h.pods, **kw)
            new_t.append((w, c))
            (p_old, _), w, c = timed(ref.build_pair_table, h.samples, h.pods, **kw)
            old_t.append((w, c))
        # the columns added since the reference (`step_s`, 2026-11-27) are not compared
        same = list(p_new.columns.drop(["a_step_s", "b_step_s"], errors="ignore")) == \
            list(p_old.columns) and len(p_new) == len(p_old)
        num = p_old.select_dtypes("number").columns
        same = same and np.allclose(p_new[num].to_numpy(float), p_old[num].to_numpy(float),
                                    rtol=1e-7, equal_nan=True)
        if not same:
            raise SystemExit(f"{size}: the new pair table differs from the reference")
        m = len(h.samples) / 1e6
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        rows.append({"size": f"{days} d x {int(nodes) * 4} GPUs @ {step or 30} s",
                     "samples_M": round(m, 2),
                     "episodes": len(p_new),
                     "old_wall_s": med(old_t, 0), "old_cpu_s": med(old_t, 1),
                     "new_wall_s": med(new_t, 0), "new_cpu_s": med(new_t, 1),
                     "old_s_per_M": med(old_t, 0) / m, "new_s_per_M": med(new_t, 0) / m,
                     "speedup": med(old_t, 0) / med(new_t, 0),
                     "speedup_cpu": med(old_t, 1) / med(new_t, 1)})
        print(rows[-1], flush=True)
    out = Path(args.out)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    out.write_text(
        "# Pair-table build: vectorized vs the per-episode builder (same process, same input)\n\n"
        f"- command: `nice .venv/bin/python bench/pairs_speed.py {' '.join(sys.argv[1:])}`"
        f"\n- machine: {machine()}\n"
        + ("- new builder input: label columns as categoricals (Parquet dictionaries, as the "
           "training job reads partitions); old builder: the strings of the in-memory table\n"
           if args.categorical else "") +
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; git {rev}; reference: "
        f"`features/pairs.py` at git {REFERENCE_REV}, loaded from git\n"
        f"- input: `training.sources.synthetic(seed=0, days, nodes, step_s)`, 4 GPUs per node"
        f"; medians over {args.runs} runs; outputs checked equal (rtol 1e-7)\n\n"
        + "\n".join(table(rows, fmt="{:.2f}")) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
