"""Training from partitioned samples, node group by node group, equals the in-memory path."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from features.ingest import read_tables
from simulator.config import SimConfig
from simulator.partitioned import write_partitioned
from training import sources
from training.hygiene import clean_samples
from training.kinds import load_kind
from training.pipeline import TrainConfig, run
from training.streaming import streamed_features


@pytest.fixture(scope="module")
def parted(tmp_path_factory):
    root = tmp_path_factory.mktemp("parts")
    write_partitioned(SimConfig(seed=2, days=2.0, nodes=6, step_s=60.0, load=1.0,
                                mps_node_fraction=0.5, metrics=sources.TRAINING_METRICS), root)
    return root


def _both(root):
    streamed = sources.from_partitions(str(root))
    mem = copy.copy(streamed)
    mem.samples, mem.store = read_tables(root)["samples"], None
    return streamed, mem


def test_features_equal_in_memory(parted):
    streamed, mem = _both(parted)
    cfg = TrainConfig(group_gpus=4)  # 24 GPUs -> 6 groups
    builds, hyg, stages = streamed_features(streamed, cfg, ("fingerprint", "interference",
                                                            "usage"))
    assert stages["shard"] >= 0 and set(builds) == {"fingerprint", "interference", "usage"}
    mem.samples, hyg_mem = clean_samples(mem.samples, sources.TRAINING_METRICS)
    for k in ("rows_in", "rows_out", "nan_values", "duplicate_rows", "counter_resets",
              "missing_series", "gaps", "missing_metrics"):
        assert getattr(hyg, k) == getattr(hyg_mem, k), k
    a = load_kind("interference").prepare(mem, cfg)
    b = builds["interference"]()
    assert len(a["pairs"]) >= 30
    pd.testing.assert_frame_equal(a["pairs"], b["pairs"])
    pd.testing.assert_frame_equal(a["episodes"], b["episodes"])
    pd.testing.assert_frame_equal(a["solo"], b["solo"])  # every workload that ran alone
    a = load_kind("usage").prepare(mem, cfg)
    b = builds["usage"]()
    pd.testing.assert_frame_equal(a["series"], b["series"])
    a = load_kind("fingerprint").prepare(mem, cfg)
    b = builds["fingerprint"]()
    pd.testing.assert_frame_equal(a["jobs"], b["jobs"])
    pd.testing.assert_frame_equal(a["ws"].keys, b["ws"].keys)
    np.testing.assert_array_equal(a["ws"].ts, b["ws"].ts)
    np.testing.assert_array_equal(a["ws"].values, b["ws"].values)


def test_pipeline_equal_in_memory(parted, tmp_path):
    streamed, mem = _both(parted)
    cfg = TrainConfig(n_estimators=20, group_gpus=8)
    rs = run(streamed, str(tmp_path / "reg_s"), cfg)
    rm = run(mem, str(tmp_path / "reg_m"), cfg)
    assert "shard" in rs.stages and "shard" not in rm.stages
    for ks, km in zip(rs.kinds, rm.kinds):
        assert (ks.kind, ks.status) == (km.kind, km.status), ks.reason
        for m, v in km.metrics.items():
            if isinstance(v, float):
                assert ks.metrics[m] == pytest.approx(v, rel=1e-9, nan_ok=True), (ks.kind, m)


def test_partitions_hold_the_generated_history(tmp_path):
    from simulator.generate import generate_cluster

    cfg = dict(seed=5, days=1.5, nodes=2, step_s=120.0, metrics=sources.TRAINING_METRICS)
    info = write_partitioned(SimConfig(**cfg), tmp_path)
    c = generate_cluster(SimConfig(**cfg))
    t = read_tables(tmp_path)
    assert info["rows"] == len(c.samples) and info["partitions"] == 2 * 11
    key = ["metric", "ts", "uuid", "pod"]
    pd.testing.assert_frame_equal(t["samples"].sort_values(key, ignore_index=True),
                                  c.samples.sort_values(key, ignore_index=True))
    pd.testing.assert_frame_equal(t["pods"], c.pods)


def test_usage_long_on_codes_equals_string_keys(parted):
    """usage_long groups by integer codes; the string-key version it replaced gives the same
    series, from string columns and from categoricals (Parquet dictionaries) alike."""
    from features.demand_series import regularize
    from features.usage_series import usage_long

    s = read_tables(parted)["samples"]
    m = s[(s["metric"] == "DCGM_FI_PROF_SM_ACTIVE") & (s["pod"] != "")]
    uid = m["namespace"] + "/" + m["pod"] + "/" + m["node"] + "/" + m["gpu"]
    d = pd.DataFrame({"unique_id": uid.to_numpy(), "ds": m["ts"].dt.floor("2min").to_numpy(),
                      "y": m["value"].to_numpy()})
    d = d.groupby(["unique_id", "ds"], sort=True)["y"].mean().reset_index()
    ref = regularize(d, "2min", agg="mean")[["unique_id", "ds", "y"]]
    cats = s.astype({c: "category" for c in ("node", "gpu", "uuid", "namespace", "pod",
                                             "metric")})
    for table in (s, cats):
        pd.testing.assert_frame_equal(usage_long(table, "sm", "2min"), ref)
