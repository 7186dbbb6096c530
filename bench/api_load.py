"""Load benchmark of the prediction API: a load generator process against `foresight serve`.

    nice .venv/bin/python bench/api_load.py [--seconds 20] [--rate 200] [--runs 3]

The server (`foresight serve --only all`, one uvicorn worker) and this load generator are two
processes on loopback. Single predictions run open-loop at --rate requests/s (requests leave
on a fixed schedule whatever the answers do, and latency counts from the scheduled send time,
so a stalled server cannot hide its queue: no coordinated omission). The 1,000-pair
interference batch runs closed-loop, one request at a time. Medians over --runs runs go to
bench/results/api_load.md together with the load average (the machine is shared).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import numpy as np
import psutil

from api_setup import ROOT, build_inputs, free_port, load_avg, machine, start_server

PAIR = {"a_workload": "bert-template", "b_workload": "resnet50-template", "sharing": "mps",
        "a_sm_active": 0.6, "b_sm_active": 0.4}


def single_cases(run: int) -> dict[str, tuple[str, str, bytes | None | list]]:
    from scheduler_hook.fake_kube import make_pod

    pod = make_pod("incoming", gpus=1, workload="bert-template")
    return {
        "POST /v1/interference (1 pair)": ("POST", "/v1/interference",
                                           json.dumps({"pairs": [PAIR]}).encode()),
        "POST /v1/interference (1 pair, unique rows: cache misses)": (
            "POST", "/v1/interference",
            [json.dumps({"pairs": [{**PAIR, "a_sm_active": float(x)}]}).encode()
             for x in np.random.default_rng(100 + run).uniform(0, 1, 20_000)]),  # new per run
        "POST /v1/fingerprint": ("POST", "/v1/fingerprint", json.dumps(
            {"image": "registry.example/bert:1.0", "gpu_request": 1, "queue": "research"}
        ).encode()),
        "GET /v1/demand?queue=dev": ("GET", "/v1/demand?queue=dev", None),
        "POST /v1/score (16 nodes)": ("POST", "/v1/score", json.dumps(
            {"pod": pod, "nodes": [f"n{i}" for i in range(16)]}).encode()),
    }


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) the server process has used so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def open_loop(url: str, method: str, path: str, body: bytes | None | list, rate: float,
                    seconds: float, pid: int) -> dict:
    """`body` may be a list of bodies: request i sends body[i % len] (cache-miss cases)."""
    n = int(rate * seconds)
    bodies = body if isinstance(body, list) else [body]
    body = bodies[0]
    lat = np.full(n, np.nan)
    codes: list[int] = []
    conn = aiohttp.TCPConnector(limit=256)
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(url, connector=conn) as s:
        for _ in range(20):  # warm-up: connections, first-call caches
            async with s.request(method, path, data=body, headers=headers) as r:
                await r.read()
        cpu0 = server_cpu(pid)
        t0 = time.perf_counter() + 0.05

        async def one(i: int) -> None:
            due = t0 + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            data = bodies[(i + 1) % len(bodies)]  # [0] was used by the warm-up
            async with s.request(method, path, data=data, headers=headers) as r:
                await r.read()
                codes.append(r.status)
            lat[i] = time.perf_counter() - due

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - t0
        cpu = server_cpu(pid) - cpu0
    ok = sum(c == 200 for c in codes)
    return {"n": n, "ok": ok, "achieved_rps": n / wall, "cpu_ms": 1e3 * cpu / n,
            "p50_ms": float(np.nanpercentile(lat, 50) * 1e3),
            "p99_ms": float(np.nanpercentile(lat, 99) * 1e3)}


async def closed_loop(url: str, path: str, bodies: list[bytes], n: int, pid: int) -> dict:
    lat = []
    async with aiohttp.ClientSession(url) as s:
        for i in range(n + 5):
            if i == 5:
                cpu0 = server_cpu(pid)
            t = time.perf_counter()
            async with s.post(path, data=bodies[i], headers={"content-type": "application/json"}) as r:
                await r.read()
                assert r.status == 200, r.status
            if i >= 5:  # first few: warm-up
                lat.append(time.perf_counter() - t)
    cpu = server_cpu(pid) - cpu0
    a = np.asarray(lat) * 1e3
    return {"n": n, "cpu_ms": 1e3 * cpu / n, "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch-requests", type=int, default=50)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "api_load.md"))
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="api-load-"))
    inputs = build_inputs(work)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(inputs, port)
    rng = np.random.default_rng(1)  # distinct rows (across runs too): the batch measures the model, not the cache
    batch = [json.dumps({"pairs": [{**PAIR, "a_sm_active": float(x)} for x in
                                   rng.uniform(0, 1, 1000)]}).encode()
             for _ in range(a.runs * (a.batch_requests + 5))]
    per: dict[str, list[dict]] = {}
    loads = []
    try:
        for run in range(a.runs):
            for name, (method, path, body) in single_cases(run).items():
                r = asyncio.run(open_loop(url, method, path, body, a.rate, a.seconds, proc.pid))
                per.setdefault(name, []).append(r)
                print(run, name, r, flush=True)
            k = a.batch_requests + 5
            r = asyncio.run(closed_loop(url, "/v1/interference", batch[run * k:(run + 1) * k],
                                        a.batch_requests, proc.pid))
            per.setdefault("POST /v1/interference (1,000 distinct pairs, closed loop)", []).append(r)
            print(run, "batch", r, flush=True)
            loads.append(load_avg())
    finally:
        proc.terminate()
        proc.wait(10)
    lines = [
        "# Prediction API under load (loopback, separate load-generator process)", "",
        f"- command: `nice .venv/bin/python bench/api_load.py --seconds {a.seconds:g} "
        f"--rate {a.rate:g} --runs {a.runs}`",
        "- server: `foresight serve --only all` (one uvicorn worker; registry from the "
        "training pipeline on a small synthetic cluster, 16-node snapshot, demand series file)",
        f"- machine: {machine()}",
        f"- load average after each run: {'; '.join(loads)}",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- single predictions: open loop at {a.rate:g} req/s for {a.seconds:g} s per route, "
        "latency from the scheduled send time; batch: closed loop, "
        f"{a.batch_requests} requests per run. Medians over {a.runs} runs.", "",
        "| route | requests/run | non-200 | achieved req/s | p50 ms | p99 ms | server CPU ms/req |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for name, rs in per.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        bad = sum(r["n"] - r.get("ok", r["n"]) for r in rs)
        rps = f"{med('achieved_rps'):.0f}" if "achieved_rps" in rs[0] else "-"
        lines.append(f"| {name} | {rs[0]['n']} | {bad} | {rps} | {med('p50_ms'):.1f} | "
                     f"{med('p99_ms'):.1f} | {med('cpu_ms'):.2f} |")
    lines += ["", "Per run (p99 ms): " + "; ".join(
        n + ": " + ", ".join(f"{r['p99_ms']:.1f}" for r in rs) for n, rs in per.items())]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
