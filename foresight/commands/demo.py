"""`foresight demo`: the main job, end to end, on the embedded seed data.

A seeded synthetic cluster (data/seeds, magnitudes from real traces) stands in for Prometheus;
the retraining job fits, backtests and publishes every model into a local registry; a second
run shows the gate keeping the models in service. No Prometheus, no cluster. Heavy libraries
are imported inside the steps so that `foresight --help` stays fast.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ground.errors import ForesightError

# piped output (CI logs, `| tee`) gets room for the summary tables instead of 80 columns
console = Console() if sys.stdout.isatty() else Console(width=150)


def _step(title: str) -> Callable:
    def wrap(fn: Callable) -> Callable:
        def run(*args, **kwargs):
            console.rule(f"[bold cyan]{title}")
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            console.print(f"[dim]{time.perf_counter() - t0:.1f} s[/]")
            return result
        return run
    return wrap


@_step("1. Synthetic cluster history (from data/seeds; magnitudes from real traces)")
def simulate(out: Path, seed: int, days: float, nodes: int):
    from features.ingest import write_tables
    from features.openmetrics import write_openmetrics
    from training.sources import synthetic

    history = synthetic(seed=seed, days=days, nodes=nodes)
    write_tables(out / "data", {"samples": history.samples, "pods": history.pods,
                                "queues": history.queues})
    n = write_openmetrics(out / "data" / "history.om", samples=history.samples, pods=history.pods,
                          queues=history.queues, pod_step_s=300)
    console.print(f"{history.source}: {len(history.samples):,} GPU samples, {len(history.pods):,} pods, "
                  f"as Parquet in {out / 'data'} and as {n:,} OpenMetrics samples "
                  f"(`foresight backfill` loads them into Prometheus)")
    return history


@_step("2. What the telemetry says, per workload (GPUs with one pod)")
def summarize(history) -> None:
    s = history.samples
    s = s[s["pod"] != ""]
    # dcgm-exporter reports a shared GPU's values under every pod on it: keep GPUs with one pod
    s = s[s.groupby(["ts", "uuid"])["pod"].transform("nunique") == 1]
    wide = s.pivot_table(index=["namespace", "pod", "ts"], columns="metric", values="value", aggfunc="mean")
    wide = wide.reset_index().merge(history.pods[["namespace", "pod", "workload"]], on=["namespace", "pod"])
    agg = {"pods": ("pod", "nunique")}
    for metric, name, fn in (("DCGM_FI_PROF_SM_ACTIVE", "SM active mean", "mean"),
                             ("DCGM_FI_PROF_DRAM_ACTIVE", "DRAM active mean", "mean"),
                             ("DCGM_FI_DEV_FB_USED", "FB p95 MiB", lambda x: x.quantile(0.95)),
                             ("DCGM_FI_DEV_POWER_USAGE", "power p95 W", lambda x: x.quantile(0.95))):
        if metric in wide.columns:
            agg[name] = (metric, fn)
    print_frame("Per-workload utilization, measured", wide.groupby("workload").agg(**agg).reset_index())


@_step("3. The retraining job: fit, backtest against baselines, gate, publish")
def train(history, registry: Path, report: Path, title: str):
    from foresight.commands.train import summary_table
    from training.pipeline import TrainConfig, run
    from training.report import write_report

    t0 = time.perf_counter()
    result = run(history, str(registry), TrainConfig())
    _, html = write_report(result, str(registry), report)
    console.print(summary_table(result, html, time.perf_counter() - t0, title=title))
    return result


def _first_title(registry: Path) -> str:
    """The first run's title: a demo run again over its own registry finds the models it
    published last time in service, and the gate keeps them: say so instead of "empty"."""
    from artifacts.registry import Registry

    reg = Registry(registry)
    live = [k for k in reg.kinds() if reg.current(k) is not None]
    if not live:
        return "first run: an empty registry"
    return (f"first run: {registry} already serves {', '.join(live)} from an earlier demo "
            f"(for a fresh start: --out elsewhere, or remove {registry})")


def print_frame(title: str, df) -> None:
    table = Table(title=title, title_justify="left")
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "fiu" else "left")
    for row in df.itertuples(index=False):
        table.add_row(*[f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row])
    console.print(table)


def _check_options(out: Path, seed: int, days: float, nodes: int) -> None:
    """Everything that would fail a stage, refused before stage 1 writes the tables: a
    failing demo must not have replaced the data of an earlier one."""
    import pandas as pd

    from artifacts.registry import Registry
    from foresight.commands import check_output
    from training.kinds import KINDS
    from training.pipeline import TrainConfig, check_registry
    from training.sources import synthetic_config

    synthetic_config(seed=seed, days=days, nodes=nodes)  # the ranges and size simulate checks
    holdout = TrainConfig().holdout
    if pd.Timedelta(days=days) <= holdout:  # stage 3 backtests on the last day
        raise ForesightError(f"--days {days:g}: must be longer than the backtest window "
                             f"({holdout / pd.Timedelta(days=1):g} day)")
    check_output(out, "--out", directory=True)
    for sub in ("data", "registry", "report"):
        check_output(out / sub, "--out", directory=True)
    for name in ("data/samples.parquet", "data/pods.parquet", "data/queues.parquet",
                 "data/history.om", "report/metrics.json", "report/report.html"):
        check_output(out / name, "--out")  # e.g. a directory where the file goes
    check_registry(Registry(out / "registry"), KINDS)


def demo_cmd(
    out: Path = typer.Option(Path("demo-out"), help="Where the demo writes its tables, registry and report."),
    seed: int = typer.Option(7, help="Seed of the synthetic cluster."),
    days: float = typer.Option(3.0, help="Days of synthetic history (the last one is the backtest window)."),
    nodes: int = typer.Option(4, help="GPU nodes (4 GPUs each) in the synthetic cluster."),
) -> None:
    """Run the main job end to end on the embedded default data (no Prometheus, no cluster)."""
    import copy

    _check_options(out, seed, days, nodes)
    t0 = time.perf_counter()
    console.print(Panel.fit("[bold]Foresight demo[/]: synthetic GPU cluster -> telemetry tables -> "
                            "retraining job -> model registry", border_style="cyan"))
    history = simulate(out, seed, days, nodes)
    summarize(history)
    registry, report = out / "registry", out / "report"
    train(copy.copy(history), registry, report, title=_first_title(registry))
    train(copy.copy(history), registry, report,
          title="second run on the same history: only what beats the model in service is published")
    console.print(Panel.fit(f"demo finished in {time.perf_counter() - t0:.0f} s\n"
                            f"tables: {out / 'data'}   registry: {registry}   report: {report / 'report.html'}\n"
                            f"next: foresight registry list --registry {registry}",
                            border_style="green"))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
