"""Load a published version directory into the estimators of forecaster/, by kind.

One place that knows each kind's files, so the retraining job (which writes them), the API and
the extender (which read them) cannot disagree. LightGBM text and JSON only: nothing loaded
here can run code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The demand kind's forecast mix of pod shapes, published beside the model files.
SHAPE_MIX_FILE = "shape_mix.json"
KINDS = ("fingerprint", "interference", "demand", "usage", "runtime")


@dataclass
class Bundle:
    """The fingerprint kind: per-workload fingerprints and the new-job predictor."""

    fingerprints: object  # forecaster.fingerprint.model.FingerprintModel (None when loaded w/o it)
    predictor: object  # forecaster.fingerprint.predict.NewJobPredictor


def best_baseline(metrics: dict) -> tuple[str, float] | None:
    """The kind's best baseline on the backtest window: (name, value) of the lowest
    `baseline_<name>_<primary>` entry, or None when the kind reports none."""
    p = metrics.get("primary", "mae")
    found = [(k[len("baseline_"):-len(p) - 1], float(v)) for k, v in metrics.items()
             if k.startswith("baseline_") and k.endswith(f"_{p}") and isinstance(v, (int, float))
             and v == v]
    return min(found, key=lambda kv: kv[1]) if found else None


def load_model(kind: str, path: str | Path) -> Any:
    """The model of `kind` from a version directory (as Registry.fetch returns it)."""
    path = Path(path)
    if kind == "interference":
        from forecaster.interference.model import InterferenceModel

        return InterferenceModel.load(path)
    if kind == "demand":
        from forecaster.demand.model import DemandForecaster

        model = DemandForecaster.load(path)
        f = path / SHAPE_MIX_FILE  # absent in versions published before the mix was
        model.shape_mix_ = json.loads(f.read_text()) if f.is_file() else None
        return model
    if kind == "fingerprint":
        from forecaster.fingerprint.model import FingerprintModel
        from forecaster.fingerprint.predict import NewJobPredictor

        return Bundle(FingerprintModel.load(path / "fingerprints.json"),
                      NewJobPredictor.load(path / "predictor"))
    if kind == "usage":
        from forecaster.usage.model import UsageForecaster

        return UsageForecaster.load(path)
    if kind == "runtime":
        from forecaster.runtime.model import RuntimePredictor

        return RuntimePredictor.load(path)
    raise ValueError(f"unknown model kind {kind!r}: one of {', '.join(KINDS)}")
