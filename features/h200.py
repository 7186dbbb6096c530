"""The H200 co-location measurement (`colocate.py`'s solo.csv + pairs.csv) as a pair table.

Each side's solo features are that workload's solo window in the same sharing mode; its step
time (`step_s`) is 1 / the solo window's rate (steps per second), the one signal the mechanism
part of the interference model needs that DCGM does not carry. A cluster gets it from the
progress counter's rate (features.pair_build), which is a mean: so it is the mean step here
too, not colocate.py's median step (`step_median_s`, used only where a window has no rate), so
that a model trained on these measurements reads the step a cluster serves it.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ground.errors import ForesightError

#: colocate.py's telemetry column -> the pair table's solo feature.
SOLO_COLUMNS = {"util_gpu": "gpu_util", "util_mem": "mem_copy_util", "power_w": "power_w",
                "fb_used_mib": "fb_used_mib", "gpm_sm_active": "sm_active",
                "gpm_sm_occupancy": "sm_occupancy", "gpm_tensor_active": "tensor_active",
                "gpm_dram_active": "dram_active"}
_MODES = {"timeslice": "timeslice", "mps": "mps"}


def load_h200_pairs(root: str | Path, gpu_model: str | None = None) -> pd.DataFrame:
    """Pair table (a_/b_ solo features, sharing, a_speed, b_speed) from a colocate.py output dir;
    `gpu_model` by default from its env.json ("NVIDIA H200" -> "H200"), H200 without one."""
    root = Path(root)
    gpu_model = gpu_model or _gpu_name(root)
    try:
        solo, pairs = pd.read_csv(root / "solo.csv"), pd.read_csv(root / "pairs.csv")
    except FileNotFoundError as exc:
        raise ForesightError(f"co-location measurement incomplete: {exc.filename} missing") from None
    missing = [c for c in ("mode", "workload", *SOLO_COLUMNS, "step_median_s") if c not in solo]
    if missing:
        raise ForesightError(f"{root / 'solo.csv'} lacks column {missing[0]!r}")
    rate = pd.to_numeric(solo["rate"], errors="coerce") if "rate" in solo else None
    median = pd.to_numeric(solo["step_median_s"], errors="coerce")
    solo = solo.rename(columns=SOLO_COLUMNS).assign(
        step_s=median if rate is None else (1.0 / rate.where(rate > 0)).fillna(median))
    solo = solo.set_index(["mode", "workload"])
    feats = [*SOLO_COLUMNS.values(), "step_s"]
    pairs = pairs[pairs["mode"].isin(_MODES)].reset_index(drop=True)
    out = pd.DataFrame({"a_workload": pairs["a"], "b_workload": pairs["b"],
                        "gpu_model": gpu_model, "sharing": pairs["mode"].map(_MODES),
                        "a_speed": pairs["speed_a"], "b_speed": pairs["speed_b"]})
    for side in ("a", "b"):
        keys = pd.MultiIndex.from_arrays([pairs["mode"], pairs[side]])
        vals = solo.reindex(keys)[feats].reset_index(drop=True)
        for f in feats:
            out[f"{side}_{f}"] = vals[f].to_numpy(float)
    # a window that measured nothing (rate 0 -> speed NaN/0) is not a measurement
    for c in ("a_speed", "b_speed"):
        out.loc[~(out[c] > 0), c] = float("nan")
    return out


def _gpu_name(root: Path) -> str:
    """The GPU colocate.py recorded in env.json, without the vendor prefix; H200 when absent."""
    import json

    try:
        name = json.loads((root / "env.json").read_text()).get("gpu")
    except (OSError, ValueError, AttributeError):
        return "H200"  # no or unreadable env.json: the measurement still stands
    return name.strip().removeprefix("NVIDIA ").strip() if isinstance(name, str) and \
        name.strip() else "H200"
