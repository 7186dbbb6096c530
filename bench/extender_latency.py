"""Extender latency and throughput over a 5,000-node cluster (nodeCacheCapable requests).

Measures, over several runs (medians reported):
- in process: `prioritize` (cold: a new pod, no filter before it) and a full scheduling cycle
  (filter, prioritize, then the pod is bound into the state so the next pod sees a changed
  cluster), wall and CPU time per call;
- over HTTP: `foresight serve --only extender --snapshot` in its own process, one keep-alive
  client, like kube-scheduler's sequential scheduling cycle;
- sustained: pods arrive open-loop at --rate per second; each does filter then prioritize over
  HTTP; achieved rate and per-pod latency from its arrival time (queueing included).

Usage: nice python bench/extender_latency.py [--nodes 5000] [--runs 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extender_cluster import served_hook, shape_pod, synthetic_cluster  # noqa: E402

from scheduler_hook.podspec import PodRequest  # noqa: E402
from scheduler_hook.wire import ArgsParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


def bodies(names: list[str], n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [orjson.dumps({"Pod": shape_pod(rng, f"bench-{seed}-{i}"), "Nodes": None,
                          "NodeNames": names}) for i in range(n)]


def in_process(nodes: list[dict], pods: list[dict], n: int, seed: int) -> dict[str, float]:
    st, hook = served_hook(nodes, pods)
    parse_args = ArgsParser()  # the server's parser: a repeated node list is not re-decoded
    names = st.all_names()
    hook.prioritize_json(parse_args(bodies(names, 1, seed + 99)[0]))  # render answer table once
    cold_w, cold_c, cyc_w = [], [], []
    for b in bodies(names, n, seed):
        w, c = time.perf_counter(), time.thread_time()
        hook.prioritize_json(parse_args(b))
        cold_w.append(time.perf_counter() - w)
        cold_c.append(time.thread_time() - c)
    for b in bodies(names, n, seed + 1):
        w = time.perf_counter()
        args = parse_args(b)
        passed = hook.filter(args)["NodeNames"]
        out = orjson.loads(hook.prioritize_json(parse_args(orjson.dumps(
            {"Pod": args.pod, "Nodes": None, "NodeNames": passed}))))
        cyc_w.append(time.perf_counter() - w)
        best = max(out, key=lambda h: h["Score"])["Host"]
        pod = hook.pod(args.pod)
        gpus = hook.scorer.choose_gpus(pod, best)
        if gpus or not pod.gpus:  # bind it: the next pod sees a changed cluster
            st.upsert_pod(PodRequest(**{**pod.__dict__, "node": best, "gpu_index": tuple(gpus),
                                        "phase": "Running"}))
    gc.unfreeze()
    return {"prio_p50": pct(cold_w, 50), "prio_p99": pct(cold_w, 99),
            "prio_cpu_p50": pct(cold_c, 50), "prio_cpu_p99": pct(cold_c, 99),
            "cycle_p50": pct(cyc_w, 50), "cycle_p99": pct(cyc_w, 99)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(snapshot: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", "--only", "extender",
                             "--snapshot", str(snapshot), "--port", str(port), "--host",
                             "127.0.0.1", "--log-level", "warning"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"extender did not become ready: {proc.stderr.read().decode()[-500:]}")


def post(conn: http.client.HTTPConnection, verb: str, body: bytes) -> bytes:
    conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{verb}: HTTP {resp.status} {data[:200]!r}")
    return data


def over_http(port: int, names: list[str], n: int, seed: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    post(conn, "prioritize", bodies(names, 1, seed + 99)[0])  # warm the answer table
    lat = []
    for b in bodies(names, n, seed):
        t = time.perf_counter()
        post(conn, "prioritize", b)
        lat.append(time.perf_counter() - t)
    conn.close()
    return {"http_prio_p50": pct(lat, 50), "http_prio_p99": pct(lat, 99)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc), to tell work from waiting."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sustained(port: int, names: list[str], rate: float, seconds: float, seed: int,
              pid: int) -> dict[str, float]:
    """Open-loop arrivals at `rate`; one sequential client, as one kube-scheduler."""
    n = int(rate * seconds)
    reqs = bodies(names, n, seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    lat = []
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter() + 0.1
    for i, b in enumerate(reqs):
        due = t0 + i / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        post(conn, "filter", b)
        post(conn, "prioritize", b)
        lat.append(time.perf_counter() - due)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    conn.close()
    return {"pods": n, "achieved_pods_s": n / elapsed, "pod_p50": pct(lat, 50),
            "pod_p99": pct(lat, 99), "server_cpu_ms_per_pod": 1000 * cpu / n,
            "cpu_bound_pods_s": n / cpu if cpu > 0 else float("inf")}


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/extender_latency.md")
    a = ap.parse_args()
    load0 = os.getloadavg()
    nodes, pods = synthetic_cluster(a.nodes, seed=0)
    names = [n["metadata"]["name"] for n in nodes]
    inproc = [in_process(nodes, pods, a.requests, seed) for seed in range(a.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot.json"
        snap.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List",
                                       "items": nodes + pods}))
        proc, port = start_server(snap)
        try:
            http_runs = [over_http(port, names, a.requests, 10 + s) for s in range(a.runs)]
            sus_runs = [sustained(port, names, a.rate, a.seconds, 20 + s, proc.pid)
                        for s in range(a.runs)]
        finally:
            proc.terminate()
            proc.wait(10)
    load1 = os.getloadavg()
    m = {**median_of(inproc), **median_of(http_runs), **median_of(sus_runs)}
    verdict = {
        "in-process prioritize p99 <= 10 ms": m["prio_p99"] <= 10,
        "HTTP prioritize p99 <= 30 ms": m["http_prio_p99"] <= 30,
        f"sustains {a.rate:.0f} pods/s (filter+prioritize)": m["achieved_pods_s"] >= 0.98 * a.rate,
        # what the rate depends on when the machine is shared: < half of a core at that rate
        "server CPU per pod <= 2.5 ms (HTTP included)": m["server_cpu_ms_per_pod"] <= 2.5,
    }
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    lines = [
        "# Extender latency: prioritize / filter over a 5,000-node cluster",
        "",
        f"- command: `nice .venv/bin/python bench/extender_latency.py --nodes {a.nodes} "
        f"--requests {a.requests} --rate {a.rate:g} --seconds {a.seconds:g} --runs {a.runs}`",
        f"- machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; load average {load0[0]:.1f} at start, "
        f"{load1[0]:.1f} at end (the machine is shared: wall times include waiting for a core)",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- cluster: {a.nodes} nodes (1-8 GPUs), {len(pods)} bound pods, ~58% of GPU milli "
        "allocated; pods drawn from a mix of 0.25/0.5 GPU shares and 1/2/4/8 whole GPUs; every "
        "request is nodeCacheCapable with all node names; no models (fallback scoring, FGD "
        "fragmentation and packing active)",
        f"- medians over {a.runs} runs; {a.requests} pods per latency run, "
        f"{a.rate:g} pods/s for {a.seconds:g} s per sustained run",
        "",
        "| measure | p50 ms | p99 ms |",
        "|---|---|---|",
        f"| in process, prioritize (new pod), wall | {m['prio_p50']:.2f} | {m['prio_p99']:.2f} |",
        f"| in process, prioritize (new pod), CPU of the thread | {m['prio_cpu_p50']:.2f} | "
        f"{m['prio_cpu_p99']:.2f} |",
        f"| in process, filter + prioritize + bind into state, wall | {m['cycle_p50']:.2f} | "
        f"{m['cycle_p99']:.2f} |",
        f"| HTTP, prioritize, one keep-alive client | {m['http_prio_p50']:.2f} | "
        f"{m['http_prio_p99']:.2f} |",
        f"| HTTP, sustained: pod arrival to prioritize answer | {m['pod_p50']:.2f} | "
        f"{m['pod_p99']:.2f} |",
        "",
        f"Sustained: {m['achieved_pods_s']:.1f} pods/s achieved of {a.rate:g} offered "
        f"({m['pods']:.0f} pods per run, each a filter then a prioritize request). "
        f"The server process used {m['server_cpu_ms_per_pod']:.2f} ms of CPU per pod (HTTP "
        f"included), i.e. {m['cpu_bound_pods_s']:.0f} pods/s on one uncontended core; the "
        "client (which builds, sends and reads every body) runs on the same machine.",
        "",
        "| target | met |",
        "|---|---|",
        *[f"| {k} | {'yes' if v else 'NO'} |" for k, v in verdict.items()],
        "",
        "Per-run values: " + json.dumps({"in_process": inproc, "http": http_runs,
                                         "sustained": sus_runs}, separators=(",", ":")),
        "",
    ]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
