"""The Dask path (lightgbm.dask on a LocalCluster) gives models of the same quality as local."""
from __future__ import annotations

import copy

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from forecaster.demand.model import DemandForecaster  # noqa: E402
from forecaster.interference.model import InterferenceModel  # noqa: E402
from foresight.errors import ForesightError  # noqa: E402
from training import sources  # noqa: E402
from training.dask_fit import connect  # noqa: E402
from training.kinds import load_kind  # noqa: E402
from training.pipeline import TrainConfig, run  # noqa: E402
from artifacts.registry import Registry  # noqa: E402

CFG = dict(holdout=pd.Timedelta("18h"), n_estimators=40, threads=1, demand_freq="1h",
           demand_horizon=3, kinds=("interference", "demand", "usage"))


@pytest.fixture(scope="module")
def client():
    # one worker: LightGBM's network layer is per process, so two in-process workers would share it
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def history() -> sources.History:
    return sources.synthetic(seed=0, days=2.5, nodes=2)


def test_dask_path_matches_local_quality_and_publishes_loadable_models(client, history, tmp_path):
    local = {k.kind: k for k in run(copy.copy(history), str(tmp_path / "a"),
                                     TrainConfig(**CFG)).kinds}
    dask = {k.kind: k for k in run(copy.copy(history), str(tmp_path / "b"),
                                   TrainConfig(**CFG, dask_client=client)).kinds}
    for kind in ("interference", "demand", "usage"):
        assert local[kind].status == dask[kind].status == "published", dask[kind].reason
        lm, dm = local[kind].metrics["mae"], dask[kind].metrics["mae"]
        # same data, same parameters: quality within 10% (the Dask trainer bins features per
        # partition, so the trees are not bit-identical)
        assert dm == pytest.approx(lm, rel=0.10), (kind, lm, dm)
        base = next(v for k, v in dask[kind].metrics.items() if k.startswith("baseline"))
        assert dm < base
    reg = Registry(tmp_path / "b")
    assert InterferenceModel.load(reg.fetch("interference")[0]).feature_names_
    m = DemandForecaster.load(reg.fetch("demand")[0])
    assert load_kind("demand").features(m)


def test_unreachable_scheduler_is_a_one_line_error() -> None:
    with pytest.raises(ForesightError, match="cannot reach the Dask scheduler"):
        connect("tcp://127.0.0.1:1", timeout_s=2)
