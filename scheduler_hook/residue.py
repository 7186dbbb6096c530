"""How well a GPU's free milli can still be filled: the residue term of Foresight's placement
(issue 13, session 6), used by the extender's fragmentation score and the openb replay.

FGD's measure counts, for each shape of the mix, the free milli that the shape cannot use. It
does not ask how well a residue can still be *filled*. On `default-spec20` (dev seed 0,
bench/results/replay_packing_bound.md) FGD-style greed put 650-milli pods beside a lone 230
(120 milli left, which no common size fills) where first-fit decreasing pairs 650 with 320 (30
left) and packs the 220-230s together. ``TerminalWaste`` gives, for every residue r, the least
milli that r keeps free when filled only with the mix's common GPU-fraction sizes (an
unbounded-knapsack DP); a fraction then pays for the terminal waste its placement adds
(`fragmentation.residue_weight` in the extender's config, `Foresight.residue_weight` in the
replay).
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.fragmentation import ShapeMix

STEP = 10  # milli: every GPU fraction in the openb traces is a multiple of 10


class TerminalWaste:
    """W(r) for r = 0..1000 milli from the common fraction sizes of a shape mix.

    A size is common when its share of the mix's GPU fractions (by frequency) is at least
    ``share``: rare sizes would make almost every residue look fillable.
    """

    def __init__(self, share: float = 0.05) -> None:
        self.share = share
        self.sizes_: tuple[int, ...] | None = None
        self.table_ = np.arange(1000 // STEP + 1, dtype=float) * STEP

    def fit(self, mix: ShapeMix) -> "TerminalWaste":
        frac = (mix.num_gpu == 1) & (mix.gpu_milli > 0) & (mix.gpu_milli < 1000)
        freq: dict[int, float] = {}
        for g, f in zip(mix.gpu_milli[frac], mix.freq[frac]):
            freq[int(g)] = freq.get(int(g), 0.0) + float(f)
        total = sum(freq.values()) or 1.0
        sizes = tuple(sorted(g // STEP for g, f in freq.items() if f / total >= self.share))
        if sizes != self.sizes_:  # the DP only reruns when the common sizes change
            w = np.arange(1000 // STEP + 1, dtype=float) * STEP
            for r in range(len(w)):
                for s in sizes:
                    if 0 < s <= r:
                        w[r] = min(w[r], w[r - s])
            self.sizes_, self.table_ = sizes, w
        return self

    def __call__(self, free: np.ndarray) -> np.ndarray:
        """W of each free-milli value (clipped to 0..1000, floored to the step)."""
        return self.table_[np.clip(free, 0, 1000) // STEP]

    def added(self, free: np.ndarray, milli: int) -> np.ndarray:
        """Terminal waste a fraction of ``milli`` adds on each GPU of ``free`` (same shape);
        meaningless where it does not fit (callers mask those slots)."""
        return self(free - milli) - self(free)
