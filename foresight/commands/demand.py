"""`foresight demand backtest|forecast`: queue-demand forecasts from a long-format series CSV."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output, distinct_outputs, format_error, one_source
from ground.errors import ForesightError


def _load(series: Path, freq: str, agg: str, fill: str = "auto", target: str = "auto"):
    """The series on a regular grid; a request rate's missing bin is a rate of 0 (exports
    drop zero rows: features/gateway_qps.py), another mean's the last level."""
    from features.demand_series import read_series_csv, regularize

    if agg not in ("sum", "mean"):
        raise ForesightError(f"bad --agg {agg!r}: use sum or mean")
    if fill not in ("auto", "zero", "carry"):
        raise ForesightError(f"bad --fill {fill!r}: use auto, zero or carry")
    if fill == "auto" and target == "rate":
        fill = "zero"
    return regularize(read_series_csv(series), freq, agg, fill)


DEFAULT_VAL_BINS = 1008  # a week of 10-min bins
VAL_BINS_HELP = ("calibration window, in bins (default 1008; with a shorter history, a fifth "
                 "of it)")


def _check_val_bins(val_bins: int | None) -> None:
    if val_bins is not None and val_bins < 1:
        raise ForesightError(f"--val-bins {val_bins}: must be at least 1")


def calibration_window(bins: int, val_bins: int | None, H: int, horizon: str, where: str) -> int:
    """The calibration window to use. The model needs val_bins + 2 horizons + 50 bins of
    history; without --val-bins the default shrinks to a fifth of a shorter history (the
    retraining job's rule), else say which option to change (a horizon too long even for a
    1-bin window is not fixed by lowering --val-bins)."""
    if bins < 1 + 2 * H + 50:
        raise ForesightError(f"--horizon {horizon} ({H} bins) is too long for {where} ({bins} "
                             f"bins; needs 2 horizons + 51): give a shorter --horizon")
    given = val_bins is not None
    val_bins = val_bins if given else DEFAULT_VAL_BINS
    if bins >= val_bins + 2 * H + 50:
        return val_bins
    if not given:
        short = max(1, min(bins // 5, bins - 2 * H - 50))
        Console(stderr=True, highlight=False).print(
            f"{where} has {bins} bins: calibration window {short} bins (a fifth of it; the "
            f"default {DEFAULT_VAL_BINS} needs {DEFAULT_VAL_BINS + 2 * H + 50})")
        return short
    raise ForesightError(f"{where} ({bins} bins) is too short for a {val_bins}-bin calibration "
                         "window: lower --val-bins")


def _test_start(df: pd.DataFrame, value: str, freq: str, horizon: int) -> pd.Timestamp:
    try:
        T = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ForesightError(f"bad --test-start {value!r}: not a timestamp") from None
    T = T.tz_localize("UTC") if T.tzinfo is None else T.tz_convert("UTC")
    lo, hi = df["ds"].min(), df["ds"].max() + pd.Timedelta(freq)
    if not lo < T <= hi - horizon * pd.Timedelta(freq):
        raise ForesightError(f"--test-start {T} is outside the data ({lo} .. {hi}) or leaves no full horizon")
    return T


#: The design bench/demand_dlrm.py froze on its dev week (real GPU arrivals, 10-min bins): a
#: ratio target with an absolute level floor of 0.1 per bin and smaller, slower trees.
ARRIVALS = {"target": "ratio", "unit_scale": False, "level_floor": 0.1, "n_estimators": 300,
            "learning_rate": 0.03, "num_leaves": 15, "min_child_samples": 50}
#: The design bench/demand_qps.py picked on its dev folds (a gateway request rate, 1-min bins,
#: mean of the next 10 min): the residual on the EWMA, the EWMAs' mean as a candidate, and the
#: served predictor re-picked per origin from the last 6 ended horizons where the evidence
#: for the switch is 1.645 standard errors; p10/p90 re-calibrated at each origin from the
#: served errors of the last 36 ended horizons (6 h at 10 min).
RATE = {"target": "residual", "base": "ewma", "multiscale": True, "n_estimators": 200,
        "min_child_samples": 20, "mix": True, "recent_window": 6, "recent_z": 1.645,
        "recent_intervals": 36}
SERIES_HELP = ("CSV with unique_id, ds, y; one row per series and time; ds in ISO 8601 / "
               "RFC 3339 (no offset: UTC) or plain numbers as epoch seconds")
FILL_HELP = ("bins with no sample: auto (0 for --agg sum and --target rate, the last level "
             "for other means), zero (e.g. a rate exported only when non-zero, as GenTD26's "
             "QPS) or carry (the last level)")
TARGET_HELP = ("auto (ratio for --agg sum, residual for mean), residual (levels), ratio "
               "(bursty counts such as GPUs arriving) or rate (request rates, --agg mean)")


def _target(value: str, agg: str = "sum") -> dict:
    """--target: `residual` (levels), `ratio` (arrivals: the DLRM dev design) or `rate`
    (request rates: the gateway-QPS dev design); `auto` picks by --agg, since summed series
    are arrival counts and averaged ones levels."""
    if value == "auto":
        value = "ratio" if agg == "sum" else "residual"
    if value == "residual":
        return {"target": "residual"}
    if value == "ratio":
        return dict(ARRIVALS)
    if value == "rate":
        if agg != "mean":
            raise ForesightError("--target rate forecasts a level: use it with --agg mean")
        return dict(RATE)
    raise ForesightError(f"bad --target {value!r}: use auto, residual, ratio or rate")


def served_table(model, title: str) -> Table:
    """Per series: the predictor served and the validation MAE it was chosen on."""
    t = Table(title=title)
    for c in ("series", "served (model)", "validation MAE: model", "best baseline"):
        t.add_column(c, justify="left" if c in ("series", "served (model)") else "right")
    for uid, sc in sorted(model.val_scores_.items()):
        base = min((k for k in sc if k != "model"), key=sc.get, default=None)
        t.add_row(uid, model.served(uid), f"{sc.get('model', float('nan')):.3f}",
                  f"{base} {sc[base]:.3f}" if base else "-")
    return t


def series_table(t: pd.DataFrame) -> Table:
    """Each series against its own best simple baseline, in its own units."""
    table = Table(title="per series, test origins: served forecast vs the best simple baseline")
    for c in ("series", "served MAE", "best baseline", "ratio", "coverage p10-p90"):
        table.add_column(c, justify="left" if c == "series" else "right")
    for r in t.to_dict("records"):
        table.add_row(str(r["series"]), f"{r['served MAE']:,.3f}",
                      f"{r['best baseline']} {r['baseline MAE']:,.3f}", f"{r['ratio']:.3f}",
                      f"{r['coverage']:.1%}")
    return table


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Forecast the GPU demand arriving per queue.")

    @sub.command("backtest")
    def backtest_cmd(
        series: Path = typer.Option(..., "--series", help=SERIES_HELP),
        freq: str = typer.Option("10min", "--freq"),
        horizon: str = typer.Option("1h", "--horizon"),
        test_start: str = typer.Option(..., "--test-start", help="first origin (UTC)"),
        out: Path = typer.Option(..., "--out", help="PRED.csv to write"),
        agg: str = typer.Option("sum", "--agg", help="sum (flows) or mean (levels)"),
        val_bins: Optional[int] = typer.Option(None, "--val-bins", help=VAL_BINS_HELP),
        plot: Path = typer.Option(None, "--plot", help="PNG path (default: PRED.png)"),
        no_ets: bool = typer.Option(False, "--no-ets", help="skip the statsforecast baseline"),
        target: str = typer.Option("auto", "--target", help=TARGET_HELP),
        fill: str = typer.Option("auto", "--fill", help=FILL_HELP),
    ) -> None:
        """Rolling-origin backtest; prints MAE, MASE, pinball and coverage per method."""
        from features.demand_series import horizon_bins
        from forecaster.demand.backtest import backtest, per_series, plot_busiest

        H = horizon_bins(horizon, freq)
        kw = _target(target, agg)
        _check_val_bins(val_bins)
        check_output(out, "--out", inputs={"--series": series})
        png = plot or out.with_suffix(".png")  # the default sits beside --out
        check_output(png, "--plot", inputs={"--series": series}, image=True)
        distinct_outputs({"--out": out, "--plot": png})
        df = _load(series, freq, agg, fill, target)
        T = _test_start(df, test_start, freq, H)
        val_bins = calibration_window(int((df["ds"] < T).groupby(df["unique_id"]).sum().max()),
                                  val_bins, H, horizon, "the history before --test-start")
        try:
            pred, met, model = backtest(df, freq, H, T, agg=agg, val_bins=val_bins,
                                        with_ets=not no_ets, **kw)
        except ValueError as exc:
            raise ForesightError(str(exc).splitlines()[0]) from None
        cols = ["unique_id", "origin", "y_true", "p10", "p50", "p90", "model", "lightgbm",
                *[c for c in ("persistence", "mean_last_h", "ewma", "snaive_day", "snaive_week",
                                    "ets")
                  if c in pred]]
        out.parent.mkdir(parents=True, exist_ok=True)
        pred[cols].round(6).to_csv(out, index=False)  # undo float noise of per-queue scaling
        png.parent.mkdir(parents=True, exist_ok=True)
        uid = plot_busiest(pred, str(png), f"horizon {horizon}, agg {agg}:")
        table = Table(title=f"demand backtest: horizon {horizon}, agg {agg}, {len(pred)} origins, "
                            f"shrink {model.lam_:g}")
        for c in ("method", "n", "MAE", "MASE", "pinball", "coverage p10-p90"):
            table.add_column(c, justify="left" if c == "method" else "right")
        for r in met.itertuples():
            table.add_row(r.method, str(r.n), f"{r.MAE:.3f}", f"{r.MASE:.3f}",
                          f"{r.pinball:.3f}", f"{r.coverage_p10_p90:.1%}")
        Console().print(table)
        if pred["unique_id"].nunique() > 1:  # the pooled MAE is the largest series' (units)
            Console().print(series_table(per_series(pred)))
        Console().print(served_table(model, "served per series (model = the forecast above; "
                                            "a baseline where the model lost on validation)"))
        typer.echo(f"wrote {out} and {png} (busiest queue {uid})")

    @sub.command("forecast")
    def forecast_cmd(
        series: Path = typer.Option(..., "--series", help=SERIES_HELP),
        freq: str = typer.Option("10min", "--freq"),
        horizon: str = typer.Option("1h", "--horizon"),
        agg: str = typer.Option("sum", "--agg", help="sum (flows) or mean (levels)"),
        val_bins: Optional[int] = typer.Option(None, "--val-bins", help=VAL_BINS_HELP),
        save: Path = typer.Option(None, "--save", help="also write the model artifact here"),
        target: str = typer.Option("auto", "--target", help=TARGET_HELP),
        fill: str = typer.Option("auto", "--fill", help=FILL_HELP),
    ) -> None:
        """Fit on the whole series and print the next horizon's forecast per queue."""
        from features.demand_series import horizon_bins
        from forecaster.demand.model import DemandForecaster

        H = horizon_bins(horizon, freq)
        kw = _target(target, agg)
        _check_val_bins(val_bins)
        check_output(save, "--save", directory=True, model="demand", inputs={"--series": series})
        df = _load(series, freq, agg, fill, target)
        val_bins = calibration_window(int(df.groupby("unique_id").size().max()), val_bins, H,
                                  horizon, "the longest series")
        try:
            model = DemandForecaster(freq=freq, horizon=H, agg=agg, val_bins=val_bins, **kw).fit(df)
        except ValueError as exc:
            raise ForesightError(str(exc).splitlines()[0]) from None
        fc = model.predict(df)
        if save:
            model.save(save)
        table = Table(title=f"demand forecast: next {horizon} ({agg})")
        for c in ("queue", "origin", "p10", "p50", "p90", "model", "persistence"):
            table.add_column(c, justify="left" if c in ("queue", "origin", "model") else "right")
        for r in fc.itertuples():
            table.add_row(str(r.unique_id), str(pd.Timestamp(r.origin)), f"{r.p10:.2f}",
                          f"{r.p50:.2f}", f"{r.p90:.2f}", str(r.model), f"{r.persistence:.2f}")
        Console().print(table)

    sub.command("series")(series_cmd)
    app.add_typer(sub, name="demand")


SOURCES = ("--data", "--dlrm", "--helios", "--philly", "--qps", "--llm")


def _pods(data: Path) -> pd.DataFrame:
    """The pods table of --data, refusing one without the columns arrivals need (read_pods
    adds a missing column empty: the series would come out with no rows, unexplained)."""
    import pyarrow.parquet as pq

    from features.ingest import TABLE_FILES, read_pods

    path = data / TABLE_FILES["pods"]
    try:
        have = set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 (absent or unreadable: read_pods says which)
        return read_pods(data)
    missing = [c for c in ("queue", "created", "gpu_request") if c not in have]
    if missing:
        raise ForesightError(f"--data {path}: missing column(s) {', '.join(missing)}")
    return read_pods(data)


def series_cmd(
    data: Path = typer.Option(None, "--data", help="Directory of tables (foresight ingest or "
                              "simulate): GPUs requested by the pods created per bin, per queue"),
    dlrm: Path = typer.Option(None, "--dlrm", help="A DLRM-format trace (Alibaba "
                              "disaggregated_DLRM_trace.csv): GPUs requested per bin"),
    helios: Path = typer.Option(None, "--helios", help="A directory of Helios per-VC CSVs: "
                                "running + pending GPUs per VC, averaged per bin"),
    philly: Path = typer.Option(None, "--philly", help="Philly's node sequence (time, active, "
                                "total): active nodes, averaged per bin"),
    qps: Path = typer.Option(None, "--qps", help="A GenTD26-format qps CSV: the gateway's "
                             "API request rate, averaged per bin"),
    llm: Path = typer.Option(None, "--llm", help="An LLM inference request trace (Azure's "
                             "TIMESTAMP, ContextTokens, GeneratedTokens): requests, context "
                             "tokens and generated tokens arriving per bin (three series; a "
                             "1-hour trace wants --freq 10s)"),
    by: str = typer.Option("total", "--by", help="With --dlrm: total (one series) or app"),
    freq: str = typer.Option("10min", "--freq", help="Bin width."),
    out: Path = typer.Option(..., "--out", help="S.csv to write (unique_id, ds, y)."),
) -> None:
    """Build the long demand series (unique_id, ds, y) that backtest and forecast read, from
    a cluster's tables or a public trace's own format."""
    from features import demand_series as ds_
    from features.dlrm_trace import dlrm_arrivals
    from features.gateway_qps import gateway_qps
    from features.llm_trace import llm_load

    sources = dict(zip(SOURCES, (data, dlrm, helios, philly, qps, llm)))
    check_output(out, "--out", inputs=sources)
    source, path = one_source(sources)
    ds_.parse_freq(freq)
    if by != "total" and source != "--dlrm":
        raise ForesightError(f"--by {by}: only with --dlrm")
    try:
        if source == "--data":
            df = ds_.arrivals_from_pods(_pods(path), freq)
        elif source == "--dlrm":
            df = dlrm_arrivals(path, freq, by=by)
        elif source == "--helios":
            df = ds_.helios_series(path, freq)
        elif source == "--philly":
            df = ds_.philly_series(path, freq)
        elif source == "--qps":
            df = gateway_qps(path, freq)
        else:
            df = llm_load(path, freq)
    except (ValueError, KeyError, OSError) as exc:  # a file of another format
        raise format_error(source, path, exc) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    typer.echo(f"wrote {df['unique_id'].nunique()} series, {len(df)} rows "
               f"({df['ds'].min()} .. {df['ds'].max()}) -> {out}")
