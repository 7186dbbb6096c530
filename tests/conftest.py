"""Fixtures shared by test files: the small published registry the API tests read."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Path:
    """Every kind published by the training pipeline on a small synthetic cluster (~15 s)."""
    from training import sources
    from training.pipeline import TrainConfig, run

    reg = tmp_path_factory.mktemp("reg") / "registry"
    res = run(sources.synthetic(seed=0, days=2.5, nodes=2), str(reg),
              TrainConfig(holdout=pd.Timedelta("18h"), n_estimators=40, threads=1,
                          demand_freq="1h", demand_horizon=3))
    assert {k.kind: k.status for k in res.kinds}["interference"] == "published"
    return reg


@pytest.fixture()
def reg_copy(registry, tmp_path) -> Path:
    dst = tmp_path / "registry"
    shutil.copytree(registry, dst)
    return dst
