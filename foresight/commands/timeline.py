"""`foresight timeline`: replay over time with departures, queues and gangs (issue 16)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output, distinct_outputs
from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=160)
DEFAULT_NODES = Path("openb-2023") / "csv" / "openb_node_list_gpu_node.csv"


def timeline_cmd(
    nodes: Optional[Path] = typer.Option(None, "--nodes", help="openb node CSV (default "
                                         "../shared/traces/openb-2023/csv/openb_node_list_gpu_"
                                         "node.csv)."),
    profiles: str = typer.Option("helios", "--profile", help="Arrival profile(s), comma-"
                                 "separated: helios (per-VC Helios Earth), dlrm (Alibaba DLRM)."),
    seeds: str = typer.Option("0", "--seeds", help="e.g. 0-4 or 100,101."),
    days: float = typer.Option(14.0, "--days", help="Measured days (after 1 day of warm-up)."),
    policies: str = typer.Option("all", "--policies", help="Comma-separated: bestfit, fgd, "
                                 "foresight, foresight-reserve, foresight-flat, "
                                 "foresight-backfill, backfill-flat, oracle, foresight-drain, "
                                 "drain-pending, drain-flat, drain-oracle, drain-oracle-pred, "
                                 "kube-default; or 'all' (every one: about 10 min per seed "
                                 "and 2 days on 2 cores)."),
    load: float = typer.Option(0.9, "--load", help="Offered GPU-seconds per GPU-second."),
    no_gang: bool = typer.Option(False, "--no-gang", help="Place gang pods one by one (no "
                                 "all-or-nothing): shows gang deadlocks."),
    reserve_for: str = typer.Option("big", "--reserve-for", help="Jobs the reservation is "
                                    "for: big (8-GPU and gang) or gang."),
    horizon: int = typer.Option(3, "--horizon", help="Forecast horizon in 10-minute bins."),
    quantile: str = typer.Option("p90", "--quantile", help="Forecast quantile reserved: p10, "
                                 "p50 or p90."),
    runtime_quantile: str = typer.Option("p50", "--runtime-quantile", help="Backfill: the "
                                         "predicted run-time quantile a pod is taken to run "
                                         "(p50: chosen on dev seeds)."),
    max_hold: Optional[float] = typer.Option(None, "--max-hold", help="Backfill/drain: "
                                             "seconds a small pod is held off reserved or "
                                             "drained nodes at most (default: the "
                                             "component's; 0: no bound)."),
    big_order: float = typer.Option(0.0, "--big-order", help="Backfill/drain: big jobs queue "
                                    "by arrival + this x their predicted run time (shortest "
                                    "predicted first, aged; 0: FIFO)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the summaries as JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG of allocation and queue "
                                        "length over time (first profile and seed)."),
) -> None:
    """Replay jobs over time (arrivals, departures, priority FIFO with backfill, gangs) on the
    openb cluster and compare policies on queueing delay and allocation."""
    from simulator.replay.compare import parse_seeds, shared_traces_dir
    from simulator.replay.data import load_nodes
    from simulator.timeline.policies import POLICIES
    from simulator.timeline.workload import PROFILES

    profs = [p.strip() for p in profiles.split(",") if p.strip()]
    bad = [p for p in profs if p not in PROFILES]
    if not profs or bad:
        raise ForesightError(f"unknown --profile {','.join(bad) or profiles!r}; choose from "
                             f"{', '.join(PROFILES)}")
    pols = list(POLICIES) if policies == "all" else [p.strip() for p in policies.split(",")]
    bad = [p for p in pols if p not in POLICIES]
    if not pols or bad:
        raise ForesightError(f"unknown --policies {','.join(bad)!r}; choose from "
                             f"{', '.join(POLICIES)} or all")
    if not 0 < days <= 60:
        raise ForesightError("--days must be in (0, 60]")
    if not 0 < load <= 2:
        raise ForesightError("--load must be in (0, 2]")
    if reserve_for not in ("big", "gang"):
        raise ForesightError("--reserve-for must be big or gang")
    if quantile not in ("p10", "p50", "p90"):
        raise ForesightError("--quantile must be p10, p50 or p90")
    if runtime_quantile not in ("p10", "p50", "p90"):
        raise ForesightError("--runtime-quantile must be p10, p50 or p90")
    if max_hold is not None and not 0 <= max_hold < float("inf"):
        raise ForesightError("--max-hold must be a number of seconds >= 0")
    if not 0 <= big_order < float("inf"):
        raise ForesightError("--big-order must be a number >= 0")
    if not 1 <= horizon <= 36:
        raise ForesightError("--horizon must be between 1 and 36 bins")
    seed_list = parse_seeds(seeds)
    check_output(out, "--out", inputs={"--nodes": nodes})
    check_output(plot, "--plot", inputs={"--nodes": nodes}, image=True)
    distinct_outputs({"--out": out, "--plot": plot})
    path = nodes or shared_traces_dir() / DEFAULT_NODES
    if path.is_dir():  # the check below alone read as "not found"
        raise ForesightError(f"--nodes {path} is a directory: give the openb node CSV")
    if not path.is_file():
        raise ForesightError(f"nodes file not found: {path} (give --nodes)")
    cluster = load_nodes(path)
    from simulator.timeline.plot import plot_timeline
    from simulator.timeline.run import CaseConfig, run_case

    rows: list[dict] = []
    for prof in profs:
        for seed in seed_list:
            cfg = CaseConfig(profile=prof, seed=seed, days=days, load=load, gang=not no_gang,
                             reserve_for=reserve_for, horizon=horizon, quantile=quantile,
                             runtime_quantile=runtime_quantile, policies=tuple(pols),
                             max_hold_s=max_hold, big_order=big_order)
            got, raw = run_case(cluster, cfg, keep=plot is not None and not rows)
            rows += got
            if raw:
                plot_timeline({k: v.samples for k, v in raw.items()}, plot,
                              f"{prof} seed {seed}")
    _table(rows)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(rows, indent=1))
        tmp.replace(out)


def _table(rows: list[dict]) -> None:
    t = Table(title="queueing delay p50 / p95 (min) per size class; unstarted: small jobs "
                    "(< 8 GPUs) not started by the end")
    for col in ("profile", "seed", "policy", "frac", "1", "2-4", "8", "gang", "8+gang",
                "unstarted", "alloc %", "frag-blocked jobs", "deadlocks", "cpu s"):
        t.add_column(col, no_wrap=col == "policy")

    def cell(d: dict) -> str:  # a class with no job in the window: -
        return "-" if d.get("p95_min") is None else f"{d['p50_min']} / {d['p95_min']}"

    for r in rows:
        small = sum(r[c].get("unstarted", 0) for c in ("frac", "1", "2-4"))
        t.add_row(r["profile"], str(r["seed"]), r["policy"],
                  *[cell(r[c]) for c in ("frac", "1", "2-4", "8", "gang", "8+gang")],
                  str(small), f"{r['alloc_mean']:.2f}", str(r["frag_blocked_jobs"]),
                  str(r["gang_deadlocks"]), str(r["cpu_seconds"]))
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("timeline")(timeline_cmd)
