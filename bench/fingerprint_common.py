"""Shared bits of the fingerprint/usage benches: machine line, markdown table, cluster cache."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from benchenv import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))




def header(title: str, command: str, extra: list[str] | None = None) -> list[str]:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = "?"
    return [f"# {title}", "", f"- command: `{command}`", f"- machine: {machine()}",
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; git {rev}",
            *[f"- {e}" for e in (extra or [])], ""]


def table(rows: list[dict], cols: list[str] | None = None, fmt: str = "{:.3f}") -> list[str]:
    if not rows:
        return ["(no rows)"]
    cols = cols or list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(fmt.format(r[c]) if isinstance(r[c], float) else str(r[c])
                                     for c in cols) + " |")
    return out
