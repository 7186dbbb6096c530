"""`foresight simulate`: write a synthetic cluster history (partitioned samples as `foresight
ingest` writes them, tables, truth, OpenMetrics)."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=160)


def simulate(
    out: Path = typer.Option(..., "--out", help="Output directory."),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed: same seed, same bytes."),
    days: float = typer.Option(2.0, "--days", help="Length of the history in days."),
    nodes: int = typer.Option(4, "--nodes", help="GPU nodes."),
    gpus_per_node: int = typer.Option(4, "--gpus-per-node", help="GPUs per node."),
    step: float = typer.Option(30.0, "--step", help="Sample period in seconds (<= 1: the "
                               "iteration period shows in SM activity)."),
    gpu_model: str = typer.Option("A40", "--gpu-model", help="A40, V100, P100, RTX6000, "
                                  "A100 or H100."),
    load: float = typer.Option(0.7, "--load", help="Offered load (GPU-seconds arriving per "
                               "GPU-second)."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated metric "
                                          "names to keep (default: all)."),
    openmetrics: bool = typer.Option(False, "--openmetrics", help="Also write DIR/history.om "
                                     "for promtool tsdb create-blocks-from openmetrics."),
) -> None:
    """Generate a seeded, deterministic GPU-cluster history with its ground truth."""
    from simulator import SimConfig
    from simulator.partitioned import write_partitioned

    from foresight.commands import check_output

    if metrics is not None and not any(m.strip() for m in metrics.split(",")):
        raise ForesightError(f"--metrics {metrics!r}: names no metric (default: all)")
    try:
        cfg = SimConfig(seed=seed, days=days, step_s=step, nodes=nodes,
                        gpus_per_node=gpus_per_node, gpu_model=gpu_model, load=load,
                        metrics=tuple(m.strip() for m in metrics.split(",") if m.strip())
                        if metrics else None)
        cfg.metric_names()
        from simulator.workloads import gpu_spec
        gpu_spec(gpu_model)
    except ValueError as exc:
        raise ForesightError(str(exc)) from None
    from simulator.limits import check_size

    check_size(cfg)
    t0 = time.perf_counter()
    check_output(out, "--out", directory=True)
    _refuse_real_history(out)
    # this run's files only: an earlier run's OpenMetrics export would describe other pods
    (out / "history.om").unlink(missing_ok=True)
    # samples by (day, metric) as `foresight ingest` writes them: `train --data` streams them;
    # an earlier run's samples (partitions of other days, or the older flat table) are replaced
    shutil.rmtree(out / "samples", ignore_errors=True)
    info = write_partitioned(cfg, out, truth=True)
    (out / "samples.parquet").unlink(missing_ok=True)
    t_gen = time.perf_counter() - t0
    n_om = None
    if openmetrics:
        from features.openmetrics import write_openmetrics_dir

        n_om = write_openmetrics_dir(out / "history.om", out)
    _summary(cfg, info, out, t_gen, n_om)


def _refuse_real_history(out: Path) -> None:
    """A directory `foresight ingest` filled holds history that cannot be pulled again (the
    retention has moved on): regenerating over it would delete it. An earlier simulate's
    output (its ingest.json says synthetic) is replaced, as before."""
    import json

    man = out / "ingest.json"
    if not man.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise ForesightError(f"--out {out} is not empty and holds no Foresight dataset: "
                                 "give a new or empty directory")
        return
    try:
        source = str(json.loads(man.read_text()).get("source", ""))
    except (OSError, ValueError, AttributeError):
        source = ""
    if not source.startswith("synthetic"):
        raise ForesightError(f"{out} holds an ingested history ({man} is not from simulate): "
                             "give another --out")


def _summary(cfg, info: dict, out: Path, t_gen: float, n_om: int | None) -> None:
    truth = info["truth"]
    table = Table(title=f"Synthetic cluster -> {out}", title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("GPUs", f"{cfg.nodes} x {cfg.gpus_per_node} {cfg.gpu_model}"),
        ("window", f"{cfg.start:%Y-%m-%d %H:%M} UTC + {cfg.days:g} d at {cfg.step_s:g} s"),
        ("GPU samples", f"{info['rows']:,} ({len(cfg.metric_names())} metrics, "
                        f"{info['partitions']} day x metric partitions)"),
        ("pods", f"{info['pods']:,} in {len(cfg.queues)} queues"),
        ("co-location episodes", f"{len(truth['interference']):,}"),
        ("median speed (GPU shared)", _median_shared(truth["interference"])),
        ("unhealthy GPUs", f"{len(truth['health'])}"),
        ("generated in", f"{t_gen:.1f} s"),
    ]
    if n_om is not None:
        rows.append(("OpenMetrics samples", f"{n_om:,} in history.om"))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


def _median_shared(inter) -> str:
    shared = inter[inter["sharing"] != "node"]
    return f"{shared['speed'].median():.2f}" if len(shared) else "-"


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
