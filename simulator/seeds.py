"""Read the committed seed files (data/seeds/*.json) that hold the trace-derived magnitudes."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

SEED_DIR = Path(os.environ.get("FORESIGHT_SEED_DIR",
                               Path(__file__).resolve().parents[1] / "data" / "seeds"))


@lru_cache(maxsize=None)
def load_seed(name: str) -> dict:
    """Return the parsed seed file `name` (e.g. "power.json"); a clear error if absent."""
    path = SEED_DIR / name
    if not path.is_file():
        from ground.errors import ForesightError

        raise ForesightError(f"seed file missing: {path} (run python -m simulator.derive_seeds)")
    return json.loads(path.read_text())
