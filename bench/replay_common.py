"""Shared helpers of the replay benches: machine description and markdown output."""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from benchenv import machine  # noqa: E402




def header(title: str, command: str) -> list[str]:
    return [f"# {title}", "", f"- command: `{command}`", f"- machine: {machine()}",
            f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- python: {sys.version.split()[0]}", ""]


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
