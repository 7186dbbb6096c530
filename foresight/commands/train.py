"""`foresight train`: the scheduled retraining job (fetch, fit, backtest, gate, publish, report)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

import sys

from forecaster.interference.admission import ADMIT_RISK
from foresight.commands import check_output
from foresight.commands.ingest import CA_FILE, INSECURE, TENANT, TOKEN_FILE, USERNAME
from ground.errors import ForesightError

# a CronJob's log is not a terminal: give the summary table room instead of 80 columns
console = Console() if sys.stdout.isatty() else Console(width=160)


def _fetch(prometheus_url, since, end, step, data, synthetic, seed, days, nodes, min_coverage,
           auth, scratch, progress=None, labels=None):
    """The history, from exactly one source. Every source but --synthetic stays on disk as
    partitions (an ingest or `simulate` directory as it is; a flat table split on read; a
    Prometheus pull into --scratch, resumable) and is read node group by node group."""
    from training import sources

    chosen = [x for x in (prometheus_url, data, synthetic or None) if x]
    if len(chosen) != 1:
        raise ForesightError("choose exactly one source: --prometheus-url URL, --data DIR or --synthetic")
    if synthetic:
        return sources.synthetic(seed=seed, days=days, nodes=nodes)
    if data:
        from features.ingest_store import partition_files

        return sources.from_partitions(data) if partition_files(data) else \
            sources.from_tables(data, scratch)
    from features.ingest import now_utc, parse_time

    end_t = parse_time(end) if end else now_utc()
    return sources.from_prometheus(prometheus_url, end_t - _duration(since, "--since"), end_t,
                                   step_s=step, min_coverage=min_coverage, scratch=scratch,
                                   progress=progress, labels=labels, **auth)


def _step_seconds(text: str) -> float:
    """--step as `ingest` reads it (30s, 1m), or a plain number of seconds as before."""
    try:
        step = float(text)
    except ValueError:
        step = _duration(text, "--step").total_seconds()
    if not 0 < step < float("inf"):  # and NaN
        raise ForesightError(f"--step {text}: must be a duration > 0 (30s, 1m) or seconds")
    return step


def _duration(text: str, option: str):
    """A duration option (1d, 12h) as a Timedelta > 0, or a one-line error naming it."""
    import pandas as pd

    from features.ingest import parse_duration

    try:
        d = pd.Timedelta(parse_duration(text))
    except ForesightError as exc:  # parse_duration's own line, with the option it came from
        raise ForesightError(f"{option}: {exc}") from None
    except (OverflowError, ValueError):  # 1e12d: past what a timedelta holds
        raise ForesightError(f"{option} {text}: too long a duration") from None
    if d <= pd.Timedelta(0):  # nothing held out: nothing to backtest or gate on
        raise ForesightError(f"{option} {text}: must be > 0")
    return d


def summary_table(result, report: Path, elapsed: float, title: str | None = None) -> Table:
    """The one-screen summary of a training run (also shown by `foresight demo`)."""
    t = Table(title=f"foresight train: {title or result.source} ({elapsed:.0f} s)", show_lines=False)
    for col in ("kind", "status", "version", "in service before", "backtest (new)",
                "in service (same window)", "best baseline (same window)", "served", "reason"):
        t.add_column(col, overflow="fold")
    from training.pipeline import best_baseline

    colour = {"published": "green", "kept": "yellow", "withheld": "red", "skipped": "dim",
              "failed": "red"}
    for k in result.kinds:
        m, s = k.metrics, k.service_metrics
        p = m.get("primary", "mae")
        base = best_baseline(m)
        served = ", ".join(f"{n} {c}" for n, c in (m.get("served") or {}).items()) or "-"
        t.add_row(k.kind, f"[{colour[k.status]}]{k.status}", k.version or "-",
                  k.in_service or "-", f"{p} {m[p]:.4g}" if p in m else "-",
                  f"{s[p]:.4g}" if p in s else "-",
                  f"{base[0]} {base[1]:.4g}" if base is not None else "-", served, k.reason)
    h = result.hygiene
    t.caption = (f"hygiene: {h['nan_values']} NaN, {h['duplicate_rows']} duplicates, "
                 f"{h['counter_resets']} counter resets, {h['missing_series']} missing series, "
                 f"{len(h['missing_metrics'])} missing metrics, {h['gaps']} gaps | peak RSS "
                 f"{result.peak_mb:.0f} MB | report {report}")
    return t


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train(
        registry: str = typer.Option(..., "--registry", help="Registry root: directory or fsspec URL."),
        prometheus_url: Optional[str] = typer.Option(None, "--prometheus-url",
                                                     help="Prometheus/Thanos/Mimir/VictoriaMetrics query API."),
        since: str = typer.Option("30d", "--since", help="History length to fetch, e.g. 30d."),
        end: Optional[str] = typer.Option(None, "--end", help="End of the history fetched "
                                          "(RFC 3339 or unix s; default now)."),
        scratch: Optional[str] = typer.Option(None, "--scratch", envvar="FORESIGHT_SCRATCH",
                                              help="Disk for the pulled or split partitions and "
                                              "the node groups (default: the temp directory); a "
                                              "killed pull resumes there."),
        step: str = typer.Option("30s", "--step", help="Query step (the scrape interval), "
                                 "e.g. 30s, 1m; a plain number is seconds."),
        token: Optional[str] = typer.Option(None, "--token", help="Bearer token for the "
                                            "metric source (or --token-file, or env "
                                            "FORESIGHT_PROM_TOKEN)."),
        token_file: Optional[Path] = TOKEN_FILE,
        username: Optional[str] = USERNAME,
        ca_file: Optional[Path] = CA_FILE,
        insecure: bool = INSECURE,
        tenant: Optional[str] = TENANT,
        label: list[str] = typer.Option([], "--label", help="Label name override "
                                        "FIELD=LABEL, as `foresight ingest --label`."),
        min_coverage: float = typer.Option(0.9, "--min-coverage",
                                           help="Refuse history covering less of the window."),
        data: Optional[str] = typer.Option(None, "--data", help="Directory of Parquet tables."),
        synthetic: bool = typer.Option(False, "--synthetic", help="Train on a generated cluster."),
        seed: int = typer.Option(0, "--seed", min=0, help="Synthetic history seed (and model seed)."),
        days: float = typer.Option(4.0, "--days", help="Synthetic history length in days."),
        nodes: int = typer.Option(4, "--nodes", help="Synthetic cluster nodes (4 GPUs each)."),
        holdout: str = typer.Option("1d", "--holdout", help="Most recent window kept for the backtest."),
        tolerance: float = typer.Option(0.0, "--tolerance",
                                        help="Publish when not worse than in service by more than this (relative)."),
        kinds: Optional[str] = typer.Option(None, "--kinds", help="Comma-separated kinds (default: all wired)."),
        n_estimators: int = typer.Option(200, "--n-estimators", help="Boosting rounds per LightGBM model."),
        threads: int = typer.Option(1, "--threads", min=1, help="LightGBM threads (1 on a shared machine; more on a dedicated node)."),
        interference_alpha: float = typer.Option(0.1, "--interference-alpha",
                                                 help="Level of the published pessimistic interference bound (0.1: the p10)."),
        interference_admit_risk: float = typer.Option(ADMIT_RISK, "--interference-admit-risk",
                                                      help="Share of unsafe placements the co-location gate may admit (sets the bound min-speed is held to)."),
        out: str = typer.Option("foresight-train-report", "--out", help="Where report.html and metrics.json go."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Backtest and compare, publish nothing."),
        beat_baseline: bool = typer.Option(True, "--beat-baseline/--no-beat-baseline",
                                           help="Refuse a model that does not beat its best same-window baseline (default on)."),
        group_gpus: int = typer.Option(16, "--group-gpus", min=1,
                                       help="Partitioned --data: GPUs per node group read at once (sets peak memory)."),
        dask_scheduler: Optional[str] = typer.Option(None, "--dask-scheduler",
                                                     help="tcp://HOST:PORT: train LightGBM through lightgbm.dask."),
    ) -> None:
        """Fetch history, fit every model kind, backtest against the models in service, publish
        only those not worse, and write report.html + metrics.json."""
        from training.kinds import KINDS
        from training.pipeline import TrainConfig, run
        from training.report import write_report

        import pandas as pd

        t0 = time.perf_counter()
        if not 0.0 < interference_alpha <= 0.5:
            raise ForesightError(f"--interference-alpha must be in (0, 0.5], not {interference_alpha}")
        if not 0.0 < interference_admit_risk < 0.5:
            raise ForesightError("--interference-admit-risk must be in (0, 0.5), not "
                                 f"{interference_admit_risk}")
        from foresight.commands.ingest import parse_labels, source_auth

        step = _step_seconds(step)
        auth = source_auth(token, token_file, username, ca_file, insecure, tenant)
        labels = parse_labels(label)
        if n_estimators < 1:
            raise ForesightError(f"--n-estimators {n_estimators}: must be at least 1")
        if not -1 < tolerance < float("inf"):  # and NaN
            raise ForesightError(f"--tolerance {tolerance}: must be a finite share above -1")
        if not 0 <= min_coverage <= 1:
            raise ForesightError(f"--min-coverage {min_coverage}: must be in [0, 1]")
        picked = tuple(k.strip() for k in kinds.split(",") if k.strip()) if kinds else KINDS
        unknown = [k for k in picked if k not in KINDS]
        if not picked or unknown:  # before the history is read, not after
            raise ForesightError(f"--kinds {kinds!r}: choose from {', '.join(KINDS)}")
        held = _duration(holdout, "--holdout")
        if synthetic:
            from training.sources import synthetic_config

            synthetic_config(seed=seed, days=days, nodes=nodes)  # ranges and size, as simulate
        check_output(out, "--out", directory=True)
        for name in ("metrics.json", "report.html"):  # written after the models are published
            check_output(Path(out) / name, "--out")
        check_output(scratch, "--scratch", directory=True)
        if "://" not in registry:
            check_output(registry, "--registry", directory=True)
        # the history must outlast the backtest window: said now, not after the pull
        if prometheus_url and not data and not synthetic and _duration(since, "--since") <= held:
            raise ForesightError(f"--since {since} must be longer than --holdout {holdout}")
        if synthetic and pd.Timedelta(days=days) <= held:
            raise ForesightError(f"--days {days:g} must be longer than --holdout {holdout}")
        from artifacts.registry import Registry
        from training.pipeline import check_registry

        # before a history is pulled (hours) and long before anything is published
        check_registry(Registry(registry), picked)
        if scratch:
            Path(scratch).mkdir(parents=True, exist_ok=True)
        cfg = TrainConfig(holdout=held, tolerance=tolerance,
                          kinds=picked,
                          n_estimators=n_estimators, threads=threads, seed=seed, dry_run=dry_run,
                          beat_baseline=beat_baseline, group_gpus=group_gpus,
                          scratch=scratch, interference_alpha=interference_alpha,
                          interference_admit_risk=interference_admit_risk)
        if dask_scheduler:
            from training.dask_fit import connect

            cfg.dask_client = connect(dask_scheduler)
        steps = ("features", "fit", "backtest", "compare", "publish")
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task("fetch history", total=2 + len(cfg.kinds) * len(steps))

            def pulled(done: int, total: int, rows: int, what: str) -> None:
                bar.update(task, description=f"pull {done}/{total} partitions ({rows:,} "
                           f"samples): {what}")

            history = _fetch(prometheus_url, since, end, step, data, synthetic, seed, days,
                             nodes, min_coverage, auth, scratch, pulled, labels)
            n = history.store.rows() if history.samples is None else len(history.samples)
            bar.update(task, advance=1, description=f"fetched {n:,} samples")

            def on_step(kind: str, name: str) -> None:
                bar.update(task, description=f"{kind}: {name}")
                if kind != "data":
                    bar.advance(task)

            passes: dict[str, object] = {}

            def on_progress(stage: str, done: int, total: int, rows: int) -> None:
                # one bar per pass of the partitioned history (split, node groups): count and ETA
                if stage not in passes:
                    passes[stage] = bar.add_task(stage, total=total)
                label = f"{stage} ({rows:,} samples)" if rows else stage
                bar.update(passes[stage], completed=done, total=total, description=label)

            try:
                result = run(history, registry, cfg, on_step, on_progress)
            finally:
                if cfg.dask_client is not None:
                    cfg.dask_client.close()
                if history.scratch is not None:  # a killed job never gets here: it resumes
                    import shutil

                    shutil.rmtree(history.scratch, ignore_errors=True)
            bar.update(task, description="report")
            _, report = write_report(result, registry, out)
            bar.update(task, completed=bar.tasks[0].total, description="done")
        console.print(summary_table(result, report, time.perf_counter() - t0))
        if any(k.status == "failed" for k in result.kinds):
            raise SystemExit(1)  # see registry verify: cli.main drops typer.Exit codes
