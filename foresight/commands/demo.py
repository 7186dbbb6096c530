"""`foresight demo`: the whole pipeline on the embedded seed data, no Prometheus or cluster.

Each step is a small function; heavy libraries are imported inside it so that `foresight
--help` stays fast.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

console = Console()


def _step(title: str) -> Callable:
    def wrap(fn: Callable) -> Callable:
        def run(*args, **kwargs):
            console.rule(f"[bold cyan]{title}")
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            console.print(f"[dim]{title}: {time.perf_counter() - t0:.1f} s[/]")
            return result
        return run
    return wrap


@_step("1. Synthetic cluster history (from data/seeds; magnitudes from real traces)")
def simulate(out: Path, seed: int, days: float, nodes: int):
    from features.ingest import write_tables
    from features.openmetrics import write_openmetrics
    from simulator import SimConfig, generate_cluster

    cluster = generate_cluster(SimConfig(seed=seed, days=days, nodes=nodes))
    write_tables(out, {"samples": cluster.samples, "pods": cluster.pods, "queues": cluster.queues})
    write_tables(out / "truth", cluster.truth)
    n = write_openmetrics(out / "history.om", samples=cluster.samples, pods=cluster.pods,
                          queues=cluster.queues)
    cfg = cluster.config
    console.print(f"{cfg.nodes} nodes x {cfg.gpus_per_node} {cfg.gpu_model} GPUs, {cfg.days:g} days at "
                  f"{cfg.step_s:g} s: {len(cluster.samples):,} GPU samples, {len(cluster.pods):,} pods, "
                  f"{n:,} OpenMetrics samples in {out / 'history.om'}")
    return cluster


@_step("2. What the telemetry says, per workload (GPUs with one pod)")
def summarize(cluster) -> None:
    s = cluster.samples
    s = s[s["pod"] != ""]
    # dcgm-exporter reports a shared GPU's values under every pod on it: keep GPUs with one pod
    pods_on_gpu = s.groupby(["ts", "uuid"])["pod"].transform("nunique")
    s = s[pods_on_gpu == 1]
    wide = s.pivot_table(index=["namespace", "pod", "ts"], columns="metric", values="value", aggfunc="mean")
    wide = wide.reset_index().merge(cluster.pods[["namespace", "pod", "workload"]], on=["namespace", "pod"])
    agg = {"pods": ("pod", "nunique")}
    for metric, name, fn in (("DCGM_FI_PROF_SM_ACTIVE", "SM active mean", "mean"),
                             ("DCGM_FI_DEV_FB_USED", "FB p95 MiB", lambda x: x.quantile(0.95)),
                             ("DCGM_FI_DEV_POWER_USAGE", "power mean W", "mean"),
                             ("DCGM_FI_DEV_POWER_USAGE", "power p95 W", lambda x: x.quantile(0.95))):
        if metric in wide.columns:
            agg[name] = (metric, fn)
    table = wide.groupby("workload").agg(**agg).reset_index()
    _print_frame("Per-workload utilization (measured from the samples)", table)

    truth = cluster.truth
    if "interference" in truth and len(truth["interference"]):
        inter = truth["interference"]
        by = inter.groupby("sharing")["speed"].agg(episodes="size", mean_speed="mean", p10_speed=lambda x: x.quantile(0.1),
                                                   min_speed="min").reset_index()
        _print_frame("Co-location episodes (ground truth speed = co-located / solo)", by)
    if "demand" in truth and len(truth["demand"]):
        d = truth["demand"]
        _print_frame("GPU demand arriving per queue (ground truth)",
                     d.groupby("unique_id")["y"].agg(["sum", "mean", "max"]).reset_index()
                     .rename(columns={"unique_id": "queue", "sum": "GPUs total", "mean": "per bin",
                                      "max": "max bin"}))


def _print_frame(title: str, df) -> None:
    table = Table(title=title, title_justify="left")
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "fiu" else "left")
    for row in df.itertuples(index=False):
        table.add_row(*[f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)
                        for v in row])
    console.print(table)


def demo_cmd(
    out: Path = typer.Option(Path("demo-out"), help="Where the demo writes its tables, models and report."),
    seed: int = typer.Option(7, help="Seed of the synthetic cluster."),
    days: float = typer.Option(2.0, help="Days of synthetic history."),
    nodes: int = typer.Option(4, help="GPU nodes in the synthetic cluster."),
) -> None:
    """Run the pipeline end to end on the embedded default data (no Prometheus, no cluster)."""
    t0 = time.perf_counter()
    console.print(Panel.fit("[bold]Foresight demo[/]: synthetic GPU cluster -> telemetry tables -> models",
                            border_style="cyan"))
    cluster = simulate(out, seed, days, nodes)
    summarize(cluster)
    console.print(Panel.fit(f"demo finished in {time.perf_counter() - t0:.0f} s; outputs in {out}/",
                            border_style="green"))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
