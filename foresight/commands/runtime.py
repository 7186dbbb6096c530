"""`foresight runtime backtest`: how well a pending pod's run time is known before it starts,
on a cluster's pods table or a public trace, split by time as the retraining job splits it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output, format_error, one_source
from ground.errors import ForesightError

SOURCES = ("--data", "--openb", "--dlrm")


def _pods(data: Path | None, openb: Path | None, dlrm: Path | None) -> tuple[str, pd.DataFrame]:
    source, path = one_source(dict(zip(SOURCES, (data, openb, dlrm))))
    if path.is_dir() != (source == "--data"):  # else "not found" for a path that is there
        raise ForesightError(f"{source} {path} is a directory: give the trace's CSV file"
                             if path.is_dir() else
                             f"{source} {path} is a file: give the tables directory")
    from features.ingest import read_pods
    from features.trace_pods import dlrm_pods, openb_pods

    read = {"--data": read_pods, "--openb": openb_pods, "--dlrm": dlrm_pods}[source]
    try:
        pods = read(path)
    except (ValueError, KeyError, OSError) as exc:  # a file of another format
        raise format_error(source, path, exc) from None
    return source, pods


def backtest(data: Path = typer.Option(None, "--data", help="Directory of tables (foresight "
                                       "ingest or simulate): the pods table."),
             openb: Path = typer.Option(None, "--openb", help="An Alibaba openb pod list CSV "
                                        "(creation / scheduled / deletion times)."),
             dlrm: Path = typer.Option(None, "--dlrm", help="A DLRM-format trace CSV."),
             test_share: float = typer.Option(0.3, "--test-share", help="Share of pod creations"
                                              " held out at the end (the test)."),
             out: Path = typer.Option(None, "--out", help="Also write each test pod's "
                                      "prediction (CSV).")) -> None:
    """Run time of pods before they start: p10/p50/p90 per workload (then queue x GPU request
    x priority, then queue), against the workload's last run and the queue's median."""
    from training.kinds import SkipKind
    from training.kinds.runtime import fit, score, split

    if not 0.0 < test_share < 1.0:  # and NaN
        raise ForesightError(f"--test-share {test_share}: must be in (0, 1)")
    check_output(out, "--out", inputs={"--data": data, "--openb": openb, "--dlrm": dlrm})
    source, pods = _pods(data, openb, dlrm)
    if pods["created"].isna().all():
        raise ForesightError(f"{source}: no pod has a creation time")
    # the retraining job's split at the cutoff that leaves `test_share` of creations after it:
    # train on the pods finished before it, test on those created at or after it
    cut = pods["created"].quantile(1.0 - test_share)
    try:
        train, test = split({"pods": pods.dropna(subset=["started", "finished"])}, cut)
        model = fit(train, None)
        m, pred = score(model, test, train)
    except SkipKind as exc:
        raise ForesightError(f"{exc} (change --test-share)") from None
    console = Console(highlight=False)
    table = Table(title=f"run time before start: {m['train_pods']} pods to learn from, "
                        f"{m['backtest_pods']} held out (the last {test_share:.0%} created)")
    for c in ("predictor", "MAE (min)", "log-MAE"):
        table.add_column(c, justify="left" if c == "predictor" else "right")
    y = pred["y_true"].to_numpy(float)
    for name, col in (("model p50", "p50"), ("last run of the workload", "last"),
                      ("queue median", "queue_median")):
        p = pred[col].to_numpy(float)
        table.add_row(name, f"{np.mean(np.abs(p - y)) / 60:.1f}",
                      f"{np.mean(np.abs(np.log(p) - np.log(y))):.2f}")
    console.print(table)
    best = min(("last", "queue_median"), key=lambda k: m[f"baseline_{k}_mae"])
    beats = m["mae"] < m[f"baseline_{best}_mae"]
    levels = pred["level"].value_counts(normalize=True)
    console.print(f"\\[p10, p90] holds {m['p10_p90_coverage']:.0%} of held-out run times; "
                  "answered by " + ", ".join(f"{k} {v:.0%}" for k, v in levels.items()))
    console.print("the model beats both baselines: serve it" if beats else
                  f"the model does not beat `{best}` (MAE {m[f'baseline_{best}_mae'] / 60:.1f} "
                  f"vs {m['mae'] / 60:.1f} min): the retraining job would serve `{best}`")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        pred.to_csv(out, index=False)
        console.print(f"wrote {len(pred)} predictions to {out}")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Run time of pending pods.")
    sub.command("backtest")(backtest)
    app.add_typer(sub, name="runtime")
