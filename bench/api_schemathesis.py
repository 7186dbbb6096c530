"""Schemathesis against the live API's OpenAPI schema: no 5xx, no schema violations.

    nice .venv/bin/python bench/api_schemathesis.py [--max-examples 50]

Runs `st run` (examples, coverage and fuzzing phases) against `foresight serve --only all`
on loopback and writes bench/results/api_schemathesis.md with the command and its summary.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from api_setup import ROOT, build_inputs, free_port, load_avg, machine, start_server

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,negative_data_rejection")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-examples", type=int, default=50)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="api-st-"))
    inputs = build_inputs(work)
    port = free_port()
    proc = start_server(inputs, port)
    st = str(Path(sys.executable).with_name("st"))
    cmd = [st, "run", f"http://127.0.0.1:{port}/openapi.json", "--checks", CHECKS,
           "--max-examples", str(a.max_examples), "--workers", "1", "--seed", "1",
           "--phases", "examples,coverage,fuzzing", "--no-color"]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    finally:
        proc.terminate()
        proc.wait(10)
    wall = time.time() - t0
    out = r.stdout + r.stderr
    tail = "\n".join(out.strip().splitlines()[-400:])
    server_errors = len(re.findall(r"Server error", out))
    res = ROOT / "bench" / "results" / "api_schemathesis.md"
    res.write_text(
        f"# Schemathesis against the prediction API (OpenAPI at /openapi.json)\n\n"
        f"- command: `nice .venv/bin/python bench/api_schemathesis.py "
        f"--max-examples {a.max_examples}`\n"
        f"- runs: `{' '.join(['st'] + cmd[1:2] + ['<loopback>'] + cmd[3:])}` against "
        f"`foresight serve --only all` (registry from the training pipeline on a small "
        f"synthetic cluster, 16-node snapshot, demand series file)\n"
        f"- machine: {machine()}; load average at the end {load_avg()}\n"
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall {wall:.0f} s\n"
        f"- exit code: {r.returncode} (0 = every check passed); 'Server error' lines: "
        f"{server_errors}\n\n```\n{tail}\n```\n")
    print(tail)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
