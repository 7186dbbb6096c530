"""The extender's co-location safety per sharing mode, with a model fit on the committed H200
measurement: a pod's `foresight.io/min-speed` is held to the model's p10 in the node's mode."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from artifacts.adapters import InterferenceAdapter
from features.h200 import load_h200_pairs
from forecaster.interference.model import InterferenceModel
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import SHARING_LABEL, ClusterState, parse_node
from scheduler_hook.wire import parse_args

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"


@pytest.fixture(scope="module")
def adapter() -> InterferenceAdapter:
    return InterferenceAdapter(InterferenceModel(n_estimators=40).fit(load_h200_pairs(H200)))


def test_node_sharing_mode_comes_from_the_gfd_label():
    assert parse_node(make_node("a", labels={SHARING_LABEL: "mps"})).sharing == "mps"
    assert parse_node(make_node("b", labels={SHARING_LABEL: "time-slicing"})).sharing == \
        "timeslice"
    assert parse_node(make_node("c")).sharing == "timeslice"  # the device plugin's default


def _filter(adapter, pending: str, resident: str, min_speed: str) -> dict:
    st = ClusterState()
    st.replace_all([make_node("ts", gpus=1, labels={SHARING_LABEL: "time-slicing"}),
                    make_node("mps", gpus=1, labels={SHARING_LABEL: "mps"})],
                   [make_pod(f"r-{n}", fraction=0.5, node=n, workload=resident, phase="Running")
                    for n in ("ts", "mps")])
    prov = ProviderSet()
    prov.set("interference", adapter)
    hook = ExtenderHook(st, prov, load_config())
    pod = make_pod("p", fraction=0.5, workload=pending,
                   annotations={"foresight.io/min-speed": min_speed})
    return hook.filter(parse_args(json.dumps({"Pod": pod, "NodeNames": ["ts", "mps"]}).encode()))


def test_min_speed_is_held_to_the_p10_of_the_nodes_own_sharing_mode(adapter):
    # inference beside a launch-bound job: MPS runs both at once (p10 above 0.8), time-slicing
    # makes it wait out the other's slices (below)
    lo_ts = adapter.bounds("transformer_infer", ["small_kernels"], "timeslice")[0][0]
    lo_mps = adapter.bounds("transformer_infer", ["small_kernels"], "mps")[0][0]
    assert lo_ts < 0.8 <= lo_mps
    out = _filter(adapter, "transformer_infer", "small_kernels", "0.8")
    assert out["NodeNames"] == ["mps"]
    assert "minimum speed" in out["FailedNodes"]["ts"] and "timeslice" in out["FailedNodes"]["ts"]
    # LLM-decode-like work beside a bf16 GEMM: starved under MPS, waits a slice per step under
    # time-slicing: no node keeps 0.8; without an annotation both stay
    assert _filter(adapter, "decode_gemv", "gemm_bf16", "0.8")["NodeNames"] == []
    assert _filter(adapter, "decode_gemv", "gemm_bf16", "0")["NodeNames"] == ["ts", "mps"]
