"""The H200 co-location measurement (`colocate.py`'s solo.csv + pairs.csv) as a pair table.

Each side's solo features are that workload's solo window in the same sharing mode; its step
time (`step_s`) is 1 / the solo window's rate (steps per second), the one signal the mechanism
part of the interference model needs that DCGM does not carry. A cluster gets it from the
progress counter's rate (features.pair_build), which is a mean: so it is the mean step here
too, not colocate.py's median step (`step_median_s`, used only where a window has no rate), so
that a model trained on these measurements reads the step a cluster serves it.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from features.pair_build import starved_speed
from ground.errors import ForesightError

#: colocate.py's telemetry column -> the pair table's solo feature.
SOLO_COLUMNS = {"util_gpu": "gpu_util", "util_mem": "mem_copy_util", "power_w": "power_w",
                "fb_used_mib": "fb_used_mib", "gpm_sm_active": "sm_active",
                "gpm_sm_occupancy": "sm_occupancy", "gpm_tensor_active": "tensor_active",
                "gpm_dram_active": "dram_active"}
#: colocate.py's GPM columns (DCGM_FI_PROF_* in a cluster): optional
PROFILING = tuple(c for c in SOLO_COLUMNS if c.startswith("gpm_"))
_MODES = {"timeslice": "timeslice", "mps": "mps"}
#: pairs.csv columns read (its telemetry columns describe the pair, not the solo sides)
PAIR_COLUMNS = ("mode", "a", "b", "speed_a", "speed_b")
#: colocate.py's measured window (s) when env.json does not say
MEASURE_S = 3.0
STARVED = ("midpoint", "drop")


def load_h200_pairs(root: str | Path, gpu_model: str | None = None,
                    starved: str = "midpoint") -> pd.DataFrame:
    """Pair table (a_/b_ solo features, sharing, a_speed, b_speed) from a colocate.py output dir;
    `gpu_model` by default from its env.json ("NVIDIA H200" -> "H200"), H200 without one.

    A side that completed no step in its window (colocate.py writes speed 0) ran at most
    1 / (solo rate x window) of its solo speed (zero_step_bounds). Where that bound is under 1
    the window is the strongest evidence of interference there is, and `starved="midpoint"`
    reads it as half the bound (the middle of what the window allows); before, every such
    window was dropped, so a model never learned that a workload starves, not even after
    seeing it (data/h200j: a detection server completed no step beside any of its seven
    partners under time-slicing). A bound of 1 or more says nothing: missing, as with
    `starved="drop"`."""
    if starved not in STARVED:
        raise ValueError(f"starved must be one of {STARVED}, not {starved!r}")
    root = Path(root)
    gpu_model = gpu_model or _gpu_name(root)
    sp, pp = root / "solo.csv", root / "pairs.csv"
    try:
        solo, pairs = pd.read_csv(sp), pd.read_csv(pp)
    except FileNotFoundError as exc:
        raise ForesightError(f"co-location measurement incomplete: {exc.filename} missing") from None
    # the profiling fields may be absent (a GPU without GPM, a tool that writes NVML only):
    # missing values, which the model reads as a cluster without DCGM_FI_PROF_* fields
    _columns(solo, ("mode", "workload", *(c for c in SOLO_COLUMNS if c not in PROFILING),
                    "step_median_s"), sp)
    solo = solo.assign(**{c: np.nan for c in PROFILING if c not in solo})
    _columns(pairs, PAIR_COLUMNS, pp)
    solo = _numbers(solo, [*SOLO_COLUMNS, "step_median_s", "rate"], sp)
    pairs = _numbers(pairs, ["speed_a", "speed_b"], pp)
    twice = solo.duplicated(["mode", "workload"], keep=False).to_numpy()
    if twice.any():  # which window would a pair's side read?
        i = np.flatnonzero(twice)[:2]
        raise ForesightError(f"{sp}: {solo['workload'].iloc[i[0]]} is measured twice in mode "
                             f"{solo['mode'].iloc[i[0]]} (lines {i[0] + 2} and {i[1] + 2})")
    known = pairs["mode"].isin(_MODES).to_numpy()
    if not known.all():
        odd = ", ".join(sorted(map(str, set(pairs["mode"][~known]))))
        if not known.any():
            raise ForesightError(f"{pp}: no pair in a known sharing mode (mode {odd}; known: "
                                 f"{', '.join(sorted(_MODES))})")
        warnings.warn(f"{pp}: ignoring {int((~known).sum())} pair(s) of unknown sharing mode "
                      f"{odd} (known: {', '.join(sorted(_MODES))})", stacklevel=2)
    rate = solo["rate"] if "rate" in solo else None
    median = solo["step_median_s"]
    solo = solo.rename(columns=SOLO_COLUMNS).assign(
        step_s=median if rate is None else (1.0 / rate.where(rate > 0)).fillna(median))
    solo = solo.set_index(["mode", "workload"])
    feats = [*SOLO_COLUMNS.values(), "step_s"]
    pairs = pairs[known].reset_index(drop=True)
    out = pd.DataFrame({"a_workload": pairs["a"], "b_workload": pairs["b"],
                        "gpu_model": gpu_model, "sharing": pairs["mode"].map(_MODES),
                        "a_speed": pairs["speed_a"], "b_speed": pairs["speed_b"]})
    alone = np.zeros(len(pairs), bool)
    for side in ("a", "b"):
        keys = pd.MultiIndex.from_arrays([pairs["mode"], pairs[side]])
        alone |= ~keys.isin(solo.index)
        vals = solo.reindex(keys)[feats].reset_index(drop=True)
        for f in feats:
            out[f"{side}_{f}"] = vals[f].to_numpy(float)
    if alone.any():  # still a model (names and trees), but not the one the solo windows give
        gone = sorted(set(pairs.loc[alone, "a"]) | set(pairs.loc[alone, "b"]))
        warnings.warn(f"{sp}: {int(alone.sum())} of {len(pairs)} pair(s) have a side with no "
                      f"solo window (workloads {', '.join(map(str, gone[:6]))}"
                      f"{', ...' if len(gone) > 6 else ''}): those sides carry no solo "
                      "features, which the sharing mechanism needs", stacklevel=2)
    # a window that measured nothing (rate 0 -> speed NaN/0) is not a measurement, unless
    # its bound says the side was slowed
    bounds = zero_step_bounds(root, pairs, solo["rate"] if "rate" in solo else None) \
        if starved == "midpoint" else {}
    for side in ("a", "b"):
        c = f"{side}_speed"
        keys = zip(pairs["mode"], pairs[side], pairs["b" if side == "a" else "a"])
        ub = np.array([bounds.get(k, np.nan) for k in keys], float)
        zero = ~(out[c] > 0)
        out[c] = np.where(zero, starved_speed(ub), out[c])
    return out


def zero_step_bounds(root: str | Path, pairs: pd.DataFrame | None = None,
                     rate: pd.Series | None = None) -> dict[tuple[str, str, str], float]:
    """(mode, self, partner) -> the most its speed can have been, for each side of a measured
    pair that completed no step in its window (speed 0 in pairs.csv): under
    1 / (solo rate x window), e.g. 0.33 for a job of one step a second in a 3 s window.
    `pairs` and `rate` ((mode, workload) -> steps per second) are read from `root` when not
    given; the window from env.json (`measure_s`, MEASURE_S without one)."""
    root = Path(root)
    if pairs is None:
        pairs = pd.read_csv(root / "pairs.csv")
    if rate is None:
        solo = pd.read_csv(root / "solo.csv")
        if "rate" not in solo:
            return {}
        rate = solo.set_index(["mode", "workload"])["rate"]
    window = MEASURE_S
    try:
        window = float(json.loads((root / "env.json").read_text()).get("measure_s", MEASURE_S))
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # no env.json: colocate.py's default window
    out = {}
    for r in pairs.itertuples(index=False):
        for me, other, v in ((r.a, r.b, r.speed_a), (r.b, r.a, r.speed_b)):
            solo_rate = rate.get((r.mode, me), np.nan)
            if v == 0 and solo_rate > 0 and window > 0:
                out[(r.mode, me, other)] = 1.0 / (solo_rate * window)
    return out


def _columns(df: pd.DataFrame, need: tuple[str, ...], path: Path) -> None:
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ForesightError(f"{path}: missing column {', '.join(missing)}")


def _numbers(df: pd.DataFrame, cols: list[str], path: Path) -> pd.DataFrame:
    """`cols` (those present) as floats; a value that is not a number is refused by its
    line (blanks and nan are missing values, as colocate.py writes them)."""
    for c in [c for c in cols if c in df.columns]:
        num = pd.to_numeric(df[c], errors="coerce")
        bad = (num.isna() & df[c].notna()).to_numpy()
        if bad.any():
            i = int(bad.argmax())
            raise ForesightError(f"{path}: column {c} has non-numeric value "
                                 f"{df[c].iloc[i]!r} on line {i + 2}")
        neg = (num < 0).to_numpy()  # speeds, rates and DCGM fields are all >= 0
        if neg.any():
            i = int(neg.argmax())
            raise ForesightError(f"{path}: column {c} has negative value {df[c].iloc[i]} on "
                                 f"line {i + 2}")
        df[c] = num.astype(float)
    return df


def _gpu_name(root: Path) -> str:
    """The GPU colocate.py recorded in env.json, without the vendor prefix; H200 when absent."""
    try:
        name = json.loads((root / "env.json").read_text()).get("gpu")
    except (OSError, ValueError, AttributeError):
        return "H200"  # no or unreadable env.json: the measurement still stands
    return name.strip().removeprefix("NVIDIA ").strip() if isinstance(name, str) and \
        name.strip() else "H200"
