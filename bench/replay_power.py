"""Power mode on openb `default`: racks over their power cap per policy, and what the cap costs.

Usage: nice .venv/bin/python bench/replay_power.py --seeds 42-46 --caps 0.6,0.65,0.7,0.75,0.8
Only Foresight honours the cap. Baselines place pods the same whatever the cap, so each baseline
runs once per seed and its racks are checked against every cap.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import header, write  # noqa: E402

from simulator.replay import POLICIES, load_nodes, load_pods, replay  # noqa: E402
from simulator.replay.compare import parse_seeds, shared_traces_dir  # noqa: E402
from simulator.replay.power import PowerMode  # noqa: E402


def _run(job: tuple[str, str, int, float | None, str, str | None]) -> tuple:
    trace, pol, seed, cap, gpu, zeus = job
    base = shared_traces_dir()
    csv = base / "openb-2023" / "csv"
    nodes = load_nodes(csv / "openb_node_list_gpu_node.csv")
    pods = load_pods(csv / f"openb_pod_list_{trace}.csv")
    # cap None: Foresight without power mode; baselines run with any cap (they ignore it)
    table = Path(zeus) if zeus else base / "zeus-power" / f"summary_power_{gpu}.csv"
    mode = None if cap is None else PowerMode(table, cap_frac=cap)
    r = replay(nodes, pods, pol, seed, until=100, mode=mode)
    return pol, seed, cap, r.alloc_at_100, r.extra


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seeds", default="42-46")
    ap.add_argument("--caps", default="0.6,0.65,0.7,0.75,0.8")
    ap.add_argument("--gpu", default="v100", help="Zeus table: a40, p100, rtx6000 or v100")
    ap.add_argument("--zeus", default=None, help="a summary_power_<gpu>.csv-format table to "
                    "read instead of the shared one for --gpu")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "replay_power.md"))
    a = ap.parse_args()
    seeds, caps = parse_seeds(a.seeds), [float(c) for c in a.caps.split(",")]
    base_pols = [p for p in POLICIES if p != "foresight"]
    jobs = [(a.trace, p, s, caps[0], a.gpu, a.zeus) for p in base_pols for s in seeds]
    jobs += [(a.trace, "foresight", s, c, a.gpu, a.zeus) for c in [None, *caps] for s in seeds]
    with ProcessPoolExecutor(max(1, min(a.workers, 2))) as ex:
        runs = list(ex.map(_run, jobs))
    lines = header(f"Power-capped replay on `{a.trace}` (tune 1.3, state at 100% arrived load)",
                   "nice .venv/bin/python bench/replay_power.py " + " ".join(sys.argv[1:]))
    mean = statistics.mean
    nameplate = mean(r[4]["cluster_power_frac"] for r in runs if r[0] == "fgd")
    lines += [f"Pods draw Zeus {a.gpu if not a.zeus else a.zeus} GPU power at the top power limit (per workload and "
              "configuration); racks of 10 nodes in file order; a rack's cap = cap_frac x its "
              "GPUs' nameplate (top power limit). Means over seeds "
              f"{a.seeds}. `alloc no cap`: the same policy without power mode. Baselines ignore "
              "the cap. Physical bound: with no cap, `fgd` draws "
              f"{nameplate:.3f} of the cluster's nameplate at 100% arrived load, so no placement "
              "at all can keep every rack under a cap below that fraction without allocating "
              "less.", "",
              "| cap_frac | policy | alloc at 100% | alloc no cap | racks over cap / racks "
              "(mean) | seeds with any rack over | cluster power / nameplate |",
              "|---|---|---|---|---|---|---|"]
    for cap in caps:
        for pol in POLICIES:
            if pol == "foresight":
                rs = [r for r in runs if r[0] == pol and r[2] == cap]
                nocap = mean(r[3] for r in runs if r[0] == pol and r[2] is None)
            else:
                rs = [r for r in runs if r[0] == pol]
                nocap = mean(r[3] for r in rs)
            over = [sum(f > cap for f in r[4]["rack_power_frac"]) for r in rs]
            lines.append(f"| {cap} | {pol} | {mean(r[3] for r in rs):.2f} | {nocap:.2f} | "
                         f"{mean(over):.1f} / {rs[0][4]['racks']} | "
                         f"{sum(o > 0 for o in over)} / {len(rs)} | "
                         f"{mean(r[4]['cluster_power_frac'] for r in rs):.3f} |")
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
