"""How far a policy's GPU-fraction packing is from an offline bin-packing bound (issue 13, dev
seeds only): where the capacity left free at 100 % arrived load goes.

    nice .venv/bin/python bench/replay_packing_bound.py [--traces default,default-spec20]
        [--seeds 0-2] [--policies fgd,foresight]

At 100 % arrived load no whole GPU is left free on these lists, so the free capacity is the
unused milli on GPUs that hold GPU fractions, and alloc = 100 % - that waste. The bound packs the
very fractions the policy placed, offline, by first-fit decreasing into empty GPUs (FFD; no CPU,
memory or GPU-model constraint): its waste is about what any placement of those fractions
leaves, and the gap is what a better fraction packing could still win.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402
from replay_constrained_diag import recording  # noqa: E402
from replay_issue13_dev import CSV  # noqa: E402

from simulator.replay.compare import parse_seeds  # noqa: E402
from simulator.replay.data import load_nodes, load_trace  # noqa: E402
from simulator.replay.engine import replay  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def ffd_contents(milli: list[int], size: int = 1000) -> list[tuple[int, ...]]:
    """What each GPU holds after first-fit decreasing."""
    loads: list[int] = []
    held: list[list[int]] = []
    for m in sorted(milli, reverse=True):
        for k, used in enumerate(loads):
            if used + m <= size:
                loads[k] += m
                held[k].append(m)
                break
        else:
            loads.append(m)
            held.append([m])
    return [tuple(h) for h in held]


def ffd_bins(milli: list[int], size: int = 1000) -> int:
    """GPUs first-fit decreasing needs for these fractions (offline)."""
    return len(ffd_contents(milli, size))


def contents(nodes, pods, policy: str, seed: int, model: str = "G2") -> list[tuple[int, ...]]:
    """What each GPU of `model` that holds fractions holds at 100 % arrived load."""
    pol = recording(policy)
    r = replay(nodes, pods, pol, seed, until=100, keep_placements=True)
    held: dict[tuple[int, int], list[int]] = {}
    for i, node, used in r.placements:
        p = pol.seen[i]
        if nodes.model[node] == model and p.num_gpu == 1 and p.milli < 1000:
            held.setdefault((node, used[0]), []).append(p.milli)
    return [tuple(sorted(h, reverse=True)) for h in held.values()]


def pairing_lines(nodes, pods, trace: str, policy: str, seed: int, top: int = 12) -> list[str]:
    """The most common GPU contents on G2: the policy's, and FFD's for the same fractions."""
    mine = collections.Counter(contents(nodes, pods, policy, seed))
    ffd = collections.Counter(ffd_contents([m for c, n in mine.items() for _ in range(n)
                                            for m in c]))
    lines = [f"### What G2 GPUs hold at 100 %: `{policy}` vs FFD of the same fractions "
             f"(`{trace}`, dev seed {seed})", "",
             "| GPUs (policy) | contents (milli) | free | GPUs (FFD) | contents (milli) | free |",
             "|---|---|---|---|---|---|"]
    for (c1, n1), (c2, n2) in zip(mine.most_common(top), ffd.most_common(top)):
        lines.append(f"| {n1} | {'+'.join(map(str, c1))} | {1000 - sum(c1)} | {n2} | "
                     f"{'+'.join(map(str, c2))} | {1000 - sum(c2)} |")
    return lines


def one(nodes, pods, policy: str, seed: int) -> tuple[dict, dict]:
    """(totals, gap to FFD per GPU model, packing each model's own fractions)."""
    pol = recording(policy)
    r = replay(nodes, pods, pol, seed, until=100, keep_placements=True)
    free = pol.cluster.gpu_free
    per: dict[str, list[int]] = {}
    for i, node, _ in r.placements:
        p = pol.seen[i]
        if p.num_gpu == 1 and p.milli < 1000:
            per.setdefault(str(nodes.model[node]), []).append(p.milli)
    placed = [m for v in per.values() for m in v]
    gap = {m: float(free[nodes.model == m].sum()) / 1000 - (ffd_bins(v) - sum(v) / 1000)
           for m, v in per.items()}
    return ({"alloc_at_100": r.alloc_at_100, "whole_free_gpus": int((free >= 1000).sum()),
             "fractions_placed": len(placed), "waste_gpus": float(free.sum()) / 1000,
             "ffd_waste_gpus": ffd_bins(placed) - sum(placed) / 1000}, gap)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="default,default-spec20")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--policies", default="fgd,foresight")
    ap.add_argument("--out", default="replay_packing_bound.md")
    ap.add_argument("--pairs", default="default-spec20:foresight",
                    help="TRACE:POLICY whose G2 GPU contents are listed beside FFD's (first "
                    "seed; empty: none)")
    a = ap.parse_args()
    seeds = parse_seeds(a.seeds)
    if max(seeds) >= 42:
        raise SystemExit("dev seeds only (42-51 are the final seeds)")
    nodes = load_nodes(CSV / "openb_node_list_gpu_node.csv")
    rows = []
    for trace in a.traces.split(","):
        pods = load_trace(CSV, trace)
        for policy in a.policies.split(","):
            runs = [one(nodes, pods, policy, s) for s in seeds]
            row = {"trace": trace, "policy": policy, "seeds": a.seeds}
            for k in runs[0][0]:
                row[k] = float(np.mean([r[k] for r, _ in runs]))
            row["gap_to_ffd_gpus"] = row["waste_gpus"] - row["ffd_waste_gpus"]
            models = sorted({m for _, g in runs for m in g})
            row["by_model"] = {m: float(np.mean([g.get(m, 0.0) for _, g in runs]))
                               for m in models}
            rows.append(row)
            print(row, flush=True)
    cap = int(nodes.gpus.sum())
    lines = header("Fraction packing against an offline first-fit-decreasing bound (dev seeds)",
                   "nice .venv/bin/python bench/replay_packing_bound.py " + " ".join(sys.argv[1:]))
    lines += [f"Cluster: {cap} GPUs (1 GPU = {100 / cap:.4f} points of alloc). Means over seeds "
              f"{a.seeds}; tune 1.3, stopped at 100 % arrived load. `waste_gpus` = free GPU "
              "capacity then (all of it on GPUs holding fractions when `whole_free_gpus` is 0); "
              "`ffd_waste_gpus` = what FFD leaves packing the same placed fractions offline "
              "(no CPU, memory or model constraint); by model: waste on that model's GPUs minus FFD's "
              "for the fractions placed there.", "",
              "| trace | policy | alloc at 100 % | whole free GPUs | fractions placed | waste "
              "(GPUs) | FFD waste (GPUs) | gap to FFD (GPUs) | gap (alloc points) | gap by model "
              "(GPUs) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['trace']} | {r['policy']} | {r['alloc_at_100']:.2f} | "
                     f"{r['whole_free_gpus']:.1f} | {r['fractions_placed']:.0f} | "
                     f"{r['waste_gpus']:.1f} | {r['ffd_waste_gpus']:.1f} | "
                     f"{r['gap_to_ffd_gpus']:.1f} | {100 * r['gap_to_ffd_gpus'] / cap:.2f} | "
                     + ", ".join(f"{m} {v:.1f}" for m, v in r["by_model"].items()
                                 if abs(v) >= 0.5) + " |")
    if a.pairs:
        trace, policy = a.pairs.split(":")
        lines += [""] + pairing_lines(nodes, load_trace(CSV, trace), trace, policy, seeds[0])
    write(RESULTS / a.out, lines)


if __name__ == "__main__":
    main()
