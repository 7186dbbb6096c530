"""CLI sub-commands: every module here defines `register(app: typer.Typer) -> None`."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ground.errors import ForesightError


# what matplotlib's savefig writes, by suffix: anything else fails after the work is done
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".tif", ".tiff", ".webp",
                  ".eps", ".ps", ".pgf")


def check_output(path: str | Path | None, option: str, *, directory: bool = False,
                 inputs: Mapping[str, str | Path | Sequence[str | Path] | None] | None = None,
                 image: bool = False, model: str | None = None) -> None:
    """Refuse, before any work, an output path that can never be written: a directory where a
    file goes, a file where a directory goes, or a file among its parents. A missing parent
    is fine (the commands create it). `inputs` ({option: path}) are the command's inputs: an
    output that is one of them, an existing file inside an input directory, or a directory
    holding an input, is refused, so that a slip of the keyboard never overwrites the data the
    command reads. `image`: a suffix matplotlib can write. `model`: the directory is a model
    of that kind; one that holds anything else (another kind, other files) is refused."""
    if path is None:
        return
    p = Path(path)
    given = [(name, src) for name, v in (inputs or {}).items()
             for src in (v if isinstance(v, (list, tuple)) else [v])]  # repeatable options
    for name, src in given:
        if src is None or not p.exists():
            continue
        s, q = Path(src).resolve(), p.resolve()
        if q == s or (s.is_dir() and not directory and s in q.parents) or \
                (directory and q in s.parents):
            raise ForesightError(f"{option} {p} would overwrite the input given as {name}: "
                                 "write elsewhere")
    if model is not None and p.is_dir() and any(p.iterdir()):
        _check_model_dir(p, option, model)
    if directory and p.exists() and not p.is_dir():
        raise ForesightError(f"{option} {p} exists and is not a directory")
    if not directory and p.is_dir():
        raise ForesightError(f"{option} {p} is a directory: give a file path")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ForesightError(f"{option} {p}: {parent} is a file, not a directory")
    if image and p.suffix.lower() not in IMAGE_SUFFIXES:
        raise ForesightError(f"{option} {p}: an image path ends in one of "
                             f"{', '.join(IMAGE_SUFFIXES[:4])}, ...")
    # Can anything be created there? Asked now, not after an hour of work. A probe, because
    # access() says yes to root on read-only mounts and pseudo file systems.
    where = p if directory and p.is_dir() else parent
    if where is not None:
        try:
            fd, probe = tempfile.mkstemp(prefix=".foresight-probe-", dir=where)
        except OSError as exc:
            raise ForesightError(f"{option} {p}: cannot write in {where} "
                                 f"({exc.strerror or exc})") from None
        os.close(fd)
        os.unlink(probe)


def one_source(options: Mapping[str, Path | None]) -> tuple[str, Path]:
    """The one option of `options` given, and its path (which must exist); a user error when
    none or several are given."""
    given = {k: Path(v) for k, v in options.items() if v is not None}
    if len(given) != 1:
        raise ForesightError(f"give exactly one of {', '.join(options)}")
    (option, path), = given.items()
    if not path.exists():
        raise ForesightError(f"{option} {path}: not found")
    return option, path


def format_error(option: str, path: Path, exc: Exception) -> ForesightError:
    """One line for a file of another format than `option` reads (pandas' messages, a missing
    column's KeyError)."""
    msg = f"missing column {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
    return ForesightError(f"{option} {path}: {msg}")


def _check_model_dir(p: Path, option: str, kind: str) -> None:
    """An existing, non-empty model directory is replaced only when it holds a model of the
    same kind (the earlier run's); anything else there is not ours to overwrite."""
    import json

    try:
        found = json.loads((p / "manifest.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        found = None
    if found != kind:
        what = f"a {found} model" if found else "other files"
        raise ForesightError(f"{option} {p} holds {what}, not a {kind} model: give a new or "
                             "empty directory")


def distinct_outputs(outputs: Mapping[str, str | Path | None]) -> None:
    """Two output options naming one path: the second write would destroy the first."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        q = Path(path).resolve()
        if q in seen:
            raise ForesightError(f"{seen[q]} and {option} both name {path}: give two paths")
        seen[q] = option
