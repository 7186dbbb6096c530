"""`foresight whatif`: your own history replayed under every policy, before installing anything
(issue 29). Inputs: an ingest directory, a Prometheus URL (ingested first), or a jobs CSV and a
nodes CSV (columns: `features/history_csv.py`). Writes report.html and whatif.json into --out
and prints a summary that stays readable in 80 columns and in a pipe."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from foresight.commands import check_output
from foresight.commands.ingest import (CA_FILE, INSECURE, TENANT, TOKEN_FILE, USERNAME,
                                       source_auth)
from ground.errors import ForesightError

err = Console(stderr=True, highlight=False)


def _history(data, prometheus_url, jobs, nodes, out, since, end, auth=None):
    from features.ingest import parse_duration, parse_time

    given = [x is not None for x in (data, prometheus_url, jobs)]
    if sum(given) != 1:
        raise ForesightError("give one input: --data DIR, --prometheus-url URL, or --jobs CSV "
                             "with --nodes CSV")
    end_s = None
    if end:
        end_s = parse_time(end).timestamp()
    if jobs is not None:
        if nodes is None:
            raise ForesightError("--jobs needs --nodes (a CSV with columns node, gpus)")
        from features.history_csv import read_csv_history

        return read_csv_history(jobs, nodes, end_s)
    if prometheus_url is not None:
        from features.history_ingest import ingest_history
        from features.prometheus import check_url

        data = out / "ingest"
        if (data / "ingest.json").is_file() and '"complete": true' in \
                (data / "ingest.json").read_text():
            raise ForesightError(f"{data} already holds an ingest: replay it with --data "
                                 f"{data}, or give another --out")
        span = parse_duration(since)  # checked before the line saying the ingest starts
        check_url(prometheus_url)
        err.print(f"ingesting {since} of history from {prometheus_url} into {data}")
        ingest_history(prometheus_url, data, span, parse_time(end) if end else None,
                       **(auth or {}))
    elif not Path(data).is_dir():
        raise ForesightError(f"--data {data}: not a directory (give what `foresight ingest "
                             "--out` wrote)")
    from features.history_ingest import read_ingest_history

    return read_ingest_history(data, end_s)


def whatif_cmd(
    data: Optional[Path] = typer.Option(None, "--data", help="Ingest directory "
                                        "(pods.parquet; nodes.parquet or GPU samples)."),
    prometheus_url: Optional[str] = typer.Option(None, "--prometheus-url", help="Ingest "
                                                 "from this Prometheus first, then replay."),
    since: str = typer.Option("7d", "--since", help="With --prometheus-url: history length."),
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="Jobs CSV (arrival, gpus, pods, "
                                        "runtime or finish, queue, priority, gpu_fraction, "
                                        "gpu_memory, mig_profile, gang)."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", help="Nodes CSV (node, gpus, "
                                         "model, gpu_memory)."),
    out: Path = typer.Option(Path("whatif-out"), "--out", help="Where report.html and "
                             "whatif.json go."),
    warmup: str = typer.Option("1d", "--warmup", help="History before the replayed window: "
                               "the forecasters' first training data."),
    end: Optional[str] = typer.Option(None, "--end", help="End of the history (RFC 3339 or "
                                      "unix s); default its last event."),
    policies: str = typer.Option("default", "--policies", help="Comma-separated, or "
                                 "'default' (kube-default, bestfit, fgd, foresight, "
                                 "foresight-reserve, foresight-backfill)."),
    right_size: int = typer.Option(3, "--right-size", help="Replays on fewer nodes to find "
                                   "the GPUs the pick could spare (0: skip)."),
    no_report: bool = typer.Option(False, "--no-report", help="Skip report.html (JSON and "
                                   "summary only)."),
    workers: int = typer.Option(2, "--workers", help="Replays run at once, one process each "
                                "(the results do not depend on it)."),
    token_file: Optional[Path] = TOKEN_FILE,
    username: Optional[str] = USERNAME,
    ca_file: Optional[Path] = CA_FILE,
    insecure: bool = INSECURE,
    tenant: Optional[str] = TENANT,
) -> None:
    """Replay your cluster's history under kube-scheduler's default scoring, bestfit, FGD,
    Foresight and its forecast reservation: who would have waited how long, and which to pick."""
    from features.ingest import parse_duration
    from simulator.timeline.policies import POLICIES as KNOWN
    from simulator.whatif.run import POLICIES, WhatIfConfig, whatif
    from simulator.whatif.summary import summary_lines

    pols = POLICIES if policies == "default" else tuple(
        p.strip() for p in policies.split(",") if p.strip())
    offered = [p for p in KNOWN if p != "backfill-flat"]  # needs a forecast run's mean
    bad = [p for p in pols if p not in offered]
    if not pols or bad:
        raise ForesightError(f"unknown --policies {','.join(bad) or policies!r}; choose from "
                             f"{', '.join(offered)} or default")
    if not 0 <= right_size <= 8:
        raise ForesightError("--right-size must be between 0 and 8 replays")
    warm = parse_duration(warmup).total_seconds()
    check_output(out, "--out", directory=True)
    auth = source_auth(None, token_file, username, ca_file, insecure, tenant)
    history = _history(data, prometheus_url, jobs, nodes, out, since, end, auth)
    if not 1 <= workers <= 64:
        raise ForesightError("--workers must be between 1 and 64")
    cfg = WhatIfConfig(policies=pols, right_size_steps=right_size, workers=workers)
    with Progress(TextColumn("{task.description:<36}"), BarColumn(bar_width=20),
                  TextColumn("{task.completed}/{task.total} replays"), TimeElapsedColumn(),
                  console=err, transient=False) as bar:
        task = bar.add_task("reading", total=None)

        def tick(what: str, done: int, total: int) -> None:
            bar.update(task, description=what[:36], completed=done, total=total)

        doc, inp, raw = whatif(history, warm, cfg, tick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").unlink(missing_ok=True)  # an earlier run's: it would read as this one
    if not no_report:
        from simulator.whatif.report import write_report

        doc["report"] = str(write_report(doc, inp, raw, out))
    path = out / "whatif.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float))
    tmp.replace(path)
    sys.stdout.write("\n".join(summary_lines(doc)) + "\n")


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif_cmd)
