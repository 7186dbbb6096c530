"""The one check every reader of a user's input file makes first."""
from __future__ import annotations

from pathlib import Path

from ground.errors import ForesightError


def input_file(path: str | Path, what: str, give: str = "the file",
               error: type[Exception] = ForesightError) -> Path:
    """`path` as a Path when it is a file; else one line naming `what`: a directory given
    where a file goes (say what to `give` instead), or nothing there."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{what} {p} is a directory: give {give}")
    if not p.is_file():
        raise error(f"{what} not found: {p}")
    return p
