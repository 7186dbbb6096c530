"""What the extender adds to a real kube-scheduler's per-pod scheduling time.

One control plane per cluster size (etcd + kube-apiserver v1.34 on loopback, ../shared/k8s),
N fake GPU nodes (the openb-like mix of bench/extender_cluster.py, half of them partly used),
`foresight serve --only extender` watching it, and three kube-schedulers side by side from
deploy/kube-scheduler-config.yaml: `plain-scheduler` without the extender stanza,
`echo-scheduler` with it pointed at bench/echo_extender.py (decides nothing), and
`foresight-scheduler` pointed at Foresight. Each round creates --pods pods for each scheduler in
turn, waits until all are bound, and reads the scheduler's own histograms
(`scheduler_scheduling_algorithm_duration_seconds`, `..._attempt_duration_seconds`) and the
processes' CPU before and after. Added time = median over rounds of the paired per-round
difference, by the algorithm histogram (the table's own time) and by the attempt histogram
(the measure issue 30 took its 1.4x from: the same plus the binding call). The extender's own
answer time per verb comes from its /metrics.

--compare REF adds a fourth kube-scheduler, `base-scheduler`, pointed at a second Foresight
extender run from commit REF's tree (git archive) with REF's deploy/kube-scheduler-config.yaml,
in the same run: a before/after pair that shares the machine's load round by round; and a
fifth, `echo2-scheduler`, REF's config pointed at the echo extender (the floor of REF's
extender stanza, e.g. two calls per pod where the shipped one makes one).

Usage: python bench/scheduler_overhead.py [--nodes 1000 5000] [--rounds 12] [--pods 20]
       [--compare REF] [--percentage P] [--out bench/results/scheduler_overhead.md]
       [--profile DIR]  (py-spy of the
       extender's GIL holder, when py-spy is installed: a dev tool, not a project dependency;
       it still perturbs the extender, so the table comes from runs without it)
"""
from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import machine  # noqa: E402
from extender_cluster import SHAPES, synthetic_cluster  # noqa: E402

from scheduler_overhead_report import report  # noqa: E402

from scheduler_hook.kube_local import (ControlPlane,  # noqa: E402
                                       algorithm_totals, attempt_totals, binaries,
                                       cpu_seconds, free_port, gpu_node, gpu_pod,
                                       start_extender)

PLAIN, ECHO, EXT = "plain-scheduler", "echo-scheduler", "foresight-scheduler"
BASE = "base-scheduler"  # --compare: Foresight at another commit, with that commit's config
ECHO2 = "echo2-scheduler"  # --compare: the echo extender under that commit's config
KEYS = {PLAIN: "plain", ECHO: "echo", EXT: "ext"}


def cluster(n: int, fill: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """N nodes, every other one with pods bound on it for about `fill` of its GPU milli
    (bench/extender_cluster.py's openb-like mix; the empty half takes the 8-GPU pods). The extender starts from a cluster in use,
    as deployed, not from an empty one: an empty cluster's shape mix is young, so every few
    pods refreeze it and rescore the fragmentation of every node, which a cluster with a
    history does every few hundred pods."""
    raw_nodes, bound = synthetic_cluster(n, fill, seed)
    bound = [p for p in bound if int(p["spec"]["nodeName"].rsplit("-", 1)[1]) % 2 == 0]
    nodes = []
    for node in raw_nodes:
        labels = node["metadata"]["labels"]
        nodes.append(gpu_node(node["metadata"]["name"],
                              int(node["status"]["allocatable"]["nvidia.com/gpu"]),
                              labels["nvidia.com/gpu.product"],
                              int(labels["nvidia.com/gpu.memory"])))
    for pod in bound:
        spec = pod["spec"]
        spec.pop("schedulerName", None)
        spec["terminationGracePeriodSeconds"] = 0
        if "gpu-fraction" in pod["metadata"]["annotations"]:  # KAI share: one managed GPU
            spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"},
                                                  "requests": {"nvidia.com/gpu": "1"}}
        pod.pop("status", None)
        pod["metadata"].pop("uid", None)
    return nodes, bound


def pods(rng: np.random.Generator, prefix: str, scheduler: str, n: int) -> list[dict]:
    w = np.array([s[2] for s in SHAPES])
    out = []
    for i in range(n):
        gpus, frac, _ = SHAPES[rng.choice(len(SHAPES), p=w / w.sum())]
        pod = gpu_pod(f"{prefix}-{i}", scheduler, gpus=gpus, fraction=frac,
                      labels={"foresight.io/workload": f"job-{rng.integers(0, 40)}"})
        out.append(pod)
    return out


def extender_latency(url: str) -> dict[str, tuple[float, float]]:
    """verb -> (sum seconds, count) of the extender's own answer time."""
    out: dict[str, list[float]] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("foresight_extender_latency_seconds_"):
            name, rest = line.split("{", 1)
            verb = rest.split('verb="', 1)[1].split('"', 1)[0]
            slot = out.setdefault(verb, [0.0, 0.0])
            if name.endswith("_sum"):
                slot[0] = float(line.rsplit(" ", 1)[1])
            elif name.endswith("_count"):
                slot[1] = float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def run_size(bin_dir: Path, n_nodes: int, rounds: int, per_round: int, fill: float,
             profile_dir: Path | None, base_root: Path | None = None,
             percentage: int | None = None) -> dict:
    cp = ControlPlane(bin_dir).start()
    ext = spy = echo = base_ext = None
    keys = {**KEYS, BASE: "base", ECHO2: "echo2"} if base_root is not None else KEYS
    try:
        t0 = time.time()
        node_objs, bound = cluster(n_nodes, fill)
        cp.create_nodes(node_objs)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(cp.create_pod, bound))
        created_s = time.time() - t0
        ext, url = start_extender(cp.kubeconfig, nodes=n_nodes)
        urls = {EXT: url}
        if base_root is not None:
            base_ext, urls[BASE] = start_extender(cp.kubeconfig, nodes=n_nodes, root=base_root)
        echo_port = free_port()
        echo = subprocess.Popen([sys.executable, str(ROOT / "bench/echo_extender.py"),
                                 str(echo_port)])
        deadline = time.time() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{echo_port}/readyz")
                break
            except httpx.TransportError:
                assert time.time() < deadline and echo.poll() is None, "echo extender not up"
                time.sleep(0.1)
        pct = {"percentage": percentage}
        base = {PLAIN: cp.start_scheduler("plain", None, PLAIN, **pct),
                ECHO: cp.start_scheduler("echo", f"http://127.0.0.1:{echo_port}", ECHO, **pct),
                EXT: cp.start_scheduler("ext", url, EXT, **pct)}
        if base_root is not None:
            base_cfg = {"config": base_root / "deploy/kube-scheduler-config.yaml"}
            base[BASE] = cp.start_scheduler("base", urls[BASE], BASE, **pct, **base_cfg)
            base[ECHO2] = cp.start_scheduler("echo2", f"http://127.0.0.1:{echo_port}", ECHO2,
                                             **pct, **base_cfg)
        spy_bin = shutil.which("py-spy") or shutil.which("py-spy", path=str(
            Path(sys.executable).parent))
        if profile_dir is not None and spy_bin:
            profile_dir.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen([spy_bin, "record", "--gil", "--nonblocking", "-p",
                                    str(ext.pid), "-r", "200", "-f", "speedscope", "-o",
                                    str(profile_dir / f"extender_{n_nodes}.json")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rng = np.random.default_rng(1)
        pids = {s: cp.pids[k] for s, k in keys.items()}
        ext_pid = {s: {BASE: base_ext, ECHO: echo, ECHO2: echo}.get(s, ext).pid for s in keys}
        rows: dict[str, list[dict[str, float]]] = {s: [] for s in keys}
        warm = 1  # round 0 warms the schedulers' caches and the extender's: not counted
        for r in range(rounds + warm):
            k = r % len(keys)
            order = list(keys)[k:] + list(keys)[:k]  # each goes first in turn
            for sched in order:
                batch = pods(rng, f"r{r}-{keys[sched]}", sched, per_round)
                ids = {"sched": pids[sched], "extender": ext_pid[sched]}
                before = _sample(cp, base[sched], sched, urls.get(sched), ids)
                for pod in batch:  # one client, no burst: the apiserver is not the bottleneck
                    cp.create_pod(pod)
                cp.wait_bound([p["metadata"]["name"] for p in batch], timeout_s=120)
                after = _sample(cp, base[sched], sched, urls.get(sched), ids)
                if r >= warm:
                    rows[sched].append(_per_pod(before, after, sched))
        out = {"nodes": n_nodes, "create_s": created_s, "prefill": len(bound)}
        for sched, key in keys.items():
            for m in rows[sched][0]:
                out[f"{key}_{m}"] = statistics.median(x[m] for x in rows[sched])
            out[f"{key}_rounds"] = [round(x["algo_ms"], 2) for x in rows[sched]]
        # added = median over rounds of the paired difference (the schedulers of one round ran
        # within seconds of each other: the other tenants' load cancels better than between
        # medians taken apart)
        algo = {k: [x["algo_ms"] for x in rows[s]] for s, k in keys.items()}
        out["added_ms"] = statistics.median(a - b for a, b in zip(algo["ext"], algo["plain"]))
        out["ratio"] = out["added_ms"] / out["plain_algo_ms"]
        out["beyond_echo_ms"] = statistics.median(a - b for a, b in zip(algo["ext"],
                                                                        algo["echo"]))
        # the issue's own measure: the scheduling-attempt histogram (algorithm + binding)
        att = {k: [x["attempt_ms"] for x in rows[s]] for s, k in keys.items()}
        for key in ("ext", "echo"):
            out[f"{key}_attempt_added_ms"] = statistics.median(
                a - b for a, b in zip(att[key], att["plain"]))
        out["attempt_ratio"] = out["ext_attempt_added_ms"] / out["plain_attempt_ms"]
        plain_cpu = [x["sched_cpu_ms"] for x in rows[PLAIN]]
        for sched, key in ((ECHO, "echo"), (ECHO2, "echo2")):  # the floor, and its CPU parts
            if sched in rows:
                out[f"{key}_added_ms"] = statistics.median(
                    a - b for a, b in zip(algo[key], algo["plain"]))
                out[f"{key}_sched_cpu_added_ms"] = statistics.median(
                    x["sched_cpu_ms"] - c for x, c in zip(rows[sched], plain_cpu))
        if base_root is not None:
            out["base_added_ms"] = statistics.median(a - b for a, b in zip(algo["base"],
                                                                           algo["plain"]))
            out["base_ratio"] = out["base_added_ms"] / out["plain_algo_ms"]
            out["now_minus_base_ms"] = statistics.median(a - b for a, b in zip(algo["ext"],
                                                                               algo["base"]))
        return out
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its profile on Ctrl-C
            spy.wait(60)
        for proc in (ext, echo, base_ext):
            if proc is not None:
                proc.terminate()
                proc.wait(15)
        cp.stop()


def _sample(cp: ControlPlane, sched_url: str, sched: str, ext_url: str | None,
            pids: dict[str, int]) -> dict[str, tuple[float, float] | float]:
    out: dict[str, tuple[float, float] | float] = {}
    if ext_url is not None:  # its /metrics walks the whole state: read it before the CPU clocks
        out.update(extender_latency(ext_url))
    text = cp.metrics_text(sched_url)
    out.update({"algo": algorithm_totals(text), "attempt": attempt_totals(text, sched),
                "sched_cpu": cpu_seconds(pids["sched"]),
                "extender_cpu": cpu_seconds(pids["extender"])})
    return out


def _per_pod(before: dict, after: dict, sched: str) -> dict[str, float]:
    """One round's per-pod figures in ms: histogram means and CPU per pod scheduled."""
    pods = max(after["algo"][1] - before["algo"][1], 1)
    row = {f"{k}_ms": 1e3 * (after[k][0] - before[k][0]) / max(after[k][1] - before[k][1], 1)
           for k in ("algo", "attempt", "filter", "prioritize") if k in after}
    row["sched_cpu_ms"] = 1e3 * (after["sched_cpu"] - before["sched_cpu"]) / pods
    row["extender_cpu_ms"] = 1e3 * (after["extender_cpu"] - before["extender_cpu"]) / pods
    return row


def _checkout(ref: str) -> Path:
    """Commit `ref`'s tree in a temporary directory (git archive: no worktree, no .git)."""
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="foresight-base-"))
    tar = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar.stdout, check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/scheduler_overhead.md")
    ap.add_argument("--fill", type=float, default=0.6,
                    help="share of GPU milli bound before the run on every other node "
                    "(pods created with nodeName)")
    ap.add_argument("--profile", type=Path, default=None)
    ap.add_argument("--percentage", type=int, default=None,
                    help="percentageOfNodesToScore for every kube-scheduler instead of the "
                    "shipped profile's (0: unset, kube-scheduler's adaptive default)")
    ap.add_argument("--compare", default=None, metavar="REF",
                    help="also run Foresight at commit REF (a fourth kube-scheduler)")
    args = ap.parse_args()
    bin_dir = binaries()
    if bin_dir is None:
        sys.exit("no ../shared/k8s binaries: nothing to measure")
    machine_text = machine()  # before the run: the load of the machine, not of this bench
    base_root = _checkout(args.compare) if args.compare else None
    args.base_config = base_root / "deploy/kube-scheduler-config.yaml" if base_root else None
    rows = []
    for n in args.nodes:
        rows.append(run_size(bin_dir, n, args.rounds, args.pods, args.fill, args.profile,
                             base_root, args.percentage))
        print(rows[-1], flush=True)
    text = report(rows, args, machine_text)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
