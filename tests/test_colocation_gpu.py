"""Several pods on one shared GPU: their delays add, the gate judges each GPU of a node, and
the binder takes a GPU where the floors hold (scheduler_hook/scores/colocation_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_hook.config import load_config
from scheduler_hook.engine import Scorer
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import ColocationSafety
from scheduler_hook.scores.base import Context
from scheduler_hook.scores.colocation_gpu import combined, delay, per_gpu, same_gpu_pairs
from scheduler_hook.state import ClusterState

GPU_INDEX = "foresight.io/gpu-index"


class Pairs:
    """Point speeds only (no p10): the point is the bound. (a, b) -> speed of a beside b."""

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table

    def speeds(self, workload, others, sharing):
        return (np.array([self.table.get((workload, o), np.nan) for o in others]),
                np.array([self.table.get((o, workload), np.nan) for o in others]))


def test_delays_add_three_busy_contexts_get_a_third_and_an_idle_partner_costs_nothing():
    # two always-busy contexts split a time-sliced GPU 1/2 each: three of them get 1/3
    assert combined(delay(np.array([0.5, 0.5])).sum()) == pytest.approx(1 / 3)
    # an idle partner (speed 1) or an unknown pair (NaN) adds no delay
    assert combined(delay(np.array([1.0, np.nan, 0.8])).sum()) == pytest.approx(0.8)
    # residents keyed row x 2 GPUs + GPU: 0 and 2 share row 0's GPU 0, 1 is alone on its
    # GPU 1, 3 and 4 share row 1's GPU 1 (key 3)
    key = np.array([0, 1, 0, 3, 3])
    assert per_gpu(key, np.array([1.0, 2.0, 4.0, 8.0, 16.0]), 2, 2).tolist() == \
        [[5.0, 2.0], [0.0, 24.0]]
    pairs = sorted(zip(*(x.tolist() for x in same_gpu_pairs(key))))
    assert pairs == [(0, 2), (2, 0), (3, 4), (4, 3)]


def _state(residents: list[tuple[str, int, str, str]], gpus: int = 2) -> ClusterState:
    """One node "n" of `gpus` GPUs; residents (name, GPU, workload, min-speed) at 0.25 each."""
    st = ClusterState()
    pods = [make_pod(name, fraction=0.25, node="n", workload=w, phase="Running",
                     annotations={GPU_INDEX: str(g), **({"foresight.io/min-speed": f}
                                                        if f else {})})
            for name, g, w, f in residents]
    st.replace_all([make_node("n", gpus=gpus, gpu_mem_mib=81920)], pods)
    st.ready = True
    return st


def _score(st: ClusterState, table: dict, floor: str = "0.8", **shape):
    prov = ProviderSet()
    prov.set("interference", Pairs(table))
    pod = parse_pod(make_pod("p", **(shape or {"fraction": 0.25}), workload="me",
                             annotations={"foresight.io/min-speed": floor} if floor else None))
    rows, _ = st.rows(["n"])
    ctx = Context(st, rows, pod, prov, load_config())
    return ColocationSafety().score(ctx), prov, pod


def test_two_residents_each_safe_alone_break_the_pods_floor_together():
    table = {("me", "x"): 0.85, ("me", "y"): 0.85, ("x", "me"): 1.0, ("y", "me"): 1.0}
    # both on GPU 0, nothing on GPU 1 of a 1-GPU node: 1 / (1 + 2 x 0.176) = 0.74 < 0.8
    res, _, _ = _score(_state([("rx", 0, "x", ""), ("ry", 0, "y", "")], gpus=1), table)
    assert res.violation.tolist() == [True]
    assert "every GPU" in res.violation_reason(0)
    # a share sized in GPU memory (KAI's gpu-memory) is judged the same way
    res, _, _ = _score(_state([("rx", 0, "x", ""), ("ry", 0, "y", "")], gpus=1), table,
                       gpu_memory_mib=20480)
    assert res.violation.tolist() == [True]
    # pairwise each is 0.85: one of them alone is safe
    res, _, _ = _score(_state([("rx", 0, "x", "")], gpus=1), table)
    assert res.violation.tolist() == [False]
    assert res.value[0] == pytest.approx((0.85 - 0.5) / 0.5)
    # no floor: scored by the combined speed, never refused
    res, _, _ = _score(_state([("rx", 0, "x", ""), ("ry", 0, "y", "")], gpus=1), table, "")
    assert res.violation.tolist() == [False]
    assert res.value[0] == pytest.approx((1 / (1 + 2 * (1 / 0.85 - 1)) - 0.5) / 0.5)


def test_a_crowded_gpu_does_not_refuse_the_node_and_the_binder_takes_the_safe_gpu():
    table = {("me", "x"): 0.85, ("me", "y"): 0.85, ("x", "me"): 1.0, ("y", "me"): 1.0}
    # GPU 0 holds x and y (0.74 together), GPU 1 holds x alone (0.85)
    st = _state([("rx", 0, "x", ""), ("ry", 0, "y", ""), ("rx2", 1, "x", "")])
    res, prov, pod = _score(st, table)
    assert res.violation.tolist() == [False]
    assert "GPU 1" in res.reason(0)
    # fragmentation alone fills the fuller GPU 0 (0.5 used vs 0.25): the floor moves it
    assert Scorer(st, ProviderSet(), load_config()).choose_gpus(pod, "n") == [0]
    assert Scorer(st, prov, load_config()).choose_gpus(pod, "n") == [1]


def test_a_residents_floor_counts_its_other_neighbours_too():
    # resident x (min-speed 0.8) already shares GPU 0 with y: 0.9 beside it
    base = {("x", "y"): 0.9, ("y", "x"): 1.0, ("me", "x"): 1.0, ("me", "y"): 1.0,
            ("y", "me"): 1.0}
    st = _state([("rx", 0, "x", "0.8"), ("ry", 0, "y", "")], gpus=1)
    # beside the pod too at 0.9: 1 / (1 + 0.111 + 0.111) = 0.82, its floor holds
    res, _, _ = _score(st, {**base, ("x", "me"): 0.9}, "")
    assert res.violation.tolist() == [False]
    # at 0.85 beside the pod: 1 / (1 + 0.111 + 0.176) = 0.78; pairwise 0.85 would pass
    res, _, _ = _score(st, {**base, ("x", "me"): 0.85}, "")
    assert res.violation.tolist() == [True]
    assert "resident" in res.violation_reason(0)


class Peaks:
    """Predicted peak framebuffer per workload (MiB), no power."""

    def __init__(self, peak: dict[str, float]) -> None:
        self.peak = peak

    def peak_fb_mib(self, workloads):
        return np.array([self.peak.get(w, np.nan) for w in workloads])

    def power_w(self, workloads):
        return np.full(len(workloads), np.nan)


def test_the_binder_takes_a_gpu_where_the_predicted_peak_fits():
    # GPU 0: a 0.25 share predicted to peak at 70 GiB of 80; GPU 1: a 0.5 share at 5 GiB
    st = ClusterState()
    st.replace_all([make_node("n", gpus=2, gpu_mem_mib=81920)],
                   [make_pod("big", fraction=0.25, node="n", workload="big", phase="Running",
                             annotations={GPU_INDEX: "0"}),
                    make_pod("small", fraction=0.5, node="n", workload="small",
                             phase="Running", annotations={GPU_INDEX: "1"})])
    st.ready = True
    pod = parse_pod(make_pod("p", fraction=0.25, workload="me"))
    # by fragmentation alone GPU 0 is taken
    assert Scorer(st, ProviderSet(), load_config()).choose_gpus(pod, "n") == [0]
    prov = ProviderSet()
    prov.set("fingerprint", Peaks({"big": 70 * 1024, "small": 5 * 1024, "me": 20 * 1024}))
    # 20 GiB more on GPU 0 would overflow it (10 GiB free): GPU 1
    assert Scorer(st, prov, load_config()).choose_gpus(pod, "n") == [1]
    # a peak that fits on both: fragmentation decides again
    prov.set("fingerprint", Peaks({"big": 40 * 1024, "small": 5 * 1024, "me": 20 * 1024}))
    assert Scorer(st, prov, load_config()).choose_gpus(pod, "n") == [0]
