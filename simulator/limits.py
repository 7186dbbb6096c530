"""How large a generated history may be: checked before anything is generated or written, by
every command that generates one (simulate, demo, train --synthetic)."""
from __future__ import annotations

import math

from ground.errors import ForesightError
from simulator.config import SimConfig

#: ~25 float grids of GPUs x steps are held in memory: 2e7 GPU-steps is ~4 GB
MAX_GPU_STEPS = 2e7
#: every arrival is a row drawn up front and a job the cluster simulation places (a few ms
#: each); the GPU-step bound alone lets a huge --load ask for billions of them
MAX_ARRIVALS = 1e6


def check_size(cfg: SimConfig) -> None:
    """A one-line error (naming the options) for a history too large to generate."""
    if cfg.days * 86400 / cfg.step_s * cfg.n_gpus > MAX_GPU_STEPS:
        raise ForesightError("that history is too large (> 20 M GPU-steps, ~4 GB of memory): "
                             "use fewer --days or --nodes (simulate: or a longer --step)")
    from simulator.arrivals import jobs_per_hour

    hours = math.ceil(cfg.warmup_hours) + math.ceil(cfg.days * 24)  # as arrival_hours
    expected = jobs_per_hour(cfg) * hours
    if expected > MAX_ARRIVALS:
        raise ForesightError(f"--load {cfg.load:g}: ~{expected:.3g} job arrivals expected "
                             f"(> {MAX_ARRIVALS:.0e}): use a lower --load, fewer --days or "
                             "fewer GPUs")
