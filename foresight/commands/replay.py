"""`foresight replay`: the openb scheduling replay (FGD ATC'23 protocol), one run or --compare."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output
from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=160)
err = Console(stderr=True, highlight=False)


def replay_cmd(
    pods: Optional[Path] = typer.Option(None, "--pods", help="openb pod CSV."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", help="openb node CSV (GPU nodes "
                                         "are the cluster)."),
    policy: str = typer.Option("foresight", "--policy", help="random, dotprod, gpuclustering, "
                               "gpupacking, bestfit, fgd, foresight or memaware (issue 19)."),
    tune: float = typer.Option(1.3, "--tune", help="Total GPU request / cluster capacity."),
    seed: int = typer.Option(42, "--seed", min=0, help="Shuffle/sampling/tie-break seed."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write R.json here."),
    compare: bool = typer.Option(False, "--compare", help="Run every policy over --seeds "
                                 "and --traces and print them beside the published numbers."),
    traces: str = typer.Option("default", "--traces", help="With --compare: comma-separated "
                               "trace names (default, gpushare40, ..., multigpu50, or a generated "
                               "GPU-type-constrained variant such as default-spec25) or 'all'."),
    policies: str = typer.Option("all", "--policies", help="With --compare: policies or 'all'."),
    seeds: str = typer.Option("42-51", "--seeds", help="With --compare: e.g. 42-51."),
    csv_dir: Optional[Path] = typer.Option(None, "--csv-dir", help="With --compare: the openb "
                                           "csv folder (default ../shared/traces/openb-2023/csv)."),
    results_dir: Optional[Path] = typer.Option(None, "--published", help="With --compare: the "
                                               "fgd-atc23-results folder."),
    workers: int = typer.Option(1, "--workers", min=1, max=2,
                                help="With --compare: processes (max 2)."),
    colocation: Optional[Path] = typer.Option(None, "--colocation", help="Beyond-packing mode: "
                                              "the Gavel pair CSV; counts slow co-locations "
                                              "and memory overflows."),
    power: Optional[Path] = typer.Option(None, "--power", help="Power mode: a Zeus "
                                         "summary_power_<gpu>.csv; racks of 10 nodes under a cap."),
    cap_frac: float = typer.Option(0.6, "--cap-frac", help="Power mode: rack cap as a share of "
                                   "its GPUs x the top power limit."),
) -> None:
    """Replay openb pods on the openb GPU nodes with one placement policy."""
    from simulator.replay import POLICIES

    check_output(out, "--out", inputs={"--pods": pods, "--nodes": nodes, "--colocation": colocation,
                                       "--power": power})
    if not 0 < tune <= 10:
        raise ForesightError("--tune must be in (0, 10]")
    if compare:
        _compare(traces, policies, seeds, csv_dir, results_dir, tune, workers, out)
        return
    if pods is None or nodes is None:
        raise ForesightError("give --pods and --nodes (or --compare)")
    from simulator.replay.memaware import OTHERS

    if policy not in POLICIES and policy not in OTHERS:
        raise ForesightError(f"unknown policy {policy!r}; choose from "
                             f"{', '.join([*POLICIES, *OTHERS])}")
    from simulator.replay import load_nodes, load_pods, replay
    from simulator.replay.data import unplaceable

    mode = None
    if colocation is not None:
        from simulator.replay.colocation import ColocationMode

        mode = ColocationMode(colocation)
    if power is not None:
        if mode is not None:
            raise ForesightError("choose one of --colocation and --power")
        if not 0 < cap_frac <= 2:
            raise ForesightError("--cap-frac must be in (0, 2]")
        from simulator.replay.power import PowerMode

        mode = PowerMode(power, cap_frac=cap_frac)
    cluster, trace = load_nodes(nodes), load_pods(pods)
    never = unplaceable(trace, cluster)
    if len(never):  # replay() leaves them out; say which, or the count alone hides a typo
        i = int(never[0])
        err.print(f"warning: --pods {pods}: {len(never)} pod(s) ask more GPUs than any node "
                  f"has ({int(cluster.gpus.max())}), e.g. data row {i + 1} (num_gpu "
                  f"{int(trace.num_gpu[i])}): never schedulable, left out of the workload",
                  soft_wrap=True)
    r = replay(cluster, trace, policy, seed, tune, mode=mode)
    doc = r.to_json()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1))
    console.print(f"{r.policy} seed {r.seed}: alloc at 100% arrived = {r.alloc_at_100:.2f}% "
                  f"({r.unscheduled} of {r.pods} pods unscheduled, {r.seconds:.1f} s)")
    if r.extra:
        console.print(", ".join(f"{k} {v}" for k, v in r.extra.items()))


def _compare(traces: str, policies: str, seeds: str, csv_dir: Optional[Path],
             results_dir: Optional[Path], tune: float, workers: int, out: Optional[Path]) -> None:
    from simulator.replay import POLICIES
    from simulator.replay.compare import (SHARED_TRACES, load_published, parse_seeds, run_grid,
                                          shared_traces_dir, summary)

    base = shared_traces_dir()
    csv_dir = csv_dir or base / "openb-2023" / "csv"
    if results_dir is not None and not results_dir.is_dir():
        raise ForesightError(f"--published {results_dir}: not a directory (give the "
                             "fgd-atc23-results folder)")
    results_dir = results_dir or base / "fgd-atc23-results"
    names = list(SHARED_TRACES) if traces == "all" else [t.strip() for t in traces.split(",")]
    pols = list(POLICIES) if policies == "all" else [p.strip() for p in policies.split(",")]
    for p in pols:
        if p not in POLICIES:
            raise ForesightError(f"unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    from simulator.replay.constrain import GENERATED

    for t in names:  # a shared list, or a generated GPU-type-constrained one (default-spec25)
        if not GENERATED.match(t) and not (csv_dir / f"openb_pod_list_{t}.csv").is_file():
            raise ForesightError(f"trace {t!r} not found in {csv_dir}")
    published = load_published(results_dir) if results_dir.is_dir() else None
    seed_list = parse_seeds(seeds)
    done = [0]
    total = len(names) * len(pols) * len(seed_list)

    def progress(r: dict) -> None:
        done[0] += 1
        console.print(f"[{done[0]}/{total}] {r['trace']} {r['policy']} seed {r['seed']}: "
                      f"{r['alloc_at_100']:.2f}% ({r['seconds']:.1f} s)", highlight=False)

    results = run_grid(names, pols, seed_list, csv_dir, tune, workers, progress)
    table = summary(results, published)
    view = Table(title=f"allocated GPU % at 100% arrived load, tune {tune}, seeds {seeds}")
    for col in table.columns:
        view.add_column(col, justify="left" if col in ("trace", "policy") else "right")
    for row in table.itertuples(index=False):
        view.add_row(*[f"{v:.2f}" if isinstance(v, float) else str(v) for v in row])
    console.print(view)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"runs": results, "summary": table.to_dict("records")},
                                  indent=1))


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_cmd)
