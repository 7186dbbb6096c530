"""GenTD26 gateway request rate: mean QPS over the next 10 min, from 1-min bins.

Series: `features.gateway_qps.gateway_qps` (gateway-wide API Requests, 1-min means, ~22 h).
Horizon: the mean of the next 10 one-minute bins (agg="mean", H=10), an origin every minute.
Simple baselines, same origins, same past: last value (persistence), mean of the last 10 min,
EWMA (alpha chosen on the fitting part), statsforecast AutoETS: all from
`forecaster.demand.backtest.backtest`, with conformal intervals from the same calibration. No seasonal naive: the trace
is shorter than a day.
Split rule (committed before tuning; `end` = last bin + 1 min):
- final test: origins in [end - 6 h, end), scored once with the chosen design, fitted on the
  data before (validation/calibration tail: the 3 h before the test).
- dev test: origins in [end - 12 h, end - 6 h), fitted on ds < end - 12 h, the final 6 h not
  loaded. The design was chosen on this dev test only until session 6.
- dev folds (session 7): the same 12 h before the final in four 3 h folds, each fitted on the
  bins before it; the VARIANT with the lowest mean served / best-simple ratio there is scored.
Interval window (session 8): with the chosen design, the p10/p90 calibration window with the
lowest mean pinball on the same dev folds.
Series (session 8): a 1-min bin without a row is a rate of 0 (`gateway_qps`'s docstring gives
the evidence); the same design on the carry-over series of sessions 4-7 is reported beside it.
    nice .venv/bin/python bench/demand_qps.py [dev|final|both] [--trace QPS_CSV] [--out NAME.md]
QPS_CSV is a `qps_*.csv`-format file; the queue-size gauge for the gap evidence is the one
`queue_size*.csv` beside it (the evidence says so and skips it when there is none or several).
Another trace needs more than 21 h (final 6 h, four 3 h dev folds, a 3 h validation tail)
plus some training history (the dev file has 22.3 h).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchenv import READ_ERRORS, command, fail, machine, shown  # noqa: E402
from demand_helios import md_table  # noqa: E402
from features.gateway_qps import gateway_qps  # noqa: E402
from forecaster.demand.backtest import backtest  # noqa: E402
from forecaster.demand.features import EWMA_ALPHAS  # noqa: E402
from foresight.commands.demand import RATE  # noqa: E402

QPS = ROOT.parent / "shared" / "traces" / "genai-2026-dev" / "qps_dev.csv"
RES = ROOT / "bench" / "results"
H = 10
#: `--target rate`'s design without its re-pick (the session-5 design), on a 3 h validation tail
BASE: dict = {**{k: v for k, v in RATE.items() if not k.startswith("recent_")},
              "val_bins": 180}
#: the point design's candidates carry the validation-tail interval; the interval window is
#: picked after them (it does not move p50)
POINT: dict = {k: v for k, v in RATE.items() if k != "recent_intervals"}
#: Session 8: p10/p90 re-calibrated from the served residuals of this many ended horizons
#: (None: the validation tail's), picked on the same dev folds by mean pinball loss
INTERVAL_WINDOWS = (None, 6, 12, 18, 36)
#: Session 7: the designs compared on four 3 h dev folds (the 12 h before the final 6 h), each
#: fitted on the bins before its fold; the lowest mean ratio to the fold's best
#: simple baseline. `repick`: the served predictor re-picked per origin from the last 6 ended
#: horizons (the usage preset's window); `repick_z`: the same, leaving the validated choice
#: only on evidence (z = 1.645, one-sided 5 %: the usage forecaster's `recent_z`).
VARIANTS: dict[str, dict] = {"mix": BASE, "repick": {**BASE, "recent_window": 6},
                             "repick_z": {**POINT, "val_bins": 180}}
#: the forecaster's own candidates, not simple baselines: the served forecast is compared
#: with the best single simple predictor (last value, mean of the last 10 min, EWMA, AutoETS)
CANDIDATES = ("model", "lightgbm", "ewma_mix")


def splits(df: pd.DataFrame) -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
    end = df["ds"].max() + pd.Timedelta("1min")
    final = end - pd.Timedelta("6h")
    return {"dev": (final - pd.Timedelta("6h"), final), "final": (final, end)}


def dev_folds(df: pd.DataFrame) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Four 3 h folds covering the 12 h before the final test (never the final 6 h)."""
    final = splits(df)["final"][0]
    return [(final - pd.Timedelta(hours=3 * k), final - pd.Timedelta(hours=3 * (k - 1)))
            for k in (4, 3, 2, 1)]


def score(df: pd.DataFrame, start, stop, design: dict):
    """Backtest on origins in [start, stop), fitted on ds < start: the metrics table, the
    best simple baseline and the served / best ratio."""
    t0 = time.perf_counter()
    try:
        pred, met, model = backtest(df[df["ds"] < stop], "1min", H, start, agg="mean",
                                    **design)
    except ValueError as e:  # the model's own checks: too little data for the split
        fail("demand_qps.py", f"origins {start} .. {stop}", e)
    wall = time.perf_counter() - t0
    met = met.drop(columns="MASE")
    met = met[~met["method"].isin(["snaive_day", "snaive_week"])].reset_index(drop=True)
    m = met.set_index("method")
    simple = m.drop(index=[c for c in CANDIDATES if c in m.index])["MAE"]
    best = simple.idxmin()
    return pred, met, model, (best, simple[best]), m.loc["model", "MAE"] / simple[best], wall


def pick_design(df: pd.DataFrame) -> tuple[str, list[str]]:
    """Every VARIANT on every dev fold; the lowest mean ratio wins."""
    rows, ratios = [], {v: [] for v in VARIANTS}
    for start, stop in dev_folds(df):
        row = {"fold": f"{start:%H:%M} .. {stop:%H:%M}"}
        for name, design in VARIANTS.items():
            _, _, _, (best, _), ratio, _ = score(df, start, stop, design)
            ratios[name].append(ratio)
            row[name] = f"{ratio:.3f}"
        row["best simple baseline"] = best
        rows.append(row)
        print(row, flush=True)
    rows.append({"fold": "mean", **{v: f"{np.mean(r):.3f}" for v, r in ratios.items()},
                 "best simple baseline": ""})
    chosen = min(VARIANTS, key=lambda v: np.mean(ratios[v]))
    lines = ["## dev folds: served MAE / best simple baseline MAE (each fold fitted on the "
             "bins before it)", "", md_table(pd.DataFrame(rows)), "",
             f"- chosen (lowest mean): **{chosen}** `{VARIANTS[chosen]}`", ""]
    return chosen, lines


def pick_interval(df: pd.DataFrame, design: dict) -> tuple[dict, list[str]]:
    """Every INTERVAL_WINDOWS entry with the chosen design on every dev fold; the lowest
    mean pinball loss (p10, p50, p90) wins. A design without a re-pick window (`mix`) has
    no served errors to re-calibrate from: only the validation tail's (None)."""
    windows = INTERVAL_WINDOWS if design.get("recent_window") else (None,)
    rows, pin, cov = [], {w: [] for w in windows}, {w: [] for w in windows}
    for start, stop in dev_folds(df):
        row = {"fold": f"{start:%H:%M} .. {stop:%H:%M}"}
        for w in windows:
            _, met, *_ = score(df, start, stop, {**design, "recent_intervals": w})
            m = met.set_index("method").loc["model"]
            pin[w].append(m["pinball"])
            cov[w].append(abs(m["coverage_p10_p90"] - 0.8))
            row[str(w)] = f"{m['pinball']:.4f} / {m['coverage_p10_p90']:.0%}"
        rows.append(row)
        print(row, flush=True)
    rows.append({"fold": "mean", **{str(w): f"{np.mean(p):.4f}" for w, p in pin.items()}})
    rows.append({"fold": "mean abs(coverage - 80 %)",
                 **{str(w): f"{np.mean(c):.1%}" for w, c in cov.items()}})
    w = min(windows, key=lambda v: np.mean(pin[v]))
    return {**design, "recent_intervals": w}, [
        "## dev folds: pinball / p10-p90 coverage by interval window (ended horizons; None: "
        "the validation tail's)", "", md_table(pd.DataFrame(rows)), "",
        f"- chosen (lowest mean pinball): **{w}**", ""]


def fixed_alphas(df: pd.DataFrame, pred: pd.DataFrame) -> str:
    """Diagnostic: MAE of the EWMA at each alpha of the grid (the forecaster's definition,
    bins before the origin) on the same origins."""
    y = df.set_index("ds")["y"]
    at = pd.to_datetime(pred["origin"], utc=True)
    truth = pred["y_true"].to_numpy()
    mae = {a: np.mean(np.abs(y.ewm(alpha=a).mean().shift(1).reindex(at).to_numpy() - truth))
           for a in EWMA_ALPHAS}
    return ", ".join(f"alpha {a:g} {v:.4f}" for a, v in mae.items())


def run(df: pd.DataFrame, part: str, design: dict) -> str:
    start, stop = splits(df)[part]
    pred, met, model, (best, best_mae), ratio, wall = score(df, start, stop, design)
    alpha = model.ewma_alpha_
    m = met.set_index("method")
    lines = [f"## {part} test: origins {start} .. {stop} ({len(pred)} origins), fitted on "
             f"ds < {start}", "", md_table(met), "",
             f"- served: **{model.served('gateway')}** (validation MAE: " + ", ".join(
                 f"{k} {v:.4f}" for k, v in model.val_scores_["gateway"].items()) + ")" + (
                 "; re-picked per origin from the last "
                 f"{model.recent_window} ended horizons: " + ", ".join(
                     f"{k} {v:.0%}" for k, v in
                     pred["model"].value_counts(normalize=True).items()) + " of test origins"
                 if model.recent_window else ""),
             f"- best simple baseline: {best} ({best_mae:.4f}); served MAE "
             f"{m.loc['model', 'MAE']:.4f}; **model / best "
             f"baseline = {ratio:.3f}**; EWMA alpha {alpha}; coverage "
             f"{m.loc['model', 'coverage_p10_p90']:.1%} (p10/p90 " + (
                 f"from the served errors of the last {model.recent_intervals} ended horizons"
                 if model.recent_intervals else "from the validation tail") + f"); wall {wall:.0f} s",
             f"- diagnostic, MAE of the EWMA at each fixed alpha: {fixed_alphas(df, pred)}",
             f"- targets exactly 0: {pred['y_true'].eq(0).mean():.0%}; median p10 "
             f"{pred['p10'].median():.3f}, p90 {pred['p90'].median():.3f}", ""]
    print("\n".join(lines), flush=True)
    return "\n".join(lines)


def queue_file(qps: Path) -> Path | None:
    """The queue-size gauge beside `qps`: the dev name, else the one `queue_size*.csv` there
    (other parts of the trace name it otherwise); None when there is none or several."""
    dev = qps.with_name("queue_size_raw_anon.csv")
    found = [dev] if dev.is_file() else sorted(qps.parent.glob("queue_size*.csv"))
    return found[0] if len(found) == 1 else None


def gap_evidence(qps: Path = QPS) -> list[str]:
    """Why a bin without a row is a rate of 0 (features/gateway_qps.py), from the raw rows."""
    raw = pd.read_csv(qps, dtype={"container_ip": str})
    gw = raw[raw["container_ip"].fillna("").eq("") & raw["request_type"].eq("API Requests")]
    qf = queue_file(qps)
    queue = pd.read_csv(qf) if qf is not None else None
    scrape = gw["timestamp_anon"].diff().dropna()
    step = scrape.min()
    gaps = scrape[scrape > step] / step
    per_hour = pd.to_datetime(gw["timestamp_anon"], unit="s", utc=True).dt.hour.value_counts()
    zero, carry = gateway_qps(qps), gateway_qps(qps, fill="carry")
    filled = zero["y"].eq(0)
    late = zero["ds"].dt.hour >= 21
    return ["## why a bin without a row is a rate of 0", "",
            f"- QPS rows equal to 0: {int(raw['value'].eq(0).sum())} of {len(raw):,} (gateway and "
            f"per pod); the queue-size gauge sampled beside it: " + (
                f"{int(queue['value'].eq(0).sum()):,} of {len(queue):,} rows are 0"
                if queue is not None else f"no single queue_size*.csv beside {qps.name}"),
            f"- gateway rows every {step:.0f} s; every gap is a whole number of them: "
            f"{bool(np.allclose(gaps, gaps.round()))} ({gaps.min():.0f} to {gaps.max():.0f})",
            "- gateway rows per hour: " + ", ".join(
                f"{h:02d}:00 {per_hour.get(h, 0)}" for h in (12, 15, 18, 19, 20, 21, 22)),
            f"- 1-min bins without a row: {int(filled.sum())} of {len(zero):,}; "
            f"{filled[late].mean():.0%} of the bins from 21:00; the carry-over series held "
            f"them at its last value (mean {carry['y'].mean():.3f} vs {zero['y'].mean():.3f})",
            ""]


def carry_over(design: dict, which: str, qps: Path = QPS) -> list[str]:
    """The same design on the series as sessions 4-7 built it (the last level carried over
    bins without a row), so both definitions stay on the record."""
    df = gateway_qps(qps, fill="carry")
    rows = []
    for part in (["dev", "final"] if which == "both" else [which]):
        start, stop = splits(df)[part]
        _, met, model, (best, best_mae), ratio, _ = score(df, start, stop, design)
        rows.append({"test": part, "served MAE": f"{met.set_index('method').loc['model', 'MAE']:.4f}",
                     "best simple baseline": f"{best} {best_mae:.4f}", "ratio": f"{ratio:.3f}"})
    return ["## the same design on the carry-over series (sessions 4-7: a bin without a row "
            "kept the last level)", "", md_table(pd.DataFrame(rows)), ""]


def main(which: str = "both", qps: Path = QPS, out: str | None = None) -> None:
    if not qps.is_file():
        sys.exit(f"GenAI trace absent at {qps}")
    try:
        df = gateway_qps(qps)
        evidence = gap_evidence(qps)  # reads the raw rows (and the queue gauge) again
    except READ_ERRORS as e:
        fail("demand_qps.py", qps, e)
    span = df["ds"].max() - df["ds"].min()
    if span <= pd.Timedelta("21h"):  # final 6 h + 12 h of dev folds + 3 h validation tail
        fail("demand_qps.py", qps, ValueError(f"gateway series spans {span}: need more than 21 h"))
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    lines = ["# Demand forecaster on the GenTD26 gateway request rate (mean QPS, next 10 min)", "",
             f"- command: `{command('demand_qps.py', which)}`",
             f"- data: {shown(qps)}, gateway-wide API Requests (empty "
             f"container_ip), 1-min means, a bin without a row is 0 (features/gateway_qps.py "
             f"says why), {df['ds'].min()} .. {df['ds'].max()} ({len(df)} bins)",
             "- horizon: mean of the next 10 one-minute bins, an origin every minute; per-pod "
             "generative rates not used (each pod's rate is almost always the smallest "
             "quantum, 0.09: nothing to learn from)",
             "- design: picked on the dev folds below (session 7; sessions 4-6 froze it on "
             "the dev test)",
             "- split rule: module docstring (dev = the 6 h before the final 6 h; dev folds ="
             " the 12 h before it, in 3 h)",
             f"- machine: {machine()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"git {git}", ""]
    chosen, fold_lines = pick_design(df)
    design, interval_lines = pick_interval(df, VARIANTS[chosen])
    lines += evidence + fold_lines + interval_lines
    for part in (["dev", "final"] if which == "both" else [which]):
        lines.append(run(df, part, design))
    lines += carry_over(design, which, qps)
    out = out or f"demand_qps{'' if which == 'both' else '_' + which}.md"
    (RES / out).write_text("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("which", nargs="?", default="both", choices=["dev", "final", "both"])
    ap.add_argument("--trace", type=Path, default=QPS,
                    help="qps_dev.csv-format file (default: the shared one)")
    ap.add_argument("--out", default=None, help="results file name under bench/results/ "
                    "(default demand_qps.md, or demand_qps_<which>.md)")
    a = ap.parse_args()
    main(a.which, a.trace, a.out)
