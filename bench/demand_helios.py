"""Helios Earth per-VC GPU demand (running + pending, 10-min mean), last 7 days as test.

Runs the CLI's backtest at 1 h and 6 h (`--agg mean`) and writes
bench/results/demand_helios.md plus one PNG per horizon. Usage:
    nice .venv/bin/python bench/demand_helios.py
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from features.demand_series import helios_series  # noqa: E402
from forecaster.demand.backtest import backtest, plot_busiest  # noqa: E402
from benchenv import machine  # noqa: E402

VCS = ROOT.parent / "shared" / "traces" / "helios-earth" / "Earth_vcs"
RES = ROOT / "bench" / "results"


def md_table(df: pd.DataFrame) -> str:
    """A markdown table without the optional `tabulate` dependency."""
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    rows = [" | ".join(df.columns), " | ".join("---" for _ in df.columns)]
    rows += [" | ".join(fmt(v) for v in r) for r in df.itertuples(index=False)]
    return "\n".join(f"| {r} |" for r in rows)




def main() -> None:
    if not VCS.is_dir():
        sys.exit(f"Helios traces absent at {VCS}")
    df = helios_series(VCS)
    T = df["ds"].max() + pd.Timedelta("10min") - pd.Timedelta("7D")
    lines = ["# Demand forecaster on Helios Earth (per-VC GPU demand, `--agg mean`)", "",
             f"- command: `nice .venv/bin/python bench/demand_helios.py` (same code path as "
             f"`foresight demand backtest --agg mean --test-start '{T}'`)",
             f"- data: {VCS.relative_to(ROOT.parent)}, {df['unique_id'].nunique()} VCs, "
             f"y = running_gpu_num + pending_gpu_num averaged into 10-min bins, "
             f"{df['ds'].min()} .. {df['ds'].max()}",
             f"- test: origins from {T} (last 7 days), every 10 min; train ds < test start; "
             "shrink and conformal calibration on the 7 days before the test start",
             f"- machine: {machine()}, shared with other jobs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- git: {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             ""]
    for label, H in (("1h", 6), ("6h", 36)):
        t0 = time.time()
        pred, met, model = backtest(df, "10min", H, T, agg="mean")
        wall = time.time() - t0
        png = RES / f"demand_helios_{label}.png"
        uid = plot_busiest(pred, str(png), f"Helios, horizon {label}, mean:")
        lines += [f"## horizon {label} ({len(pred)} origins, wall {wall:.0f} s, shrink chosen "
                  f"on validation: {model.lam_:g}; validation MAE by shrink: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in model.val_mae_.items()) + ")", "",
                  md_table(met), "",
                  f"![forecast vs actual, busiest VC {uid}]({png.name})", ""]
        print(met.to_string(), flush=True)
    (RES / "demand_helios.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
