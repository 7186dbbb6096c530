"""LLM inference load (Azure LLM inference trace, 2023): requests and tokens over the next minute.

Series: `features.llm_trace.llm_load`, one per trace and value: requests, context tokens and
generated tokens arriving per 10 s bin (a bin without a request is 0). What is forecast is the
mean per bin over the next 6 bins (the next minute's load, an autoscaler's step), an origin
every bin: `foresight demand backtest --freq 10s --horizon 1min --agg mean --target T`, the
three series of a trace fitted together, each scored on its own.
Simple baselines, same origins, same past (`forecaster.demand.backtest.per_series`): the last
bin, the mean of the last minute, an EWMA (alpha chosen on the fitting part), statsforecast
AutoETS, and the seasonal naives where the trace is long enough (not an hour); a design's
served MAE is divided by the best of them on the same series.
Split rule (written before any score was seen; 2026-11-28):
- per trace, thirds of its span (the first and last bins, partial, dropped): the dev test is
  the origins of the middle third, fitted on the first third; the final test the origins of
  the last third, fitted on everything before it. Calibration window: 36 bins (6 min), or a
  tenth of the fitting part where that is longer (a trace of several hours or days).
- the design (`--target` among `rate`, `residual`, `ratio`: the CLI's own, frozen on the
  GenTD26 gateway rate, the default, and the DLRM arrivals) is chosen on the dev test of the
  `code` trace alone: the lowest mean over its three series of served / best baseline MAE.
- then scored once, unchanged: `code`'s final test, and the `conv` trace (dev and final),
  which no choice looked at.
    nice .venv/bin/python bench/demand_llm.py [--dev F] [--held-out F ...] [--out NAME.md]
Another trace of the same format (e.g. the 2024 week-long one) can be given as either; a
week of 10 s bins takes a while (each third ~20,000 origins).
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
from benchenv import READ_ERRORS, command, fail, machine, shown  # noqa: E402
from demand_helios import md_table  # noqa: E402
from features.llm_trace import VALUES, llm_load  # noqa: E402
from forecaster.demand.backtest import backtest, per_series  # noqa: E402
from foresight.commands.demand import _target  # noqa: E402

AZURE = ROOT.parent / "shared" / "traces" / "azure-llm-2023"
DEV = AZURE / "AzureLLMInferenceTrace_code.csv"
HELD_OUT = (AZURE / "AzureLLMInferenceTrace_conv.csv",)
RES = ROOT / "bench" / "results"
FREQ, H, VAL_BINS = "10s", 6, 36  # VAL_BINS: the least; a tenth of a longer fitting part
DESIGNS = ("rate", "residual", "ratio")


def load(path: Path) -> pd.DataFrame:
    """The trace's three series without their partial first and last bins."""
    try:
        df = llm_load(path, FREQ)
    except READ_ERRORS as e:
        fail("demand_llm.py", path, e)
    lo, hi = df["ds"].min(), df["ds"].max()
    df = df[(df["ds"] > lo) & (df["ds"] < hi)].reset_index(drop=True)
    if df["ds"].nunique() < 3 * (VAL_BINS + 2 * H + 50):
        fail("demand_llm.py", path, ValueError(
            f"{df['ds'].nunique()} full {FREQ} bins: each third needs {VAL_BINS + 2 * H + 50}"))
    return df


def windows(df: pd.DataFrame) -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
    step = pd.Timedelta(FREQ)
    lo, end = df["ds"].min(), df["ds"].max() + step
    third = ((end - lo) / 3).floor(FREQ)
    return {"dev": (lo + third, lo + 2 * third), "final": (lo + 2 * third, end)}


def score(df: pd.DataFrame, part: str, target: str) -> tuple[pd.DataFrame, object, float]:
    """Per series: served MAE, the best simple baseline and its MAE, the ratio, and the
    [p10, p90] coverage of the served forecast and of that baseline."""
    start, stop = windows(df)[part]
    t0 = time.perf_counter()
    val_bins = max(VAL_BINS, int((df["ds"] < start).sum() / df["unique_id"].nunique()) // 10)
    pred, _, model = backtest(df[df["ds"] < stop], FREQ, H, start, agg="mean",
                              val_bins=val_bins, **_target(target, "mean"))
    wall = time.perf_counter() - t0
    t = per_series(pred)
    t.insert(2, "served", [model.served(u) for u in t["series"]])
    return t, model, wall


def shown_table(t: pd.DataFrame) -> str:
    out = t.copy()
    for c in ("served MAE", "baseline MAE"):
        out[c] = out[c].map(lambda v: f"{v:,.2f}")
    out["ratio"] = out["ratio"].map(lambda v: f"**{v:.3f}**")
    for c in ("coverage", "baseline coverage"):
        out[c] = out[c].map(lambda v: f"{v:.0%}")
    return md_table(out)


def choose(df: pd.DataFrame, name: str) -> tuple[str, list[str]]:
    rows, mean = [], {}
    for target in DESIGNS:
        t, _, wall = score(df, "dev", target)
        mean[target] = float(t["ratio"].mean())
        rows.append({"--target": target, **dict(zip(t["series"], t["ratio"].round(3))),
                     "mean ratio": round(mean[target], 3), "wall s": round(wall)})
        print(rows[-1], flush=True)
    chosen = min(DESIGNS, key=mean.get)
    start, stop = windows(df)["dev"]
    return chosen, [f"## Choice: `{name}`, dev test only (origins {start:%H:%M:%S} .. "
                    f"{stop:%H:%M:%S}): served MAE / best simple baseline MAE", "",
                    md_table(pd.DataFrame(rows)), "",
                    f"- chosen (lowest mean ratio): **--target {chosen}**", ""]


def report(df: pd.DataFrame, name: str, part: str, target: str, role: str) -> tuple[list[str], pd.DataFrame]:
    t, model, wall = score(df, part, target)
    start, stop = windows(df)[part]
    lines = [f"### `{name}`, {part} test ({role}): origins {start:%H:%M:%S} .. {stop:%H:%M:%S}, "
             f"fitted on ds < {start:%H:%M:%S}; wall {wall:.0f} s", "", shown_table(t), ""]
    print("\n".join(lines), flush=True)
    return lines, t.assign(trace=name, part=part)


def main(dev: Path, held_out: list[Path], out: str) -> None:
    for p in (dev, *held_out):
        if not p.is_file():
            sys.exit(f"LLM request trace absent at {p}")
    traces = {p: load(p) for p in (dev, *held_out)}
    name = {p: str(traces[p]["unique_id"].iloc[0]).split(":")[0] for p in traces}
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    lines = ["# Demand forecaster on LLM inference load (Azure LLM inference trace, 2023)", "",
             f"- command: `{command('demand_llm.py')}`",
             "- data: " + "; ".join(
                 f"{shown(p)} ({int(d.loc[d['unique_id'].str.endswith(':requests'), 'y'].sum()):,}"
                 f" requests, {d['ds'].nunique()} full 10 s bins, {d['ds'].min():%H:%M:%S} .. "
                 f"{d['ds'].max():%H:%M:%S})" for p, d in traces.items()),
             f"- series per trace: {', '.join(VALUES)} arriving per 10 s bin; forecast: the mean "
             "per bin over the next minute (6 bins), an origin every bin, the three fitted "
             "together; ratio = served MAE / the best simple baseline's (last bin, mean of the "
             "last minute, EWMA, AutoETS) on the same series and origins; coverage of [p10, p90]",
             "- split rule: module docstring (thirds of each trace; the design chosen on "
             f"`{name[dev]}`'s dev third; the rest scored once)",
             f"- machine: {machine()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"git {git}", ""]
    chosen, choice = choose(traces[dev], name[dev])
    lines += choice + [f"## Scored with --target {chosen}", ""]
    parts = []
    for p, role, which in [(dev, "dev trace, held-out time", ["final"]),
                           *[(h, "held-out trace", ["dev", "final"]) for h in held_out]]:
        for part in which:
            text, t = report(traces[p], name[p], part, chosen, role)
            lines += text
            parts.append(t)
    allt = pd.concat(parts, ignore_index=True)
    held = allt[allt["trace"] != name[dev]]
    base = allt["best baseline"].mode().iloc[0]
    verdict = (f"**beaten on held-out data**: serve the forecaster (--target {chosen})"
               if allt["ratio"].mean() < 1 and (allt["ratio"] < 1).mean() >= 0.5 else
               "**not beaten on held-out data**: the forecaster is no better than the best "
               f"simple baseline there; serve the baseline (most often `{base}`) by name")
    lines += ["## Summary", "", f"- verdict, over every part scored once: {verdict}",
              f"- `{name[dev]}` final (held-out time): mean ratio "
              f"{allt.loc[allt['trace'] == name[dev], 'ratio'].mean():.3f}",
              f"- held-out trace(s), both thirds: mean ratio {held['ratio'].mean():.3f}, "
              f"{int((held['ratio'] < 1).sum())} of {len(held)} series-windows below 1; "
              f"coverage {held['coverage'].mean():.0%} (baseline's {held['baseline coverage'].mean():.0%})",
              ""]
    RES.mkdir(exist_ok=True)
    (RES / out).write_text("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dev", type=Path, default=DEV, help="the trace the design is chosen on")
    ap.add_argument("--held-out", type=Path, nargs="*", default=list(HELD_OUT),
                    help="traces scored once with the chosen design")
    ap.add_argument("--out", default="demand_llm.md", help="results file under bench/results/")
    a = ap.parse_args()
    main(a.dev, a.held_out, a.out)
