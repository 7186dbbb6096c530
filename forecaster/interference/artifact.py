"""Reading and writing an InterferenceModel: boosters as LightGBM text, the rest in a
checksummed manifest.json (schemas 1-4 load; a manifest never makes us read another path)."""
from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING

import lightgbm as lgb

from ground.errors import ForesightError
from forecaster.interference.familiar import Familiarity
from forecaster.interference.identity import IdentityEncoder
from forecaster.interference.mechanism import SharingMechanism

if TYPE_CHECKING:
    from forecaster.interference.model import InterferenceModel

SCHEMA_VERSION = 4
# 1: p10 from a quantile booster (p10.txt); 2: conformal margin on point; 3: + mechanism part;
# 4: + the margin's learned scale (scale.txt)
_SCHEMAS = (1, 2, 3, 4)


def save_model(model: "InterferenceModel", path: str | Path) -> Path:
    """Write the model's boosters and manifest (checksummed) to `path`."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"point.txt": model.point_.model_to_string()}
    if getattr(model, "plain_", None) is not None:
        texts["plain.txt"] = model.plain_.model_to_string()
    if model.p10_ is not None:
        texts["p10.txt"] = model.p10_.model_to_string()
    if model.scale_ is not None:
        texts["scale.txt"] = model.scale_.model_to_string()
    for name, text in texts.items():
        (out / name).write_text(text)
    body = {
        "schema_version": SCHEMA_VERSION if model.p10_ is None else 1,
        "kind": "interference",
        "params": {k: getattr(model, k) for k in (
            "n_estimators", "learning_rate", "num_leaves", "min_child_samples", "alpha",
            "n_folds", "use_identity", "mechanism", "mps_form", "ts_form", "margin",
            "admit_risk", "admit_margin", "n_threads", "seed")},
        "mechanism": model.mechanism_.to_json() if model.mechanism_ is not None else None,
        "band_offsets": model.band_offsets_, "base": model.base_, "solo": model.solo_,
        "scale_q": model.scale_q_, "scale_q_mode": model.scale_q_mode_,
        "admit_q": getattr(model, "admit_q_", {}),
        "familiar": model.familiar_.to_json() if getattr(model, "familiar_", None) else None,
        "blend": model.blend_,
        "features": model.feature_names_, "side_features": model.side_features_,
        "categories": model.categories_, "identity": model.identity_,
        "encoder": model.encoder_.to_json() if model.encoder_ is not None else None,
        "conformal_offset": model.offset_, "speed_cap": model.cap_, "metrics": model.metrics_,
        "files": {n: hashlib.sha256(t.encode()).hexdigest() for n, t in texts.items()},
    }
    body["checksum"] = _digest(body)
    (out / "manifest.json").write_text(json.dumps(body, indent=1, sort_keys=True))
    return out


def load_model(cls: type, path: str | Path) -> "InterferenceModel":
    """Read a model written by save_model (schemas 1-4), checking every checksum."""
    src = Path(path)
    try:
        body = json.loads((src / "manifest.json").read_text())
    except FileNotFoundError:
        raise ForesightError(f"no manifest.json in model directory {src}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ForesightError(f"manifest.json in {src} is not valid JSON") from None
    if not isinstance(body, dict) or body.get("kind") != "interference":
        raise ForesightError(f"{src} does not hold an interference model")
    if body.get("schema_version") not in _SCHEMAS:
        raise ForesightError(f"interference model schema {body.get('schema_version')!r} "
                             f"is not supported (expected one of {_SCHEMAS})")
    if body.get("checksum") != _digest({k: v for k, v in body.items() if k != "checksum"}):
        raise ForesightError(f"manifest.json in {src} fails its checksum (tampered?)")
    texts = {}
    files = body.get("files") or {}
    # only the known file names: a manifest never makes us read another path
    for name in ["point.txt"] + (["p10.txt"] if body["schema_version"] == 1 else []) \
            + [n for n in ("scale.txt", "plain.txt") if n in files]:
        try:
            texts[name] = (src / name).read_text()
        except (FileNotFoundError, UnicodeDecodeError):
            raise ForesightError(f"model file {name} missing or unreadable in {src}") from None
        if hashlib.sha256(texts[name].encode()).hexdigest() != files.get(name):
            raise ForesightError(f"model file {name} in {src} fails its checksum (tampered?)")
    known = inspect.signature(cls).parameters  # schema 1 had a calib_fraction
    m = cls(**{k: v for k, v in body["params"].items() if k in known})
    if "admit_margin" not in body["params"]:  # saved when the bound was scaled
        m.admit_margin = "scaled"
    if "ts_form" not in body["params"]:  # saved when time-slicing had one form
        m.ts_form = "busy"
    m.point_ = lgb.Booster(model_str=texts["point.txt"])
    m.plain_ = lgb.Booster(model_str=texts["plain.txt"]) if "plain.txt" in texts else None
    m.p10_ = lgb.Booster(model_str=texts["p10.txt"]) if "p10.txt" in texts else None
    m.scale_ = lgb.Booster(model_str=texts["scale.txt"]) if "scale.txt" in texts else None
    m.scale_q_ = float(body.get("scale_q", 0.0))
    m.scale_q_mode_ = {k: float(v) for k, v in body.get("scale_q_mode", {}).items()}
    # saved before the admission bound: the gate holds minimum speeds to the p10
    m.admit_q_ = {mode: {f: float(q) for f, q in per.items()}
                  for mode, per in (body.get("admit_q") or {}).items()}
    fam = body.get("familiar")  # saved before the support check: every side familiar
    m.familiar_ = Familiarity.from_json(fam) if fam else None
    m.feature_names_ = body["features"]
    m.side_features_ = body["side_features"]
    m.categories_ = body["categories"]
    m.identity_ = body["identity"]
    m.encoder_ = IdentityEncoder.from_json(body["encoder"]) if body["encoder"] else None
    m.offset_ = body["conformal_offset"]
    mech = body.get("mechanism")  # schema < 3: no structured part
    m.mechanism_ = SharingMechanism.from_json(mech) if mech else None
    if "mps_form" not in body["params"]:  # saved before the MPS forms had names
        m.mps_form = m.mechanism_.mps_form if m.mechanism_ else "priority"
    m.band_offsets_ = body.get("band_offsets") or {}
    m.blend_ = body.get("blend", "residual")
    m.base_ = float(body.get("base", 0.0))
    m.solo_ = body.get("solo") or {}
    m.cap_ = float(body.get("speed_cap", 2.0))  # schema 1 clipped at the contract's 2
    m.metrics_ = body["metrics"]
    return m


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
