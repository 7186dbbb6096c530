"""CLI sub-commands: every module here defines `register(app: typer.Typer) -> None`."""
from __future__ import annotations

from pathlib import Path

from ground.errors import ForesightError


def check_output(path: str | Path | None, option: str, *, directory: bool = False) -> None:
    """Refuse, before any work, an output path that can never be written: a directory where a
    file goes, a file where a directory goes, or a file among its parents. A missing parent
    is fine (the commands create it)."""
    if path is None:
        return
    p = Path(path)
    if directory and p.exists() and not p.is_dir():
        raise ForesightError(f"{option} {p} exists and is not a directory")
    if not directory and p.is_dir():
        raise ForesightError(f"{option} {p} is a directory: give a file path")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ForesightError(f"{option} {p}: {parent} is a file, not a directory")
