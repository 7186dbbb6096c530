"""Wall time of one openb `default` replay at tune 1.3 (target: < 30 s on 2 cores).

Usage: nice .venv/bin/python bench/replay_speed.py [--runs 3] [--policies fgd,foresight]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402

from simulator.replay import load_nodes, load_pods, replay  # noqa: E402
from simulator.replay.compare import shared_traces_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policies", default="random,bestfit,fgd,foresight")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "replay_speed.md"))
    a = ap.parse_args()
    csv = shared_traces_dir() / "openb-2023" / "csv"
    nodes = load_nodes(csv / "openb_node_list_gpu_node.csv")
    pods = load_pods(csv / "openb_pod_list_default.csv")
    lines = header("Replay speed: one `default` replay, tune 1.3",
                   "nice .venv/bin/python bench/replay_speed.py " + " ".join(sys.argv[1:]))
    lines += ["Seeds 42.. (one per run), full curve to 130%, one process. `cpu s` is the process "
              "CPU time (what the replay costs on an idle core); `wall s` depends on how busy the "
              "shared machine was. The published Go simulator takes about 10 min on 2 vCPUs.",
              "", "| policy | pods | median wall s | max wall s | median cpu s | max cpu s | runs |",
              "|---|---|---|---|---|---|---|"]
    for pol in a.policies.split(","):
        wall, cpu, n = [], [], 0
        for i in range(a.runs):
            c0 = time.process_time()
            r = replay(nodes, pods, pol, 42 + i)
            cpu.append(time.process_time() - c0)
            wall.append(r.seconds)
            n = r.pods
        lines.append(f"| {pol} | {n} | {statistics.median(wall):.1f} | {max(wall):.1f} | "
                     f"{statistics.median(cpu):.1f} | {max(cpu):.1f} | {a.runs} |")
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
