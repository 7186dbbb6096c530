"""GPU-type-constrained variants of openb pod lists (simulator/replay/constrain.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.errors import ForesightError
from simulator.replay.constrain import constrain, generated_trace
from simulator.replay.data import load_trace

CSV = Path(__file__).resolve().parents[2] / "shared" / "traces" / "openb-2023" / "csv"


def _nodes() -> pd.DataFrame:
    # A: 2 GPUs and little CPU; B: 8 GPUs; C: in the reference mix but absent from the cluster
    return pd.DataFrame({"sn": ["a1", "a2", "b1"], "cpu_milli": [16000, 16000, 96000],
                         "memory_mib": [65536, 65536, 786432], "gpu": [2, 2, 8],
                         "model": ["A", "A", "B"]})


def _pods(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    num = rng.choice([0, 1, 1, 1, 2, 8], size=n)
    milli = np.where(num == 1, rng.choice([300, 500, 1000], size=n), np.where(num > 1, 1000, 0))
    cpu = np.where(rng.random(n) < 0.2, 32000, 4000)  # some pods too big for A's 16 CPUs
    return pd.DataFrame({"name": [f"p{i}" for i in range(n)], "cpu_milli": cpu,
                         "memory_mib": 1024, "num_gpu": num, "gpu_milli": milli})


def _reference() -> pd.DataFrame:
    # fractions and single GPUs: A or C; several GPUs: B
    return pd.DataFrame({"num_gpu": [1, 1, 1, 1, 8, 2], "gpu_milli": [500, 500, 1000, 1000,
                                                                      1000, 1000],
                         "gpu_spec": ["A", "C", "A", "A|B", "B", "B"], "cpu_milli": 1000,
                         "memory_mib": 1})


def test_share_determinism_and_only_hostable_specs_of_the_reference():
    pods, ref, nodes = _pods(), _reference(), _nodes()
    out = constrain(pods, 0.25, ref, nodes, seed=3)
    gpu = out[out.num_gpu > 0]
    assert abs(gpu.gpu_spec.notna().sum() - round(0.25 * len(gpu))) <= 0
    assert out[out.num_gpu == 0].gpu_spec.isna().all()  # CPU-only pods stay free
    specs = gpu.gpu_spec.dropna()
    assert set(specs) <= {"A", "A|B", "B"}  # C is not in the cluster: never drawn
    many = gpu[gpu.num_gpu > 2].gpu_spec.dropna()
    assert len(many) and (many == "B").all()  # A nodes have 2 GPUs; multi-GPU class draws B
    big_cpu = gpu[(gpu.cpu_milli > 16000)].gpu_spec.dropna()
    assert not (big_cpu == "A").any()  # A nodes lack the CPU
    frac = gpu[(gpu.gpu_milli < 1000) & (gpu.cpu_milli <= 16000)].gpu_spec.dropna()
    assert len(frac) and set(frac) <= {"A"}  # the reference's fraction class: A (C is absent)
    # a fraction that fits no A node falls back to the whole mix rather than staying free
    assert set(gpu[(gpu.gpu_milli < 1000) & (gpu.cpu_milli > 16000)].gpu_spec.dropna()) <= \
        {"A|B", "B"}
    pd.testing.assert_frame_equal(out, constrain(pods, 0.25, ref, nodes, seed=3))
    assert not out.gpu_spec.equals(constrain(pods, 0.25, ref, nodes, seed=4).gpu_spec)
    with pytest.raises(ForesightError):
        constrain(pods, 1.5, ref, nodes)


def test_existing_constraints_are_kept_and_share_only_grows():
    pods = _pods()
    pods["gpu_spec"] = np.where(np.arange(len(pods)) == 1, "B", None)
    if pods.loc[1, "num_gpu"] == 0:
        pods.loc[1, "num_gpu"], pods.loc[1, "gpu_milli"] = 1, 1000
    out10 = constrain(pods, 0.10, _reference(), _nodes())
    assert out10.loc[1, "gpu_spec"] == "B"
    out30 = constrain(pods, 0.30, _reference(), _nodes())
    assert out30.gpu_spec.notna().sum() > out10.gpu_spec.notna().sum()


@pytest.mark.skipif(not CSV.is_dir(), reason="needs ../shared/traces/openb-2023")
def test_generated_openb_variant_builds_on_gpuspec05():
    df = generated_trace("default-spec20", CSV)
    ref = pd.read_csv(CSV / "openb_pod_list_gpuspec05.csv")
    gpu = df.num_gpu > 0
    assert abs(df[gpu].gpu_spec.notna().mean() - 0.20) < 1e-3
    kept = ref.gpu_spec.notna()
    assert (df.loc[kept, "gpu_spec"] == ref.loc[kept, "gpu_spec"]).all()  # real ones kept
    assert set(df.gpu_spec.dropna()) <= set(ref.gpu_spec.dropna())
    assert generated_trace("default", CSV) is None
    assert (load_trace(CSV, "default-spec20").spec != "").sum() == df.gpu_spec.notna().sum()
