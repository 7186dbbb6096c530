"""Fingerprints keyed by one label (the job template), pods named by another (their workload):
the extender's memory fit and power scores must find a pod's fingerprint by the name it asks."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from artifacts.adapters import FingerprintAdapter
from forecaster.fingerprint.model import FingerprintModel, workload_aliases


def test_aliases_map_a_workload_to_its_only_fingerprint_key():
    pods = pd.DataFrame({"namespace": "ns", "pod": [f"p{i}" for i in range(6)],
                         "workload": ["bert", "bert", "mixed", "mixed", "same", ""]})
    keys = pd.Series(["bert-template", "bert-template", "t1", "t2", "same", "orphan"])
    # "mixed" has two templates (ambiguous), "same" is its own key, "" names nothing
    assert workload_aliases(pods, keys) == {"bert": "bert-template"}


def _fp(peak: float, power: float) -> dict:
    return {"peak_fb_mib": {"p95": peak},
            "phases": {"compute": {"time_share": 1.0, "power_w": power}}}


def test_the_adapter_answers_by_workload_name_and_the_artifact_keeps_the_aliases(tmp_path):
    m = FingerprintModel()
    m.fingerprints_ = {"bert-template": _fp(20000.0, 250.0)}
    m.aliases_ = {"bert": "bert-template", "gone": "no-such-template"}
    m.save(tmp_path / "fp.json")
    loaded = FingerprintModel.load(tmp_path / "fp.json")
    assert loaded.aliases_ == m.aliases_
    fa = FingerprintAdapter(SimpleNamespace(fingerprints=loaded,
                                            predictor=SimpleNamespace(center_={}, q_key_={})))
    assert fa.peak_fb_mib(["bert", "bert-template"]).tolist() == [20000.0, 20000.0]
    assert fa.power_w(["bert"]).tolist() == [250.0]
    assert np.isnan(fa.peak_fb_mib(["gone", "other"])).all()
    # an artifact saved before aliases existed loads with none
    doc = (tmp_path / "fp.json").read_text().replace('"aliases"', '"unused"')
    (tmp_path / "old.json").write_text(doc)
    assert FingerprintModel.load(tmp_path / "old.json").aliases_ == {}
