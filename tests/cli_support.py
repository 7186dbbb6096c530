"""Helpers of the in-process CLI tests (test_cli_bad_paths.py and the other bad-input files)."""
from __future__ import annotations


def one_line(capsys, code: int, *needles: str) -> str:
    """The command failed (non-zero `code`) with exactly one line on stderr, no traceback,
    holding every needle; that line."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]
