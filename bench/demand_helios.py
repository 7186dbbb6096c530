"""Helios Earth per-VC GPU demand (running + pending, 10-min mean), last 7 days as test.

Runs the CLI's backtest at 1 h and 6 h (`--agg mean`) and writes
bench/results/demand_helios.md plus one PNG per horizon. Usage:
    nice .venv/bin/python bench/demand_helios.py [--trace VC_DIR] [--out NAME.md]
VC_DIR holds one `<vc>.csv` per virtual cluster (Helios' `*_vcs` layout); the test window is
the last 7 days of whatever it holds.
    nice .venv/bin/python bench/demand_helios.py --philly [FILE] --out demand_philly.md
runs the same code path, defaults and split on Philly's active nodes (the Helios artifact's
`philly_node_sequence.csv`, Oct-Dec 2017, another cluster and year): nothing was chosen on
it; its last 7 days were first scored 2026-11-28 with the design as it stood.

"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from features.demand_series import helios_series, philly_series  # noqa: E402
from forecaster.demand.backtest import backtest, plot_busiest  # noqa: E402
from benchenv import READ_ERRORS, command, fail, machine, shown  # noqa: E402

VCS = ROOT.parent / "shared" / "traces" / "helios-earth" / "Earth_vcs"
PHILLY = VCS.parent / "philly_node_sequence.csv"
RES = ROOT / "bench" / "results"
def md_table(df: pd.DataFrame) -> str:
    """A markdown table without the optional `tabulate` dependency."""
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    rows = [" | ".join(df.columns), " | ".join("---" for _ in df.columns)]
    rows += [" | ".join(fmt(v) for v in r) for r in df.itertuples(index=False)]
    return "\n".join(f"| {r} |" for r in rows)




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=VCS,
                    help="directory of per-VC CSVs (default: the shared Earth_vcs)")
    ap.add_argument("--philly", type=Path, nargs="?", const=PHILLY, default=None,
                    help="score Philly's active nodes instead (default file: the shared one)")
    ap.add_argument("--out", default=None, help="results file name under bench/results/ "
                    "(default demand_helios.md, or demand_philly.md; plots take its stem)")
    args = ap.parse_args()
    src = args.philly or args.trace
    if not (src.is_file() if args.philly else src.is_dir()):
        sys.exit(f"{'Philly node sequence' if args.philly else 'Helios traces'} absent at {src}")
    try:
        df = philly_series(src) if args.philly else helios_series(src)
    except READ_ERRORS as e:
        fail("demand_helios.py", src, e)
    # the test is the last 7 days and the fit validates on the 7 days before: 14 d at least
    if df.empty or df["ds"].max() - df["ds"].min() < pd.Timedelta("15D"):
        fail("demand_helios.py", src, ValueError(
            "need more than 15 days of rows (7 d test, 7 d validation, some training)"))
    args.out = args.out or ("demand_philly.md" if args.philly else "demand_helios.md")
    what = ("Philly (active nodes, `--agg mean`)" if args.philly
            else "Helios Earth (per-VC GPU demand, `--agg mean`)")
    data = (f"{shown(src)}, y = active nodes averaged into 10-min bins (never tuned on)"
            if args.philly else
            f"{shown(src)}, {df['unique_id'].nunique()} VCs, y = running_gpu_num + "
            "pending_gpu_num averaged into 10-min bins")
    stem = Path(args.out).stem
    T = df["ds"].max() + pd.Timedelta("10min") - pd.Timedelta("7D")
    lines = [f"# Demand forecaster on {what}", "",
             f"- command: `{command('demand_helios.py')}` (same code path as "
             f"`foresight demand backtest --agg mean --test-start '{T}'`)",
             f"- data: {data}, {df['ds'].min()} .. {df['ds'].max()}",
             f"- test: origins from {T} (last 7 days), every 10 min; train ds < test start; "
             "shrink and conformal calibration on the 7 days before the test start",
             f"- machine: {machine()}, shared with other jobs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- git: {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             ""]
    for label, H in (("1h", 6), ("6h", 36)):
        t0 = time.time()
        try:
            pred, met, model = backtest(df, "10min", H, T, agg="mean")
        except ValueError as e:  # the model's own checks: too little data for the split
            fail("demand_helios.py", src, e)
        wall = time.time() - t0
        png = RES / f"{stem}_{label}.png"
        uid = plot_busiest(pred, str(png), f"{what.split(' (')[0]}, horizon {label}, mean:")
        lines += [f"## horizon {label} ({len(pred)} origins, wall {wall:.0f} s, shrink chosen "
                  f"on validation: {model.lam_:g}; validation MAE by shrink: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in model.val_mae_.items()) + ")", "",
                  md_table(met), "",
                  f"![forecast vs actual, busiest series {uid}]({png.name})", ""]
        print(met.to_string(), flush=True)
    (RES / args.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
