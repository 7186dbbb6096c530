"""Shared helpers of the replay benches: machine description and markdown output."""
from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB memory"
    except OSError:
        pass
    try:
        load = " (load avg %.1f %.1f %.1f: shared with other engineers)" % os.getloadavg()
    except OSError:
        load = ""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores{mem}{load}"


def header(title: str, command: str) -> list[str]:
    return [f"# {title}", "", f"- command: `{command}`", f"- machine: {machine()}",
            f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- python: {sys.version.split()[0]}", ""]


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
