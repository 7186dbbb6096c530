"""`foresight ingest` (Prometheus -> Parquet) and `foresight backfill` (OpenMetrics -> TSDB)."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from features.catalog import LabelConfig
from foresight.commands import check_output
from features.ingest import now_utc, parse_duration, parse_time
from features.ingest_store import SAMPLES_DIR, check_range, ingest_to_dir
from features.openmetrics import backfill
from features.prometheus import PrometheusSource
from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=160)


def parse_labels(overrides: list[str]) -> LabelConfig:
    """--label FIELD=LABEL overrides of the default label names (comma lists for tuple fields)."""
    cfg = LabelConfig()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not value or key not in LabelConfig.__dataclass_fields__ or key == "priorities":
            fields = ", ".join(f for f in LabelConfig.__dataclass_fields__ if f != "priorities")
            raise ForesightError(f"invalid --label {item!r}: expected FIELD=LABEL with FIELD one of {fields}")
        listed = isinstance(getattr(cfg, key), tuple)  # workload, queue_fallback: comma lists
        cfg = replace(cfg, **{key: tuple(value.split(",")) if listed else value})
    return cfg


# The metric source's auth options, shared by every command that reads Prometheus (ingest,
# train, whatif): one definition, one help text.
TOKEN_FILE = typer.Option(None, "--token-file",
                          help="Bearer token file (or env FORESIGHT_PROM_TOKEN).")
USERNAME = typer.Option(None, "--username",
                        help="Basic-auth user (password from env FORESIGHT_PROM_PASSWORD).")
CA_FILE = typer.Option(None, "--ca-file", help="CA bundle to verify the server's TLS "
                       "certificate.")
INSECURE = typer.Option(False, "--insecure", help="Skip TLS verification.")
TENANT = typer.Option(None, "--tenant", envvar="FORESIGHT_PROM_TENANT",
                      help="Tenant (X-Scope-OrgID) of a multi-tenant Mimir or Cortex.")


def source_auth(token: Optional[str], token_file: Optional[Path], username: Optional[str],
                ca_file: Optional[Path], insecure: bool, tenant: Optional[str] = None) -> dict:
    """PrometheusSource's auth and TLS arguments from the options above: a bearer token
    (given, from a file, or env FORESIGHT_PROM_TOKEN), basic auth (password from env
    FORESIGHT_PROM_PASSWORD), a CA bundle or no verification, a Mimir tenant."""
    if token and token_file:
        raise ForesightError("give the bearer token once: --token or --token-file")
    return {"token": token or _read_secret(token_file, "FORESIGHT_PROM_TOKEN"),
            "username": username, "password": os.environ.get("FORESIGHT_PROM_PASSWORD"),
            "ca_file": str(ca_file) if ca_file else None, "insecure": insecure,
            "tenant": tenant or None}


def _read_secret(path: Optional[Path], env: str) -> Optional[str]:
    if path is not None:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ForesightError(f"cannot read {path}: {exc.strerror}") from None
    return os.environ.get(env) or None


def ingest_cmd(
    prometheus_url: str = typer.Option(..., "--prometheus-url", help="Prometheus, Thanos or Mimir query URL."),
    out: Path = typer.Option(..., "--out", help="Directory for the Parquet tables (samples by "
                             "day and metric; an interrupted pull resumes in the same directory)."),
    since: str = typer.Option("7d", help="History length before --end, e.g. 6h, 7d."),
    start: Optional[str] = typer.Option(None, help="Start time (RFC 3339 or unix s); overrides --since."),
    end: Optional[str] = typer.Option(None, help="End time (RFC 3339 or unix s); default now."),
    step: str = typer.Option("30s", help="Sample resolution (the scrape interval)."),
    metric: list[str] = typer.Option([], "--metric", help="GPU metric to read (repeatable); "
                                     "named metrics must exist. Default: a standard DCGM set."),
    label: list[str] = typer.Option([], "--label", help="Label name override FIELD=LABEL, e.g. node=instance."),
    token_file: Optional[Path] = TOKEN_FILE,
    username: Optional[str] = USERNAME,
    ca_file: Optional[Path] = CA_FILE,
    insecure: bool = INSECURE,
    tenant: Optional[str] = TENANT,
    timeout: float = typer.Option(60.0, help="Per-request timeout in seconds."),
    retries: int = typer.Option(3, min=0, help="Retries on 5xx, 429 and timeouts, with exponential backoff."),
) -> None:
    """Read GPU, pod and queue history from Prometheus into Parquet tables."""
    if not timeout > 0:  # typer's min= cannot say "strictly above"; this also refuses NaN
        raise ForesightError(f"--timeout {timeout}: must be > 0 seconds")
    end_t = parse_time(end) if end else now_utc()
    try:
        start_t = parse_time(start) if start else end_t - parse_duration(since)
    except OverflowError:  # before year 1
        raise ForesightError(f"--since {since}: reaches before year 1") from None
    step_s = parse_duration(step).total_seconds()
    # before connecting (and before the progress line): the range, and --out
    check_range(start_t, end_t, step_s)
    check_output(out, "--out", directory=True)
    source = PrometheusSource(prometheus_url, **source_auth(None, token_file, username, ca_file,
                                                            insecure, tenant),
                              timeout_s=timeout, retries=retries)
    labels = parse_labels(label)
    with Progress(TextColumn("[bold]{task.description:<44}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} partitions"),
                  TextColumn("{task.fields[rows]:>12,} samples"), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        task = bar.add_task("connecting", total=None, rows=0)

        def tick(done: int, total: int, rows: int, what: str) -> None:
            bar.update(task, completed=done, total=total, rows=rows, description=what)

        res = ingest_to_dir(source, start_t, end_t, out, step_s=step_s,
                            metrics=tuple(metric) or None, labels=labels, progress=tick)
        bar.update(task, description="done")
    table = Table(title=f"Ingested {res['start']:%Y-%m-%d %H:%M} → {res['end']:%Y-%m-%d %H:%M} "
                        f"UTC at {step}")
    for col in ("table", "rows", "where"):
        table.add_column(col)
    table.add_row("GPU samples", f"{res['samples']:,}", str(out / SAMPLES_DIR))
    table.add_row("pods", f"{res['pods']:,}", str(out / "pods.parquet"))
    table.add_row("queue samples", f"{res['queues']:,}", str(out / "queues.parquet"))
    console.print(table)
    console.print(f"{res['partitions']} day x metric partitions: {res['read']} read, "
                  f"{res['skipped']} already there" +
                  ("; resumed the interrupted pull" if res["resumed"] else ""))
    if res["missing"]:
        console.print(f"[yellow]absent metrics (skipped):[/] {', '.join(res['missing'])}")


def backfill_cmd(
    openmetrics: Path = typer.Option(..., "--openmetrics", help="OpenMetrics file (e.g. from `foresight simulate --openmetrics`)."),
    tsdb: Path = typer.Option(..., "--tsdb", help="Directory for the TSDB blocks (a Prometheus --storage.tsdb.path)."),
) -> None:
    """Turn an OpenMetrics file into Prometheus TSDB blocks with promtool (all or nothing)."""
    # here, or the failure names promtool's staging directory beside it, not --tsdb
    check_output(tsdb, "--tsdb", directory=True, inputs={"--openmetrics": openmetrics})
    blocks = backfill(openmetrics, tsdb)
    console.print(f"backfilled {openmetrics} into {tsdb}: {blocks} new TSDB block(s)")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.command("backfill")(backfill_cmd)
