"""End-to-end check of `foresight train --prometheus-url` against a real Prometheus.

Run: nice .venv/bin/python bench/train_prometheus.py
Writes bench/results/train_prometheus.md.

Generates a small synthetic history ending now, backfills it into a TSDB with promtool, starts
the real `prometheus` binary on it (tests/promserver.py), runs the CLI twice (first publish,
then a rerun on the same data) and once more with Prometheus stopped (must exit 2 and leave the
registry untouched).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from features.openmetrics import backfill, write_openmetrics  # noqa: E402
from promserver import PrometheusServer  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402
from training.sources import TRAINING_METRICS  # noqa: E402

FORESIGHT = str(ROOT / ".venv" / "bin" / "foresight")


def tree(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def main() -> None:
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = pd.Timestamp.now(tz="UTC").floor("h") - pd.Timedelta(days=2, hours=12)
        c = generate_cluster(SimConfig(seed=5, start=start, days=2.5, step_s=60, nodes=2,
                                       load=1.0, metrics=TRAINING_METRICS))
        write_openmetrics(root / "h.om", samples=c.samples, pods=c.pods, queues=c.queues,
                          pod_step_s=600)
        t0 = time.perf_counter()
        backfill(root / "h.om", root / "tsdb")
        lines.append(f"- synthetic history: {len(c.samples):,} GPU samples, {len(c.pods)} pods, "
                     f"2.5 d x 8 GPUs at 60 s; promtool backfill {time.perf_counter() - t0:.0f} s")
        reg = root / "reg"
        with PrometheusServer(root / "tsdb", retention="15d") as server:
            for label in ("first run", "rerun, same data"):
                cmd = [FORESIGHT, "train", "--prometheus-url", server.url, "--since", "2d",
                       "--step", "60", "--holdout", "12h", "--registry", str(reg),
                       "--out", str(root / "out")]
                t0 = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True)
                doc = json.loads((root / "out" / "metrics.json").read_text()) if p.returncode == 0 else {}
                status = {k: (v["status"], v["reason"][:60]) for k, v in doc.get("kinds", {}).items()}
                lines.append(f"- {label}: exit {p.returncode} in {time.perf_counter() - t0:.0f} s; "
                             f"hygiene {doc.get('hygiene', {}).get('rows_in', 0):,} rows, "
                             f"kinds {status}")
                if p.returncode:
                    lines.append(f"  - stderr: `{p.stderr.strip()[-300:]}`")
            url = server.url
        before = tree(reg)
        p = subprocess.run([FORESIGHT, "train", "--prometheus-url", url, "--since", "2d",
                            "--registry", str(reg), "--out", str(root / "out2")],
                           capture_output=True, text=True)
        lines.append(f"- Prometheus stopped: exit {p.returncode}, stderr `{p.stderr.strip()}`, "
                     f"registry unchanged: {tree(reg) == before}")
    text = ("# `foresight train --prometheus-url` against a real Prometheus\n\n"
            f"- command: `nice .venv/bin/python bench/train_prometheus.py`\n"
            f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n" + "\n".join(lines) + "\n")
    (ROOT / "bench" / "results" / "train_prometheus.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
