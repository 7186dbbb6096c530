"""GenAI trace loader (the fixture, its errors, the dev trace's fixed held-out pod rule) and
the per-pod-GPU binning of usage series."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.usage_series import usage_long

FIXTURE = Path(__file__).parent / "fixtures" / "genai"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "genai-2026-dev"


def test_genai_loader_bins_the_fixture():
    from features.genai_trace import read_genai, read_genai_metric

    d = read_genai_metric(FIXTURE, "duty_cycle")
    raw = pd.read_csv(FIXTURE / "pod_gpu_duty_cycle_dev.csv")
    assert set(d["unique_id"]) == set(raw["container_ip"])
    assert list(d.columns) == ["unique_id", "ds", "y"]
    for uid, g in d.groupby("unique_id"):
        # a regular 1-min grid from the first to the last sample's bin
        assert (g["ds"].diff().dropna() == pd.Timedelta("1min")).all()
        r = raw[raw["container_ip"] == uid]
        first = pd.to_datetime(r["timestamp_anon"].min(), unit="s", utc=True).floor("1min")
        assert g["ds"].iloc[0] == first
        # 57 s samples leave some bins empty: those carry the level, never invent one
        assert set(np.round(g["y"], 9)) <= set(np.round(
            r.assign(b=pd.to_datetime(r["timestamp_anon"], unit="s").dt.floor("1min"))
            .groupby("b")["value"].mean(), 9))
    assert d["y"].between(0, 100).all()
    mem = read_genai_metric(FIXTURE, "memory_used")
    assert mem["y"].max() > 1e9  # bytes, unchanged


def test_genai_loader_errors(tmp_path):
    from features.genai_trace import read_genai, read_genai_metric
    from foresight.errors import ForesightError

    with pytest.raises(ForesightError, match="not found"):
        read_genai(tmp_path / "nope.csv")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ForesightError, match="need columns"):
        read_genai(tmp_path / "x.csv")
    with pytest.raises(ForesightError, match="unknown genai metric"):
        read_genai_metric(tmp_path, "qps")


def test_final_pod_rule_is_fixed():
    import hashlib

    from features.genai_trace import final_pod

    ids = [f"{i:032x}" for i in range(400)]
    share = np.mean([final_pod(i) for i in ids])
    assert 0.25 < share < 0.37  # 5/16 in expectation
    for i in ids[:20]:
        assert final_pod(i) == (hashlib.md5(i.encode()).hexdigest()[0] in "01234")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces/genai-2026-dev is absent")
def test_genai_dev_trace_split():
    from features.genai_trace import final_pod, read_genai_metric

    d = read_genai_metric(SHARED, "duty_cycle")
    ids = d["unique_id"].unique()
    assert len(ids) == 80
    assert sum(final_pod(i) for i in ids) == 23  # the committed split: 23 final, 57 tune


def test_usage_long_bins_per_pod_gpu():
    ts = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.arange(8) * 30, "s")
    s = pd.DataFrame({"ts": np.r_[ts, ts], "node": "n", "gpu": np.repeat(["0", "1"], 8),
                      "uuid": "u", "namespace": "ns", "pod": np.repeat(["a", ""], 8),
                      "metric": "DCGM_FI_PROF_SM_ACTIVE", "value": np.arange(16.0)})
    out = usage_long(s, "sm", "1min")
    assert list(out["unique_id"].unique()) == ["ns/a/n/0"]
    np.testing.assert_allclose(out["y"], [0.5, 2.5, 4.5, 6.5])
