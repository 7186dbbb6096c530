"""Shared helpers of the replay benches: machine description and markdown output."""
from __future__ import annotations

import hashlib
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchenv import machine  # noqa: E402
from simulator.replay.constrain import GENERATED, REFERENCE  # noqa: E402


def input_digest(csv_dir: Path, trace: str) -> str | None:
    """sha256 (16 hex) of the files a replay of `trace` reads, None where one is absent: the
    run caches key on it, so a different pod list under a cached name is replayed, not
    answered from the cache."""
    m = GENERATED.match(trace)
    names = [m["base"], REFERENCE] if m else [trace]
    paths = [csv_dir / f"openb_pod_list_{n}.csv" for n in names]
    paths.append(csv_dir / "openb_node_list_gpu_node.csv")
    if not all(p.is_file() for p in paths):
        return None
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def current_runs(runs: list[dict], csv_dir: Path) -> list[dict]:
    """The cached runs made on the files now under `csv_dir` (all of them where the files
    are absent: a table rebuilt without ../shared)."""
    digests = {t: input_digest(csv_dir, t) for t in {r["trace"] for r in runs}}
    return [r for r in runs if digests[r["trace"]] in (None, r.get("digest"))]


def header(title: str, command: str) -> list[str]:
    return [f"# {title}", "", f"- command: `{command}`", f"- machine: {machine()}",
            f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- python: {sys.version.split()[0]}", ""]


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
