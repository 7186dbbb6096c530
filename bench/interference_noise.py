"""The noise of one colocate.py window: directed speeds of a measurement, and how far two
measurements of the same pair lie apart (bench/interference_h200.py's repeats line,
bench/interference_repeat.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from features.h200 import load_h200_pairs  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402

KEY = ["sharing", "self", "partner"]


def directed_speeds(root: str) -> pd.Series:
    """Measured speed per (sharing, self, partner) of one colocate.py directory; a window
    with no step is left out (it bounds a speed, it does not measure one)."""
    d = directed(load_h200_pairs(root, starved="drop"))
    d = d.rename(columns={"self_workload": "self", "partner_workload": "partner"})
    return d.set_index(KEY)["y"].dropna()


def repeats(sets: list[str]) -> str:
    """How far one 3 s window is from another of the same pair (data/h200m repeats pairs of
    the other sets; a set's `repeat/` is the whole set run again): the noise floor under any
    margin."""
    again = [str(Path(x) / "repeat") for x in sets if (Path(x) / "repeat" / "pairs.csv").is_file()]
    ys = [directed_speeds(x) for x in sets + again]
    diffs = []
    for i, a in enumerate(ys):
        for b in ys[i + 1:]:
            j = pd.concat([a, b], axis=1, join="inner").dropna()
            diffs.append((j.iloc[:, 0] - j.iloc[:, 1]).abs())
    dif = pd.concat(diffs) if diffs else pd.Series(dtype=float)
    if dif.empty:
        return ""
    return (f"Directed speeds measured twice (the same pair and mode in two sets, or a set run "
            f"twice): {len(dif)}; "
            f"|difference| median {dif.median():.3f}, mean {dif.mean():.3f}, p90 "
            f"{dif.quantile(0.9):.3f}, max {dif.max():.3f}.")
