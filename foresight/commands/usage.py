"""`foresight usage series | backtest`: short-horizon usage forecasts of running pods."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output, distinct_outputs, format_error, one_source
from ground.errors import ForesightError

console = Console(highlight=False)


def series(data: Path = typer.Option(None, "--data", help="Directory of tables."),
           genai: Path = typer.Option(None, "--genai", help="Instead of --data: one GenTD26-"
                                      "format per-pod file (timestamp_anon, value, "
                                      "container_ip; e.g. pod_gpu_duty_cycle*.csv)."),
           out: Path = typer.Option(..., "--out", help="S.csv to write (unique_id, ds, y)."),
           metric: str = typer.Option(None, "--metric", help="With --data: sm (the default), "
                                      "fb, power or a DCGM name."),
           freq: str = typer.Option("1min", "--freq", help="Bin width."),
           phases: Path = typer.Option(None, "--phases", help="Phase intervals (Parquet/CSV: "
                                       "namespace, pod, [node, gpu,] start, end, phase) to "
                                       "add as a `phase` column.")) -> None:
    """Per-(pod, GPU) usage series in the long format, from the GPU sample table (or one
    GenTD26-format per-pod file: the mean per bin, the level carried over empty bins)."""
    from features.demand_series import parse_freq
    from features.genai_trace import read_genai
    from features.ingest import read_tables
    from features.usage_series import attach_phases, read_phases, usage_long

    check_output(out, "--out", inputs={"--data": data, "--genai": genai, "--phases": phases})
    source, path = one_source({"--data": data, "--genai": genai})
    parse_freq(freq)
    if metric is not None and source == "--genai":  # the file is one metric: not ignored
        raise ForesightError(f"--metric {metric}: only with --data (a --genai file holds one "
                             "metric)")
    ph = read_phases(phases) if phases is not None else None  # checked before the work
    if source == "--genai":
        try:
            df = read_genai(path, freq)
        except (ValueError, KeyError, OSError) as exc:  # a file of another format
            raise format_error(source, path, exc) from None
    else:
        df = usage_long(read_tables(path)["samples"], metric or "sm", freq)
    if ph is not None:
        df = attach_phases(df, ph, freq)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    console.print(f"wrote {df['unique_id'].nunique()} series, {len(df)} rows -> {out}")


def backtest(series_csv: Path = typer.Option(..., "--series", help="Long CSV: unique_id, ds, y"
                                             "; ds in ISO 8601 / RFC 3339 (no offset: UTC) or "
                                             "plain numbers as epoch seconds."),
             freq: str = typer.Option("1min", "--freq", help="Bin width."),
             horizon: str = typer.Option("10min", "--horizon", help="Forecast horizon."),
             test_start: str = typer.Option(..., "--test-start", help="First origin scored; "
                                            "the model is fitted on bins before it."),
             out: Path = typer.Option(..., "--out", help="Predictions CSV."),
             agg: str = typer.Option("mean", "--agg", help="mean (levels) or sum."),
             phases: Path = typer.Option(None, "--phases", help="Phase intervals (Parquet/CSV:"
                                         " namespace, pod, [node, gpu,] start, end, phase); or"
                                         " give the series a `phase` column."),
             y_max: float = typer.Option(None, "--y-max", help="Physical upper bound of the "
                                         "metric (100 for a duty cycle in %); default: the "
                                         "largest training value."),
             preset_name: str = typer.Option("serving", "--preset", help="Model settings: "
                                              "serving (chosen on real serving telemetry) "
                                              "or plain; the options below override it."),
             fleet: bool = typer.Option(None, "--fleet/--no-fleet", help="Add the fleet's "
                                        "recent mean level (every series in the file) as "
                                        "features."),
             half_life: float = typer.Option(None, "--half-life", help="Weight training "
                                             "origins by recency, half-life in bins."),
             time_of_day: bool = typer.Option(False, "--time-of-day", help="Add the origin's"
                                              " time of day as a feature."),
             hurdle: bool = typer.Option(None, "--hurdle/--no-hurdle", help="Serve the last "
                                         "value where a classifier says the next horizon "
                                         "will not move (flat memory, idle pods)."),
             recent_window: int = typer.Option(None, "--recent-window", help="Re-pick the served"
                                               " predictor at each origin by its error over "
                                               "this many bins of ended horizons (0: off)."),
             recent_intervals: bool = typer.Option(
                 None, "--recent-intervals/--no-recent-intervals", help="Re-calibrate p10/p90"
                 " at each origin from the served errors over the re-pick's window."),
             save: Path = typer.Option(None, "--save", help="Also save the fitted model "
                                       "(model.txt + manifest.json) to this directory.")
             ) -> None:
    """Fit on bins before --test-start, forecast every later origin, compare with baselines.
    With phases, the pod's current phase (of the last bin before each origin) is a feature.
    The `model` column names what is served per series: the model, or the baseline it did not
    beat on the validation tail of the training window."""
    from features.demand_series import horizon_bins, parse_freq, read_series_csv, regularize
    from features.usage_series import attach_phases, read_phases
    from forecaster.usage.model import UsageForecaster, preset

    if agg != "mean":
        raise ForesightError("usage backtest forecasts levels: only --agg mean is supported")
    H = horizon_bins(horizon, freq)
    if y_max is not None and not y_max > 0:
        raise ForesightError(f"bad --y-max {y_max}: must be > 0")
    if half_life is not None and not half_life > 0:
        raise ForesightError(f"bad --half-life {half_life}: must be > 0 bins")
    if recent_window is not None and recent_window < 0:
        raise ForesightError(f"bad --recent-window {recent_window}: must be >= 0 bins")
    check_output(out, "--out", inputs={"--series": series_csv, "--phases": phases})
    check_output(save, "--save", directory=True, model="usage",
                 inputs={"--series": series_csv, "--phases": phases})
    distinct_outputs({"--out": out, "--save": save})
    try:
        start = pd.Timestamp(test_start)
    except ValueError:
        raise ForesightError(f"bad --test-start {test_start!r}: use RFC 3339") from None
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    ph = read_phases(phases) if phases is not None else None  # checked before the work
    df = regularize(read_series_csv(series_csv), freq, agg="mean")
    if ph is not None:
        df = attach_phases(df, ph, freq)
    else:
        df = _phase_column(df, series_csv, freq)
    train = df[df["ds"] < start]
    if train.empty:
        raise ForesightError(f"--test-start {start}: no history before it to fit on (the "
                             f"series start at {df['ds'].min()}): give a later --test-start")
    if not (df["ds"] >= start).any():
        raise ForesightError(f"--test-start {start}: nothing to test after it (the series end "
                             f"at {df['ds'].max()}): give an earlier --test-start")
    try:
        kw = preset(preset_name, parse_freq(freq))
    except ValueError as exc:
        raise ForesightError(f"bad --preset: {exc}") from None
    given = {"fleet": fleet, "half_life": half_life, "hurdle": hurdle,
             "recent_window": recent_window, "recent_intervals": recent_intervals}
    kw.update({k: v for k, v in given.items() if v is not None})
    if recent_window is not None:  # given in bins, whatever unit the preset counts in
        kw["recent_unit"] = "bins"
    kw["recent_window"] = kw.get("recent_window") or None  # 0: off
    if recent_intervals and not kw["recent_window"]:
        raise ForesightError("--recent-intervals needs a recent window: give --recent-window "
                             "(the serving preset has one)")
    kw["recent_intervals"] = bool(kw.get("recent_intervals")) and bool(kw["recent_window"])
    try:
        model = UsageForecaster(horizon=H, y_max=y_max, time_of_day=time_of_day,
                                **kw).fit(train)
    except ValueError as exc:
        raise ForesightError(f"cannot fit: {exc}") from None
    pred = model.predict_origins(df, start)
    if pred.empty:
        raise ForesightError("no test origin has a complete horizon after --test-start")
    out.parent.mkdir(parents=True, exist_ok=True)
    pred.to_csv(out, index=False)
    if save is not None:
        model.save(save)
    console.print(served_table(pred, model, horizon))
    console.print(f"settings: preset {preset_name}" + "".join(
        f", {k} {v}" for k, v in kw.items()))
    console.print(f"served overall: {model.served_} (chosen on the validation tail of the "
                  "training window; per series and origin in the `model` column)")
    if model.tune:
        kept = ", ".join(f"{k} {v}" for k, v in model.params_.items()) or "the preset's own"
        console.print(f"tree settings kept on the validation tail: {kept} (of "
                      f"{1 + len(model.tune)} tried)")
    if model.recent_window:
        whose = "the fleet's" if model.recent_scope == "fleet" else "each series' own"
        console.print(f"re-picked at each origin from {whose} errors over the last "
                      f"{model.window_bins()} bins of ended horizons: the best baseline there, "
                      f"or the model if it beat it by {model.min_gain:.0%}" + (
                          f", leaving the validated choice only {model.recent_z:g} standard "
                          "errors clear of it" if model.recent_z else ""))
    cov = float(np.mean((pred["y_true"] >= pred["p10"]) & (pred["y_true"] <= pred["p90"])))
    console.print(f"p10-p90 covered {cov:.1%} of test origins (nominal {model.coverage:.0%}); "
                  + ("re-calibrated at each origin from the served errors over the same "
                     "window" if model.recent_intervals else "calibrated on the validation "
                     "tail of the training window"))
    console.print(f"wrote {out}" + (f" and the model to {save}" if save else ""))


def served_table(pred: pd.DataFrame, model, horizon: str) -> Table:
    """MAE on the test origins and on validation per predictor, and which series each serves."""
    from forecaster.usage.model import BASELINES

    y = pred["y_true"]
    per = pred["model"].value_counts(normalize=True)
    t = Table(title=f"usage backtest: {len(pred)} origins, {pred['unique_id'].nunique()} series,"
                    f" horizon {horizon}")
    for c, j in (("forecast", "left"), ("MAE", "right"), ("validation MAE", "right"),
                 ("served at origins", "right")):
        t.add_column(c, justify=j)
    t.add_row("served (p50)", f"{np.mean(np.abs(pred['p50'] - y)):.5g}", "", "100%")
    for c, col in (("model", "model_p50"), *((b, b) for b in BASELINES)):
        name = f"ses (alpha {model.ses_alpha_:g})" if c == "ses" else c
        t.add_row(name, f"{np.mean(np.abs(pred[col] - y)):.5g}",
                  f"{model.val_scores_[c]:.5g}", f"{per.get(c, 0.0):.0%}")
    return t


def _phase_column(df: pd.DataFrame, path: Path, freq: str) -> pd.DataFrame:
    """The series file's own `phase` column, on the regular grid (carried forward over bins
    the file did not list, as the levels are); df unchanged when the file has none."""
    from features.demand_series import parse_freq, parse_times

    cols = pd.read_csv(path, nrows=0).columns
    if "phase" not in cols:
        return df
    raw = pd.read_csv(path, usecols=["unique_id", "ds", "phase"], dtype={"unique_id": str})
    raw["ds"] = parse_times(raw["ds"], f"{path}: column ds").dt.floor(parse_freq(freq))
    raw = raw.drop_duplicates(["unique_id", "ds"], keep="last")
    out = df.merge(raw, on=["unique_id", "ds"], how="left")
    out["phase"] = out.groupby("unique_id")["phase"].ffill().fillna("")
    return out


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Short-horizon usage forecasts of running pods.")
    sub.command("series")(series)
    sub.command("backtest")(backtest)
    app.add_typer(sub, name="usage")
