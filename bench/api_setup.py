"""Shared set-up of the API benches: a small published registry, a cluster snapshot, a demand
series, and a `foresight serve` process on loopback."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd

from benchenv import machine  # noqa: F401 - re-exported to the API benches

ROOT = Path(__file__).resolve().parents[1]


def load_avg() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg()) + " (1/5/15 min)"


def build_inputs(work: Path) -> dict[str, Path]:
    """Registry (training pipeline, small synthetic cluster), snapshot, demand series."""
    from scheduler_hook.fake_kube import make_node, make_pod
    from training import sources
    from training.pipeline import TrainConfig, run

    work.mkdir(parents=True, exist_ok=True)
    reg = work / "registry"
    if not reg.exists():
        run(sources.synthetic(seed=0, days=2.5, nodes=2), str(reg),
            TrainConfig(holdout=pd.Timedelta("18h"), n_estimators=40, threads=1,
                        demand_freq="1h", demand_horizon=3))
    items = [make_node(f"n{i}", gpus=8) for i in range(16)]
    items += [make_pod(f"r{i}", gpus=1, node=f"n{i % 16}", phase="Running",
                       workload="resnet50-template") for i in range(24)]
    snap = work / "snapshot.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    series = work / "demand.csv"
    pd.DataFrame([{"unique_id": q, "ds": d, "y": float((i % 24) * k)}
                  for q, k in (("dev", 1.0), ("research", 0.3)) for i, d in enumerate(ds)]
                 ).to_csv(series, index=False)
    return {"registry": reg, "snapshot": snap, "series": series}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(inputs: dict[str, Path], port: int, extra: list[str] | None = None
                 ) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "foresight.cli", "serve", "--only", "all",
           "--registry", str(inputs["registry"]), "--snapshot", str(inputs["snapshot"]),
           "--demand-series", str(inputs["series"]), "--port", str(port),
           "--host", "127.0.0.1", "--log-level", "warning", *(extra or [])]
    proc = subprocess.Popen(cmd, cwd=ROOT)
    deadline = time.time() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError("server did not become ready")
        time.sleep(0.2)
