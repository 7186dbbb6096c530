"""The extender's co-location safety per sharing mode, with a model fit on the committed H200
measurement: a pod's `foresight.io/min-speed` is held to the model's p10 in the node's mode."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import pandas as pd

from artifacts.adapters import InterferenceAdapter
from features.h200 import load_h200_pairs
from forecaster.interference.model import InterferenceModel
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import SHARING_LABEL, ClusterState, parse_node
from scheduler_hook.wire import parse_args

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def adapter() -> InterferenceAdapter:
    # every committed H200 measurement: the shared set and the two later runs (data/h200b, m)
    pairs = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200b", "h200m")],
                      ignore_index=True)
    return InterferenceAdapter(InterferenceModel(n_estimators=40).fit(pairs))


def test_time_slicing_replicas_count_once_as_physical_gpus():
    # the device plugin advertises 2 GPUs x 4 replicas as nvidia.com/gpu: 8; GFD says 4
    n = make_node("ts", gpus=8, labels={SHARING_LABEL: "time-slicing",
                                        "nvidia.com/gpu.replicas": "4"})
    assert parse_node(n).gpu_count == 2
    assert parse_node(make_node("plain", gpus=8)).gpu_count == 8
    bad = make_node("odd", gpus=8, labels={"nvidia.com/gpu.replicas": "x"})
    assert parse_node(bad).gpu_count == 8  # an unreadable label changes nothing


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
    # a bf16 GEMM beside LLM-decode-like work: under MPS the GEMM holds the SMs and keeps
    # ~0.99 (measured), under time-slicing it gives up a slice per decode step (0.78)
    lo_ts = adapter.bounds("gemm_bf16", ["decode_gemv"], "timeslice")[0][0]
    lo_mps = adapter.bounds("gemm_bf16", ["decode_gemv"], "mps")[0][0]
    assert lo_ts + 0.1 < lo_mps
    asked = f"{(lo_ts + lo_mps) / 2:.2f}"
    out = _filter(adapter, "gemm_bf16", "decode_gemv", asked)
    assert out["NodeNames"] == ["mps"]
    assert "minimum speed" in out["FailedNodes"]["ts"] and "timeslice" in out["FailedNodes"]["ts"]
    # the decode job beside the GEMM: starved under MPS (0.08), a slice per step under
    # time-slicing (0.27): no node keeps 0.5; without an annotation both stay
    assert _filter(adapter, "decode_gemv", "gemm_bf16", "0.5")["NodeNames"] == []
    assert _filter(adapter, "decode_gemv", "gemm_bf16", "0")["NodeNames"] == ["ts", "mps"]


def test_refusal_names_the_bound_and_the_floor_of_the_side_it_breaks(adapter):
    lo_ts = adapter.bounds("gemm_bf16", ["decode_gemv"], "timeslice")[0][0]
    lo_mps = adapter.bounds("gemm_bf16", ["decode_gemv"], "mps")[0][0]
    asked = f"{(lo_ts + lo_mps) / 2:.2f}"
    msg = _filter(adapter, "gemm_bf16", "decode_gemv", asked)["FailedNodes"]["ts"]
    assert "of the pod" in msg and f"under its floor {asked}" in msg
    # a resident's own floor: the decode job asked 0.5 and no node keeps it beside a GEMM
    st = ClusterState()
    st.replace_all([make_node("mps", gpus=1, labels={SHARING_LABEL: "mps"})],
                   [make_pod("r", fraction=0.5, node="mps", workload="decode_gemv",
                             phase="Running", annotations={"foresight.io/min-speed": "0.5"})])
    prov = ProviderSet()
    prov.set("interference", adapter)
    pod = make_pod("p", fraction=0.5, workload="gemm_bf16")
    out = ExtenderHook(st, prov, load_config()).filter(
        parse_args(json.dumps({"Pod": pod, "NodeNames": ["mps"]}).encode()))
    assert out["NodeNames"] == []
    assert "of a resident" in out["FailedNodes"]["mps"]
    assert "under its floor 0.50 (mps sharing)" in out["FailedNodes"]["mps"]
