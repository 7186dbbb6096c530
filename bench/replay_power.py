"""Power mode on openb `default`: racks over their power cap per policy, and what the cap costs.

Usage: nice .venv/bin/python bench/replay_power.py --seeds 42 --caps 0.6,0.75
Only Foresight honours the cap (baselines ignore it, so their allocation equals the no-cap run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402

from simulator.replay import POLICIES, load_nodes, load_pods, replay  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402
from simulator.replay.power import PowerMode  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--caps", default="0.6,0.75")
    ap.add_argument("--gpu", default="v100", help="Zeus table: a40, p100, rtx6000 or v100")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "replay_power.md"))
    a = ap.parse_args()
    base = shared_traces_dir()
    csv = base / "openb-2023" / "csv"
    nodes = load_nodes(csv / "openb_node_list_gpu_node.csv")
    pods = load_pods(csv / f"openb_pod_list_{a.trace}.csv")
    seeds = parse_seeds(a.seeds)
    lines = header(f"Power-capped replay on `{a.trace}` (tune 1.3, state at 100% arrived load)",
                   "nice .venv/bin/python bench/replay_power.py " + " ".join(sys.argv[1:]))
    lines += [f"Pods draw Zeus {a.gpu} power at the top power limit (per workload and "
              "configuration); racks of 10 nodes in file order; cap = cap_frac x rack GPUs x top "
              f"limit. Medians over seeds {a.seeds}. `alloc no cap`: the same policy without "
              "power mode.", "",
              "| cap_frac | policy | alloc at 100% | alloc no cap | racks over cap / racks | "
              "worst rack power / cap |", "|---|---|---|---|---|---|"]
    nocap = {p: statistics.median(replay(nodes, pods, p, s, until=100).alloc_at_100
                                  for s in seeds) for p in POLICIES}
    for cap in [float(c) for c in a.caps.split(",")]:
        mode = PowerMode(base / "zeus-power" / f"summary_power_{a.gpu}.csv", cap_frac=cap)
        for pol in POLICIES:
            rs = [replay(nodes, pods, pol, s, until=100, mode=mode) for s in seeds]
            over = statistics.median(r.extra["racks_over_cap"] for r in rs)
            worst = statistics.median(r.extra["worst_rack_power_over_cap"] for r in rs)
            lines.append(f"| {cap} | {pol} | {statistics.median(r.alloc_at_100 for r in rs):.2f}"
                         f" | {nocap[pol]:.2f} | {over:.0f} / {rs[0].extra['racks']} | "
                         f"{worst:.3f} |")
            print(lines[-1], flush=True)
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
