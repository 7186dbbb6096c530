"""Fingerprinting speed: ~1,000 GPUs x 24 h at 15 s (the volume of 1,000 pods x 24 h).

    nice .venv/bin/python bench/fingerprint_speed.py [--gpus 1000] [--runs 3]
Times the whole fingerprint build from the samples Parquet (read, wide series, segmentation,
labels, fingerprints: what `foresight fingerprint build` does), median over runs, with the segmentation metrics of the fingerprint (7 metrics).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from fingerprint_common import RESULTS, header, table  # noqa: E402
from features.ingest import write_tables  # noqa: E402
from features.segments import read_samples, wide_series  # noqa: E402
from forecaster.fingerprint.model import FingerprintModel  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402

M = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
     "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_FB_USED",
     "DCGM_FI_DEV_POWER_USAGE")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    t = time.time()
    c = generate_cluster(SimConfig(seed=11, days=1, step_s=15, nodes=a.gpus // 8,
                                   gpus_per_node=8, metrics=M, app_counter=False, load=1.5))
    gen = time.time() - t
    tmp = Path(tempfile.mkdtemp())
    write_tables(tmp, {"samples": c.samples})  # what `foresight simulate/ingest` leave
    n_rows = len(c.samples)
    del c.samples
    rows = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        samples = read_samples(tmp / "samples.parquet")
        tr = time.perf_counter()
        ws = wide_series(samples)
        del samples
        t1 = time.perf_counter()
        m = FingerprintModel(n_jobs=2).fit(ws, c.pods, c.pod_labels)
        t2 = time.perf_counter()
        rows.append({"read_parquet_s": tr - t0, "wide_series_s": t1 - tr,
                     "segment_and_fingerprint_s": t2 - t1, "total_s": t2 - t0})
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    steps = len(ws.ts)
    lines = header("Fingerprint build speed", f"nice .venv/bin/python bench/fingerprint_speed.py "
                   f"--gpus {a.gpus} --runs {a.runs}", [
        f"data: generate_cluster(SimConfig(seed=11, days=1, step_s=15, nodes={a.gpus // 8}, "
        f"gpus_per_node=8, load=1.5), 7 metrics; load 1.5 keeps every GPU busy): {n_rows:,} sample rows, {len(ws)} (pod, GPU) "
        f"series, {steps:,} series-steps = {steps * 15 / 3600:,.0f} series-hours "
        f"({steps / (1000 * 5760):.2f} x the 1,000 pods x 24 h at 15 s volume); generated in "
        f"{gen:.0f} s (not timed)",
        f"{len(m.fingerprints_)} workload fingerprints; segmentation in 2 worker processes (`--jobs 2`), the rest in one",
        f"median over {a.runs} runs"])
    lines += table([{**{"run": i + 1}, **r} for i, r in enumerate(rows)] +
                   [{"run": "median", **med}])
    lines += ["", f"Target < 60 s: **{'met' if med['total_s'] < 60 else 'not met'}** "
              f"({med['total_s']:.1f} s)"]
    (RESULTS / "fingerprint_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
