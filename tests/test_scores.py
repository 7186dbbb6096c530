"""Each score component on a tiny synthetic cluster, with stub model providers."""
from __future__ import annotations

import time

import numpy as np
import pytest

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import (CarbonWindow, ColocationSafety, Fragmentation, GpuHealth,
                                   MemoryFit, Packing, PowerHeadroom, Reservation)
from scheduler_hook.scores.base import Context, score_one
from scheduler_hook.state import ClusterState


class Fingerprints:
    def __init__(self, peak: dict[str, float], power: dict[str, float] | None = None) -> None:
        self.peak, self.power = peak, power or {}

    def peak_fb_mib(self, workloads):
        return np.array([self.peak.get(w, np.nan) for w in workloads])

    def power_w(self, workloads):
        return np.array([self.power.get(w, np.nan) for w in workloads])


class Interference:
    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table  # (a, b) -> speed of a beside b

    def speeds(self, workload, others, sharing):
        return (np.array([self.table.get((workload, o), np.nan) for o in others]),
                np.array([self.table.get((o, workload), np.nan) for o in others]))


class Demand:
    def __init__(self, mix, reserved=0.0) -> None:
        self.mix, self.reserved = mix, reserved

    def shape_mix(self):
        return self.mix

    def reserved_whole_gpus(self):
        return self.reserved


class Carbon:
    def __init__(self, by_region):
        self.by_region = by_region

    def intensity(self, regions):
        return np.array([self.by_region.get(r, np.nan) for r in regions])


def cluster(nodes: list[dict], pods: list[dict] = ()) -> ClusterState:
    st = ClusterState()
    st.replace_all(nodes, list(pods))
    st.ready = True
    return st


def ctx(st: ClusterState, pod: dict, providers: ProviderSet | None = None,
        cfg: dict | None = None) -> Context:
    names = st.all_names()
    rows, _ = st.rows(names)
    return Context(st, rows, parse_pod(pod), providers or ProviderSet(), cfg or load_config())


def by_name(st, c, res) -> dict[str, float]:
    return {st.names[r]: float(v) for r, v in zip(c.rows, res.value)}


def two_shared_gpus(res_a: str, res_b: str) -> ClusterState:
    return cluster([make_node("a", gpus=1, gpu_mem_mib=40960), make_node("b", gpus=1,
                                                                          gpu_mem_mib=40960)],
                   [make_pod("ra", fraction=0.5, node="a", workload=res_a, phase="Running"),
                    make_pod("rb", fraction=0.5, node="b", workload=res_b, phase="Running")])


def test_memory_fit_uses_predicted_peaks_and_rejects_only_on_fresh_prediction():
    st = two_shared_gpus("small", "hog")
    pod = make_pod("p", fraction=0.25, workload="big")
    prov = ProviderSet()
    prov.set("fingerprint", Fingerprints({"small": 8000, "hog": 20000, "big": 30000}))
    c = ctx(st, pod, prov)
    res = MemoryFit().score(c)
    v = by_name(st, c, res)
    assert v["a"] > 0.5 and v["b"] == 0.0
    bad = {st.names[c.rows[j]] for j in np.flatnonzero(res.violation)}
    assert bad == {"b"}
    assert "predicted OOM" in res.violation_reason(list(c.rows).index(st.index["b"]))
    # the same model, but stale: declared sizes only, nothing rejected
    prov.set("fingerprint", Fingerprints({"small": 8000, "hog": 20000, "big": 30000}),
             max_age_s=60, loaded_at=time.time() - 3600)
    res = MemoryFit().score(ctx(st, pod, prov))
    assert res.violation is None
    assert "declared" in res.reason(0)


def test_colocation_prefers_friendly_neighbour_and_enforces_slo_class():
    st = two_shared_gpus("friendly", "noisy")
    table = {("me", "friendly"): 0.95, ("friendly", "me"): 0.9,
             ("me", "noisy"): 0.6, ("noisy", "me"): 0.97}
    prov = ProviderSet()
    prov.set("interference", Interference(table))
    pod = make_pod("p", fraction=0.25, workload="me",
                   annotations={"foresight.io/slo-min-speed": "0.8"})
    c = ctx(st, pod, prov)
    res = ColocationSafety().score(c)
    v = by_name(st, c, res)
    assert v["a"] == pytest.approx((0.9 - 0.5) / 0.5)
    assert v["b"] == pytest.approx((0.6 - 0.5) / 0.5)
    assert {st.names[c.rows[j]] for j in np.flatnonzero(res.violation)} == {"b"}
    # no model: neutral and never a violation
    res = ColocationSafety().score(ctx(st, pod))
    assert (res.value == 1.0).all() and res.violation is None


def test_fragmentation_fills_partial_gpu_when_whole_gpu_pods_dominate_the_seen_mix():
    nodes = [make_node("half", gpus=1), make_node("empty", gpus=1)]
    pods = [make_pod("r", fraction=0.5, node="half", phase="Running")]
    pods += [make_pod(f"seen{i}", gpus=1) for i in range(9)]  # pending whole-GPU pods: the mix
    st = cluster(nodes, pods)
    c = ctx(st, make_pod("p", fraction=0.5))
    v = by_name(st, c, Fragmentation().score(c))
    assert v["half"] == 1.0 and v["empty"] == 0.0


def test_fragmentation_mix_comes_from_forecast_when_one_is_fresh():
    # free 600 on "a", 1000 on "b"; a 0.4 pod. Forecast: only 0.6 shapes arrive, so
    # putting it on "b" leaves exactly 600 (usable) while on "a" it leaves 200 (fragment).
    nodes = [make_node("a", gpus=1), make_node("b", gpus=1)]
    st = cluster(nodes, [make_pod("r", fraction=0.4, node="a", phase="Running")])
    prov = ProviderSet()
    prov.set("demand", Demand({(1, 600): 1.0}))
    c = ctx(st, make_pod("p", fraction=0.4), prov)
    res = Fragmentation().score(c)
    v = by_name(st, c, res)
    assert v["b"] > v["a"]
    assert "forecast mix" in res.reason(0)


def test_reservation_keeps_empty_nodes_for_forecast_demand():
    nodes = [make_node("e1"), make_node("e2"), make_node("busy")]
    st = cluster(nodes, [make_pod("r", gpus=4, node="busy", phase="Running")])
    pod = make_pod("p", gpus=1)
    prov = ProviderSet()
    prov.set("demand", Demand({(1, 1000): 1.0}, reserved=8))
    c = ctx(st, pod, prov)
    assert set(by_name(st, c, Reservation().score(c)).values()) == {1.0}  # 16 empty >= 8 + 8
    prov.set("demand", Demand({(1, 1000): 1.0}, reserved=12))
    c = ctx(st, pod, prov)
    v = by_name(st, c, Reservation().score(c))
    assert v == {"e1": 0.0, "e2": 0.0, "busy": 1.0}
    c = ctx(st, make_pod("vip", gpus=1, priority=100000), prov)
    assert set(by_name(st, c, Reservation().score(c)).values()) == {1.0}


def test_power_headroom_against_node_and_rack_caps():
    cap = "foresight.io/power-cap-watts"
    nodes = [make_node("roomy", gpus=2, annotations={cap: "500"}),
             make_node("tight", gpus=2, annotations={cap: "380"}),
             make_node("over", gpus=2, annotations={cap: "300"}),
             make_node("racked", gpus=2, labels={"foresight.io/rack": "r1"})]
    st = cluster(nodes)
    cfg = load_config()
    cfg["power"]["rack_caps_w"] = {"r1": 340}
    c = ctx(st, make_pod("p", gpus=1), cfg=cfg)
    v = by_name(st, c, PowerHeadroom().score(c))
    # idle 2 x 60 W, plus one GPU going from idle to 300 W: 360 W after placement
    assert v["roomy"] == 1.0
    assert v["tight"] == pytest.approx(20 / 38)
    assert v["over"] == 0.0 and v["racked"] == 0.0
    prov = ProviderSet()
    prov.set("fingerprint", Fingerprints({}, {"": 100.0, "busybox": 100.0}))
    c = ctx(st, make_pod("p", gpus=1), prov, cfg)
    assert by_name(st, c, PowerHeadroom().score(c))["over"] > 0.0  # predicted 100 W fits


def test_carbon_window_only_moves_deferrable_pods():
    nodes = [make_node("clean", labels={"topology.kubernetes.io/region": "north"}),
             make_node("dirty", labels={"topology.kubernetes.io/region": "south"})]
    st = cluster(nodes)
    prov = ProviderSet()
    prov.set("carbon", Carbon({"north": 80, "south": 600}))
    lazy = make_pod("p", gpus=1, annotations={"foresight.io/deferrable": "true"})
    c = ctx(st, lazy, prov)
    assert by_name(st, c, CarbonWindow().score(c)) == {"clean": 1.0, "dirty": 0.0}
    c = ctx(st, make_pod("q", gpus=1), prov)
    assert set(by_name(st, c, CarbonWindow().score(c)).values()) == {1.0}


def test_health_scores_sbe_and_rejects_room_only_on_failed_gpus():
    health = "foresight.io/gpu-health"
    nodes = [make_node("ok", gpus=1), make_node("sbe", gpus=1,
                                                 annotations={health: '{"0": {"ecc_sbe": 3}}'}),
             make_node("xid", gpus=1, annotations={health: '{"0": {"xid": 79}}'}),
             make_node("drained", gpus=2, annotations={"foresight.io/gpu-drained": "all"})]
    st = cluster(nodes)
    c = ctx(st, make_pod("p", gpus=1))
    res = GpuHealth().score(c)
    v = by_name(st, c, res)
    assert v["ok"] == 1.0 and v["sbe"] == pytest.approx(0.6)
    bad = {st.names[c.rows[j]] for j in np.flatnonzero(res.violation)}
    assert bad == {"xid", "drained"} and res.unresolvable
    j = list(c.rows).index(st.index["sbe"])
    assert score_one(GpuHealth(), c, j) == (pytest.approx(0.6), res.reason(j))


def test_packing_prefers_the_fuller_node():
    st = cluster([make_node("a", gpus=4), make_node("b", gpus=4)],
                 [make_pod("r", gpus=2, node="a", phase="Running")])
    c = ctx(st, make_pod("p", gpus=1))
    v = by_name(st, c, Packing().score(c))
    assert v["a"] == pytest.approx(0.75) and v["b"] == pytest.approx(0.25)


def test_fragmentation_charges_a_fraction_the_residue_it_leaves_unfillable(tmp_path):
    """650 milli beside a lone 230 leaves 120 that no common size fills; on the empty GPU it
    leaves 350, which a 320 fills. FGD's measure alone fills the GPU that holds a pod; the
    residue term (`fragmentation.residue_weight`) moves the fraction to the empty GPU."""
    nodes = [make_node("holds230", gpus=1), make_node("empty", gpus=1)]
    pods = [make_pod("r", fraction=0.23, node="holds230", phase="Running")]
    for milli, n in ((230, 1), (320, 2), (470, 4), (650, 2), (810, 6)):  # pending: the mix
        pods += [make_pod(f"s{milli}-{i}", fraction=milli / 1000) for i in range(n)]
    st = cluster(nodes, pods)
    pod = make_pod("p", fraction=0.65)

    def raw(weight: float) -> dict:
        cfg_file = tmp_path / f"w{weight}.yaml"
        cfg_file.write_text(f"fragmentation:\n  residue_weight: {weight}\n")
        c = ctx(st, pod, cfg=load_config(cfg_file))
        res = Fragmentation().score(c)
        return {st.names[r]: float(v) for r, v in zip(c.rows, res.raw)}

    off, on = raw(0.0), raw(30.0)
    assert off["holds230"] < off["empty"]
    assert on["empty"] < on["holds230"]
    # the 770 free beside the 230 could be filled to 70 (470 + 230), 120 after the pod: +50;
    # the empty GPU, 30 (650 + 320) before and after (320): +0
    assert (on["holds230"] - off["holds230"]) - (on["empty"] - off["empty"]) == 30 * 50
    bad = tmp_path / "bad.yaml"
    bad.write_text("fragmentation:\n  residue_weight: -1\n")
    from foresight.errors import ForesightError

    with pytest.raises(ForesightError, match="fragmentation.residue_weight"):
        load_config(bad)


class AdmittingInterference(Interference):
    """Point speeds, p10s, margin units, and an admission bound of q units per floor."""

    def __init__(self, table, p10, unit, q_by_floor, admits=True) -> None:
        super().__init__(table)
        self.p10, self.unit, self.q_by_floor, self.admits = p10, unit, q_by_floor, admits
        self.floors = []

    def _two(self, t, workload, others):
        return (np.array([t.get((workload, o), np.nan) for o in others]),
                np.array([t.get((o, workload), np.nan) for o in others]))

    def bounds(self, workload, others, sharing):
        return self._two(self.p10, workload, others)

    def units(self, workload, others, sharing):
        return self._two(self.unit, workload, others)

    def admit_bound(self, sharing, point, unit, p10, floor):
        floor = np.broadcast_to(np.asarray(floor, float), np.shape(point))
        self.floors.append(np.unique(floor).tolist())
        q = np.vectorize(lambda f: self.q_by_floor.get(round(float(f), 2), np.nan))(floor)
        return np.where(np.isnan(q) | np.isnan(unit), p10, point - q * unit)


def test_colocation_holds_min_speed_to_the_admission_bound_at_each_sides_floor():
    st = two_shared_gpus("friendly", "noisy")
    table = {("me", "friendly"): 0.9, ("friendly", "me"): 0.95,
             ("me", "noisy"): 0.82, ("noisy", "me"): 0.97}
    p10 = {("me", "friendly"): 0.7, ("friendly", "me"): 0.8,
           ("me", "noisy"): 0.6, ("noisy", "me"): 0.9}
    unit = {k: 0.05 for k in table} | {("me", "noisy"): 0.1}
    pod = make_pod("p", fraction=0.25, workload="me",
                   annotations={"foresight.io/min-speed": "0.8"})

    def refused(model) -> set[str]:
        prov = ProviderSet()
        prov.set("interference", model)
        c = ctx(st, pod, prov)
        res = ColocationSafety().score(c)
        return {st.names[c.rows[j]] for j in np.flatnonzero(res.violation)}

    # the p10 (0.7 beside friendly, 0.6 beside noisy) refuses both GPUs
    assert refused(AdmittingInterference(table, p10, unit, {0.8: 1.0}, admits=False)) == \
        {"a", "b"}
    # the admission bound at 0.8: 0.9 - 1 x 0.05 = 0.85 admits; 0.82 - 0.1 = 0.72 refuses
    model = AdmittingInterference(table, p10, unit, {0.8: 1.0})
    assert refused(model) == {"b"}
    assert [0.8] in model.floors  # held at the pod's own floor
    # a floor the model has no q for falls back to the p10
    assert refused(AdmittingInterference(table, p10, unit, {0.7: 1.0})) == {"a", "b"}
