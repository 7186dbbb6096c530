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
        # <=: on this 2-day history demand may serve its baseline of record (equal MAE)
        assert dm <= base
    reg = Registry(tmp_path / "b")
    assert InterferenceModel.load(reg.fetch("interference")[0]).feature_names_
    m = DemandForecaster.load(reg.fetch("demand")[0])
    assert load_kind("demand").features(m)


def test_unreachable_scheduler_is_a_one_line_error() -> None:
    with pytest.raises(ForesightError, match="cannot reach the Dask scheduler"):
        connect("tcp://127.0.0.1:1", timeout_s=2)


def test_node_groups_as_dask_tasks_equal_the_local_pass(client, tmp_path):
    """--data with --dask-scheduler: each node group's features run as a Dask task, and the
    tables the kinds build from them equal the local pass's (same parts, same order)."""
    from simulator.config import SimConfig
    from simulator.partitioned import write_partitioned
    from training.streaming import streamed_features

    write_partitioned(SimConfig(seed=3, days=1.5, nodes=4, step_s=120.0, load=1.0,
                                mps_node_fraction=0.5, metrics=sources.TRAINING_METRICS), tmp_path)
    kinds = ("fingerprint", "interference", "usage")
    seen: list[tuple] = []
    local = streamed_features(sources.from_partitions(str(tmp_path)),
                              TrainConfig(group_gpus=4), kinds)
    with distributed.get_task_stream(client) as stream:
        on_dask = streamed_features(sources.from_partitions(str(tmp_path)),
                                    TrainConfig(group_gpus=4, dask_client=client), kinds,
                                    on_progress=lambda *a: seen.append(a))
    # one task per node group ran on the cluster's worker
    ran = [t for t in stream.data if str(t["key"]).startswith("group_features")]
    assert len(ran) == 4, [t["key"] for t in stream.data]
    groups = [a for a in seen if a[0] == "features by node group"]
    assert len(groups) == 4 and groups[-1][1] == groups[-1][2] == 4  # 16 GPUs / 4 per group
    assert groups[-1][3] == local[1].rows_in == on_dask[1].rows_in > 0
    assert on_dask[2]["interference.partial"] > 0
    for k in kinds:
        a, b = local[0][k](), on_dask[0][k]()
        for name in ("pairs", "episodes", "series", "jobs"):
            if name in a:
                pd.testing.assert_frame_equal(a[name], b[name])
