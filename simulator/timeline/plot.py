"""Allocation and queue length over time, one line per policy (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_timeline(series: dict[str, dict[str, np.ndarray]], path: Path | str,
                  title: str = "") -> None:
    """``series``: policy -> samples (t in s, alloc %, queue jobs); writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for name, s in series.items():
        keep = s["t"] >= 0
        days = s["t"][keep] / 86400
        a.plot(days, s["alloc"][keep], lw=0.8, label=name)
        b.plot(days, s["queue"][keep], lw=0.8, label=name)
    a.set_ylabel("GPU allocation (%)")
    b.set_ylabel("jobs queued")
    b.set_xlabel("day")
    a.legend(fontsize=8, ncol=3)
    if title:
        a.set_title(title, fontsize=10)
    fig.tight_layout()
    tmp = Path(str(path) + ".tmp.png")
    tmp.parent.mkdir(parents=True, exist_ok=True)  # as --out does
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
