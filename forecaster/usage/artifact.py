"""The usage forecaster's artifact: `model.txt` (LightGBM text), `still.txt` (the hurdle
classifier, when one validated) and `manifest.json`; never pickle."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightgbm as lgb
import pandas as pd

from forecaster.booster import LoadedBooster
from forecaster.manifest import ArtifactError, read_manifest

# 3: served predictor per series, validation scores, conformal quantiles per predictor and
# flat/moving origin, base ("none" or a baseline), physical range, time of day; 4: the hurdle
# classifier (`still.txt`).
SCHEMA_VERSION = 4
READS = (3, 4)


def save_usage(m: Any, path: str | Path) -> None:
    """Write a fitted (or loaded) UsageForecaster as `model.txt`, `still.txt` (the hurdle
    classifier, if one validated) and `manifest.json`."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    (p / "model.txt").write_text(m.model_.booster_.model_to_string())
    still = m.still_ if m.hurdle_ else None
    if hasattr(still, "booster_"):  # fitted or loaded: not the one-class constant
        (p / "still.txt").write_text(still.booster_.model_to_string())
    (p / "manifest.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "kind": "usage", "horizon": m.horizon,
        "base": m.base_,
        "features": m.features_, "quantiles": m.q_, "coverage": m.coverage,
        "ses_alpha": m.ses_alpha_, "ses_grid": list(m.ses_grid),
        "served": m.served_, "served_series": m.served_series_,
        "val_scores": m.val_scores_, "select": m.select,
        "time_of_day": m.time_of_day, "fleet": m.fleet, "drop": list(m.drop),
        "half_life": m.half_life, "y_min": m.y_min, "y_max": m.y_max_,
        "tune": list(m.tune), "params": m.params_,
        "recent_window": m.recent_window, "recent_scope": m.recent_scope,
        "recent_unit": m.recent_unit, "recent_z": m.recent_z,
        "recent_intervals": m.recent_intervals,
        "min_gain": m.min_gain,  # the re-pick applies it at each origin
        "train_end": m.train_end_.isoformat(),
        "bin_seconds": m.bin_.total_seconds() if getattr(m, "bin_", None) is not None
        else None,
        "phases": m.phases_, "phase_typical_bins": m.ph_typ_,
        "hurdle": m.hurdle, "hurdle_used": m.hurdle_,
        "still_constant": still if isinstance(still, float) else None}, indent=1))


def load_usage(cls: type, path: str | Path) -> Any:
    """A UsageForecaster (`cls`) from a directory `save_usage` wrote; schema versions in
    READS; a clear ArtifactError otherwise."""
    p = Path(path)
    man = read_manifest(p, None, "usage model")
    if man.get("schema_version") not in READS:
        raise ArtifactError(f"{p / 'manifest.json'}: usage model schema_version "
                            f"{man.get('schema_version')!r}, expected one of {READS} "
                            "(retrain it with this version)")
    m = cls(horizon=man["horizon"], ses_grid=tuple(man["ses_grid"]),
            coverage=man["coverage"], select=man["select"],
            time_of_day=man["time_of_day"], fleet=man["fleet"], drop=tuple(man["drop"]),
            half_life=man["half_life"], y_min=man["y_min"], y_max=man["y_max"],
            recent_window=man.get("recent_window"),
            recent_scope=man.get("recent_scope", "series"),
            recent_unit=man.get("recent_unit", "bins"), recent_z=man.get("recent_z", 0.0),
            recent_intervals=man.get("recent_intervals", False),
            min_gain=man.get("min_gain", 0.03), tune=tuple(man.get("tune", ())))
    m.params_ = man.get("params", {})
    m.bin_ = pd.Timedelta(seconds=man["bin_seconds"]) if man.get("bin_seconds") else None
    m.train_end_ = pd.Timestamp(man["train_end"]) if man.get("train_end") else None
    m.features_, m.q_, m.base_ = man["features"], man["quantiles"], man["base"]
    m.ses_alpha_, m.y_max_ = man["ses_alpha"], man["y_max"]
    m.served_, m.served_series_ = man["served"], man["served_series"]
    m.val_scores_ = man["val_scores"]
    m.phases_, m.ph_typ_ = man["phases"], man["phase_typical_bins"]
    m.model_ = LoadedBooster(lgb.Booster(model_file=str(p / "model.txt")))
    m.hurdle, m.hurdle_ = man.get("hurdle", False), man.get("hurdle_used", False)
    m.still_ = None
    if m.hurdle_:
        m.still_ = (man["still_constant"] if man.get("still_constant") is not None else
                    LoadedBooster(lgb.Booster(model_file=str(p / "still.txt"))))
    return m
