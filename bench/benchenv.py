"""What every benchmark result records about the machine it ran on, and the header and error
helpers of the benches that read a trace (`--trace`)."""
from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the trace benches' errors are the project's own
    sys.path.insert(0, str(ROOT))
from ground.errors import ForesightError  # noqa: E402


def machine() -> str:
    """Cores, memory, platform, Python, and the load average (these machines are shared)."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} cores, {mem:.0f} GiB memory, {platform.machine()}, "
            f"{platform.platform()}, Python {platform.python_version()}; load average {load} "
            f"(1/5/15 min; shared machine: other processes compete for the cores)")


#: What a missing or malformed trace raises while it is read (pandas' parse errors are
#: ValueErrors): reported on one line, not as a traceback.
READ_ERRORS = (ForesightError, OSError, ValueError, KeyError, TypeError)


def shown(path: str | Path) -> str:
    """`path` as a results header shows it: `shared/...` for the shared data beside the
    checkout (the committed files' form), relative to the checkout inside it, else absolute."""
    p = Path(os.path.abspath(path))
    for base, root in ((ROOT.parent / "shared", ROOT.parent), (ROOT, ROOT)):
        if p.is_relative_to(base):
            return str(p.relative_to(root))
    return str(p)


def command(script: str, default_args: str = "") -> str:
    """The command as run, for the results header (`default_args` when run without any)."""
    args = shlex.join(sys.argv[1:]) or default_args
    return f"nice .venv/bin/python bench/{script}" + (f" {args}" if args else "")


def fail(script: str, path: str | Path, err: BaseException) -> NoReturn:
    """Exit non-zero with one line naming the trace (pandas' messages can span lines)."""
    msg = f"missing column {err}" if isinstance(err, KeyError) else " ".join(str(err).split())
    sys.exit(f"{script}: cannot use {path}: {msg or type(err).__name__}")
