"""Dev-seed comparison of Foresight's best-fit scope (issue 6): paired seeds, every shared trace.

Usage: nice .venv/bin/python bench/replay_fitscope_dev.py cur,sharedonly,notwhole 0 9 \
           bench/results/replay_fitscope_dev.jsonl
Variants (the best-fit weight 30 is charged to ...): cur = every pod (the policy before
fit_scope); sharedonly = pods asking a GPU fraction; notwhole = those and CPU-only pods (now the
default, fit_scope "sharing+cpu"); pergpu = every pod, 30 / GPU count; le1 = pods of at most one
GPU. Others get the 1e-6 tie-break. Dev seeds only: never the published seeds 42-51.
"""
import json, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.replay.policies import Foresight
from simulator.replay.engine import replay
from simulator.replay.data import load_nodes, load_pods
from simulator.replay.compare import SHARED_TRACES, shared_traces_dir

W = 30.0
def scale(v, pod):
    if v == "cur": return 1.0
    if v == "sharedonly": return 1.0 if pod.shared else 1e-6 / W          # CPU-only + whole-GPU: tie-break
    if v == "notwhole": return 1.0 if (pod.shared or pod.num_gpu == 0) else 1e-6 / W
    if v == "pergpu": return 1.0 / max(pod.num_gpu, 1)
    if v == "le1": return 1.0 if pod.num_gpu <= 1 else 1e-6 / W
    raise ValueError(v)

class V(Foresight):
    fit_scope = "all"  # the weight is set per pod below

    def __init__(self, v): self.v = v
    def score(self, pod, node_ok, slots):
        self.fit_weight = W * scale(self.v, pod)
        return super().score(pod, node_ok, slots)

CSV = shared_traces_dir() / "openb-2023" / "csv"
def run(job):
    t, v, s = job
    nodes = load_nodes(CSV / "openb_node_list_gpu_node.csv")
    pods = load_pods(CSV / f"openb_pod_list_{t}.csv")
    r = replay(nodes, pods, V(v), s, 1.3, until=100).to_json()
    return {"trace": t, "variant": v, "seed": s, "a": r["alloc_at_100"], "sec": r["seconds"]}

if __name__ == "__main__":
    variants = sys.argv[1].split(","); seeds = range(int(sys.argv[2]), int(sys.argv[3]) + 1)
    out = Path(sys.argv[4])
    done = set()
    if out.exists():
        done = {(d["trace"], d["variant"], d["seed"]) for d in map(json.loads, out.read_text().splitlines())}
    jobs = [(t, v, s) for s in seeds for t in SHARED_TRACES for v in variants if (t, v, s) not in done]
    with ProcessPoolExecutor(2) as ex, out.open("a") as f:
        for r in ex.map(run, jobs):
            f.write(json.dumps(r) + "\n"); f.flush()
