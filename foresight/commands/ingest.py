"""`foresight ingest` (Prometheus -> Parquet) and `foresight backfill` (OpenMetrics -> TSDB)."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from features.catalog import LabelConfig
from features.ingest import ingest, now_utc, parse_duration, parse_time, write_tables
from features.openmetrics import backfill
from features.prometheus import PrometheusSource
from foresight.errors import ForesightError

console = Console()


def _labels(overrides: list[str]) -> LabelConfig:
    cfg = LabelConfig()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not value or key not in LabelConfig.__dataclass_fields__ or key == "priorities":
            fields = ", ".join(f for f in LabelConfig.__dataclass_fields__ if f != "priorities")
            raise ForesightError(f"invalid --label {item!r}: expected FIELD=LABEL with FIELD one of {fields}")
        cfg = replace(cfg, **{key: tuple(value.split(",")) if key == "workload" else value})
    return cfg


def _read_secret(path: Optional[Path], env: str) -> Optional[str]:
    if path is not None:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ForesightError(f"cannot read {path}: {exc.strerror}") from None
    return os.environ.get(env) or None


def ingest_cmd(
    prometheus_url: str = typer.Option(..., "--prometheus-url", help="Prometheus, Thanos or Mimir query URL."),
    out: Path = typer.Option(..., "--out", help="Directory for the Parquet tables."),
    since: str = typer.Option("7d", help="History length before --end, e.g. 6h, 7d."),
    start: Optional[str] = typer.Option(None, help="Start time (RFC 3339 or unix s); overrides --since."),
    end: Optional[str] = typer.Option(None, help="End time (RFC 3339 or unix s); default now."),
    step: str = typer.Option("30s", help="Sample resolution (the scrape interval)."),
    metric: list[str] = typer.Option([], "--metric", help="GPU metric to read (repeatable); "
                                     "named metrics must exist. Default: a standard DCGM set."),
    label: list[str] = typer.Option([], "--label", help="Label name override FIELD=LABEL, e.g. node=instance."),
    token_file: Optional[Path] = typer.Option(None, help="Bearer token file (or env FORESIGHT_PROM_TOKEN)."),
    username: Optional[str] = typer.Option(None, help="Basic-auth user (password from env FORESIGHT_PROM_PASSWORD)."),
    ca_file: Optional[Path] = typer.Option(None, help="CA bundle to verify the server's TLS certificate."),
    insecure: bool = typer.Option(False, help="Skip TLS verification."),
    timeout: float = typer.Option(60.0, help="Per-request timeout in seconds."),
    retries: int = typer.Option(3, help="Retries on 5xx, 429 and timeouts, with exponential backoff."),
) -> None:
    """Read GPU, pod and queue history from Prometheus into Parquet tables."""
    end_t = parse_time(end) if end else now_utc()
    start_t = parse_time(start) if start else end_t - parse_duration(since)
    step_s = parse_duration(step).total_seconds()
    source = PrometheusSource(prometheus_url, token=_read_secret(token_file, "FORESIGHT_PROM_TOKEN"),
                              username=username, password=os.environ.get("FORESIGHT_PROM_PASSWORD"),
                              ca_file=str(ca_file) if ca_file else None, insecure=insecure,
                              timeout_s=timeout, retries=retries)
    labels = _labels(label)
    steps = (len(metric) or 8) + 2
    with Progress(TextColumn("[bold]{task.description:<40}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("connecting", total=steps)

        def tick(what: str) -> None:
            bar.update(task, description=f"reading {what}", advance=0 if what == "connecting" else 1)

        result = ingest(source, start_t, end_t, step_s=step_s, metrics=tuple(metric) or None,
                        labels=labels, progress=tick)
        bar.update(task, completed=steps, description="done")
    paths = write_tables(out, {"samples": result.samples, "pods": result.pods, "queues": result.queues})
    table = Table(title=f"Ingested {start_t:%Y-%m-%d %H:%M} → {end_t:%Y-%m-%d %H:%M} UTC at {step}")
    for col in ("table", "rows", "file"):
        table.add_column(col)
    for name, df in (("GPU samples", result.samples), ("pods", result.pods), ("queue samples", result.queues)):
        key = {"GPU samples": "samples", "pods": "pods", "queue samples": "queues"}[name]
        table.add_row(name, f"{len(df):,}", str(paths[key]))
    console.print(table)
    if result.missing:
        console.print(f"[yellow]absent metrics (skipped):[/] {', '.join(result.missing)}")


def backfill_cmd(
    openmetrics: Path = typer.Option(..., "--openmetrics", help="OpenMetrics file (e.g. from `foresight simulate --openmetrics`)."),
    tsdb: Path = typer.Option(..., "--tsdb", help="Directory for the TSDB blocks (a Prometheus --storage.tsdb.path)."),
) -> None:
    """Turn an OpenMetrics file into Prometheus TSDB blocks with promtool (all or nothing)."""
    blocks = backfill(openmetrics, tsdb)
    console.print(f"backfilled {openmetrics} into {tsdb}: {blocks} new TSDB block(s)")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.command("backfill")(backfill_cmd)
