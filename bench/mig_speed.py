"""MIG speed: the extender's filter+prioritize for MIG and whole-GPU pods over 5,000 nodes (half
of them MIG, mixed strategy), and the geometry planner over 100-2,000 MIG nodes.

Run: nice .venv/bin/python bench/mig_speed.py [--decisions 200] [--runs 3]
Writes bench/results/mig_speed.md. In process (no HTTP): the HTTP overhead is the same as for
any pod (bench/extender_latency.py). Each timed decision follows a binding of one MIG pod, as
in a real schedule, so the row caches rescore one node; the first (cold) decision is reported
apart.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
from benchenv import machine  # noqa: E402
from migutil import mig_pod, mixed_node  # noqa: E402
from scheduler_hook.config import load_config  # noqa: E402
from scheduler_hook.fake_kube import make_node, make_pod  # noqa: E402
from scheduler_hook.hook import ExtenderHook  # noqa: E402
from scheduler_hook.mig_plan import plan_objects  # noqa: E402
from scheduler_hook.providers import ProviderSet  # noqa: E402
from scheduler_hook.state import ClusterState  # noqa: E402
from scheduler_hook.wire import ArgsParser  # noqa: E402

BAL = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def extender_rows(decisions: int) -> list[str]:
    st, names = ClusterState(), []
    for i in range(5000):
        st.upsert_node(mixed_node(f"n{i}", BAL, gpus=8) if i % 2 else make_node(f"n{i}", gpus=8))
        names.append(f"n{i}")
    for i in range(2000):
        st.upsert_pod(make_pod(f"w{i}", gpus=1, node=f"n{2 * i}", phase="Running"))
        st.upsert_pod(mig_pod(f"m{i}", "1g.5gb", node=f"n{2 * i + 1}", phase="Running"))
    st.ready = True
    hook = ExtenderHook(st, ProviderSet(), load_config())
    rows = []
    for label, pod in (("whole GPU (`nvidia.com/gpu: 1`)", make_pod("x", gpus=1)),
                       ("MIG (`nvidia.com/mig-3g.20gb: 1`)", mig_pod("y", "3g.20gb"))):
        args = ArgsParser()(orjson.dumps({"Pod": pod, "NodeNames": names, "Nodes": None}))
        t0 = time.perf_counter()
        hook.filter(args)
        cold = time.perf_counter() - t0
        wall, cpu = [], []
        for k in range(decisions):
            node = f"n{(4 * k + 1) % 5000}"
            st.upsert_pod(mig_pod(f"b{k}-{len(rows)}", "1g.5gb", node=node, phase="Running"))
            t0, c0 = time.perf_counter(), time.process_time()
            hook.filter(args)
            hook.prioritize_json(args)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        rows.append(f"| {label} | {1000 * cold:.0f} ms | {1000 * statistics.median(wall):.1f} ms | "
                    f"{1000 * _pct(wall, 0.99):.1f} ms | {1000 * statistics.median(cpu):.1f} ms |")
        print(rows[-1], flush=True)
    return rows


def planner_rows(runs: int) -> list[str]:
    rows = []
    plan_objects([mixed_node("warm", BAL, gpus=1)], [], None)  # YAML read, caches filled
    for n in (100, 500, 2000):
        nodes = [mixed_node(f"n{i}", {"1g.5gb": 7} if i % 2 else BAL, gpus=8,
                            config="all-1g.5gb" if i % 2 else "all-balanced") for i in range(n)]
        pods = [mig_pod(f"p{i}", "1g.5gb", node=f"n{i}", phase="Running")
                for i in range(0, n, 3)]
        fc = [{"unique_id": "mig:3g.20gb", "p90": n * 6}, {"unique_id": "mig:1g.5gb", "p90": n * 3},
              {"unique_id": "mig:2g.10gb", "p90": n}]
        for custom in (False, True):
            wall, cpu, p = [], [], None
            for _ in range(runs):
                t0, c0 = time.perf_counter(), time.process_time()
                p = plan_objects(nodes, pods, fc, custom=custom)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            rows.append(f"| {n} | {'named + custom' if custom else 'named'} | "
                        f"{statistics.median(wall):.2f} s | {statistics.median(cpu):.2f} s | "
                        f"{len(p.commands)} | {p.unmet_before:.0f} -> {p.unmet_after:.0f} |")
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decisions", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mig_speed.md"))
    args = ap.parse_args()
    load0 = os.getloadavg()
    ext = extender_rows(args.decisions)
    plan = planner_rows(args.runs)
    load = os.getloadavg()
    text = "\n".join([
        "# MIG speed: extender decisions and the geometry planner", "",
        f"Command: `nice .venv/bin/python bench/mig_speed.py --decisions {args.decisions} "
        f"--runs {args.runs}`  ",
        f"Machine: {machine()}; load average at the start {load0[0]:.1f} / {load0[1]:.1f} / "
        f"{load0[2]:.1f}, at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}  ",
        f"Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        "## Extender, 5,000 nodes (2,500 A100-40GB `all-balanced` x 8 GPUs, mixed strategy; "
        "2,500 whole-GPU nodes), in process", "",
        f"filter + prioritize of one pod after a binding changed one node; {args.decisions} "
        "decisions. Cold = the first filter of that pod class (every row scored).", "",
        "| pod | cold | median wall | p99 wall | median CPU |", "|---|---|---|---|---|", *ext, "",
        "## Planner (`scheduler_hook.mig_plan.plan_objects`, parsing included)", "",
        "Half the nodes `all-1g.5gb`, half `all-balanced`, 8 A100-40GB each, a pod on every "
        "third; forecast p90 per node: 6 x 3g.20gb, 3 x 1g.5gb, 1 x 2g.10gb. Median of "
        f"{args.runs} runs.", "",
        "| MIG nodes | candidates | wall | CPU | nodes re-split | unmet compute slices |",
        "|---|---|---|---|---|---|", *plan])
    Path(args.out).write_text(text + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
