"""Beyond-packing mode on openb `default`: slow co-locations and memory overflows per policy.

Usage: nice .venv/bin/python bench/replay_colocation.py --seeds 42,43
Truth: Gavel physical V100 pair speeds; Foresight predicts from the P100 measurements and
learns memory ratios online (see simulator/replay/colocation.py; memory is synthetic).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402

from simulator.replay import POLICIES, load_nodes, load_pods, replay  # noqa: E402
from simulator.replay.colocation import ColocationMode  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seeds", default="42,43")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "replay_colocation.md"))
    a = ap.parse_args()
    base = shared_traces_dir()
    csv = base / "openb-2023" / "csv"
    nodes = load_nodes(csv / "openb_node_list_gpu_node.csv")
    pods = load_pods(csv / f"openb_pod_list_{a.trace}.csv")
    mode = ColocationMode(base / "gavel-colocation" / "gavel_pairs_flat.csv")
    seeds = parse_seeds(a.seeds)
    lines = header(f"Beyond-packing replay on `{a.trace}` (tune 1.3, state at 100% arrived load)",
                   "nice .venv/bin/python bench/replay_colocation.py " + " ".join(sys.argv[1:]))
    lines += ["Each GPU-sharing pod gets a Gavel job type (uniform, seeded). `slow pairs`: pairs "
              "sharing a GPU whose true V100 speed (either side) < 0.85. `mem overflow`: pods on "
              "a shared GPU whose summed true peak memory exceeds it (peak = declared share x a "
              "per-job ratio from U(0.7, 1.3): synthetic, Gavel has no memory). Only Foresight "
              "uses predictions (P100 speeds, memory ratios of pods placed before). Medians over "
              f"seeds {a.seeds}.", "",
              "| policy | alloc at 100% | sharing pods | co-located pairs | slow pairs | "
              "mem overflow pods |", "|---|---|---|---|---|---|"]
    for pol in POLICIES:
        rs = [replay(nodes, pods, pol, s, until=100, mode=mode) for s in seeds]
        med = {k: statistics.median(r.extra[k] for r in rs) for k in rs[0].extra}
        lines.append(f"| {pol} | {statistics.median(r.alloc_at_100 for r in rs):.2f} | "
                     f"{med['sharing_pods']:.0f} | {med['colocated_pairs']:.0f} | "
                     f"{med['slow_pairs']:.0f} | {med['memory_overflow_pods']:.0f} |")
        print(lines[-1], flush=True)
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
