"""Arrivals (`--agg sum`) built from the simulator's pods table: model vs persistence at 1 h.

For each seed: `generate_cluster(SimConfig(seed, days=35, nodes=8, gpus_per_node=8))` (telemetry
reduced to one metric at 1-h steps: only `pods` is used), y = GPUs requested by pods created per
10-min bin per queue (features.demand_series.arrivals_from_pods), warm-up arrivals before
`start` dropped, last 7 days as test, horizon 1 h. Writes bench/results/demand_synthetic.md.
    nice .venv/bin/python bench/demand_synthetic.py [seed ...]
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from demand_helios import machine, md_table  # noqa: E402  (bench/ is on sys.path)
from features.demand_series import arrivals_from_pods  # noqa: E402
from forecaster.demand.backtest import backtest, plot_busiest  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402

RES = ROOT / "bench" / "results"


def main(seeds: list[int]) -> None:
    lines = ["# Demand forecaster on simulator arrivals (`--agg sum`, horizon 1 h)", "",
             f"- command: `nice .venv/bin/python bench/demand_synthetic.py {' '.join(map(str, seeds))}`",
             "- data: `generate_cluster(SimConfig(seed=S, days=35, nodes=8, gpus_per_node=8, "
             "metrics=('DCGM_FI_DEV_GPU_UTIL',), app_counter=False, step_s=3600))`, "
             "y = GPUs requested by pods created per 10-min bin per queue (3 queues); "
             "arrivals before `start` (warm-up) dropped",
             "- test: last 7 days, an origin every 10 min; train before; shrink and conformal "
             "calibration on the 7 days before the test start",
             f"- machine: {machine()}, shared with other jobs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- git: {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             ""]
    gains = []
    for seed in seeds:
        cfg = SimConfig(seed=seed, days=35, nodes=8, gpus_per_node=8,
                        metrics=("DCGM_FI_DEV_GPU_UTIL",), app_counter=False, step_s=3600)
        t0 = time.time()
        cluster = generate_cluster(cfg)
        df = arrivals_from_pods(cluster.pods, "10min")
        df = df[df["ds"] >= cfg.start].reset_index(drop=True)
        T = df["ds"].max() + pd.Timedelta("10min") - pd.Timedelta("7D")
        t1 = time.time()
        pred, met, model = backtest(df, "10min", 6, T, agg="sum")
        m = met.set_index("method")["MAE"]
        gain = 1 - m["model"] / m["persistence"]
        gains.append(gain)
        png = RES / f"demand_synthetic_seed{seed}.png"
        uid = plot_busiest(pred, str(png), f"simulator seed {seed}, arrivals, 1 h:")
        lines += [f"## seed {seed}: {len(cluster.pods)} pods, {len(pred)} test origins, "
                  f"generate {t1 - t0:.0f} s, backtest {time.time() - t1:.0f} s, shrink {model.lam_:g}",
                  "", md_table(met), "",
                  f"model MAE is **{gain:.1%} below persistence** "
                  f"({m['model']:.3f} vs {m['persistence']:.3f} GPUs per hour)", "",
                  f"![busiest queue {uid}]({png.name})", ""]
        print(seed, met.to_string(), flush=True)
    lines += [f"**Median over seeds {seeds}: model MAE {np.median(gains):.1%} below persistence** "
              f"(per seed: {', '.join(f'{g:.1%}' for g in gains)}; target: at least 25%).", ""]
    (RES / "demand_synthetic.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [7, 8, 9])
