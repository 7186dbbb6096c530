"""Topology, prospectively (issue 31): a preferred gang goes to the domain predicted departures
free for it soon, pods in no gang keep whole domains free for forecast gang demand, and a bad
`topology` config section is a one-line error."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ground.errors import ForesightError
from scheduler_hook import topology as topo
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PodRequest
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores.topology_prospect import keep_free, pack_tiers, soon_horizon_s
from scheduler_hook.state import ClusterState

RACK = "cloud.provider.com/topology-rack"
NAMES = ["a0", "a1", "b0", "b1"]


class Runtime:
    def __init__(self, by_name: dict[str, float]) -> None:
        self.by_name = by_name

    def runtime_s(self, pod):
        return self.by_name.get(pod.name.split("-")[0])


class Demand:
    def __init__(self, reserved: float) -> None:
        self.reserved = reserved

    def shape_mix(self):
        return {(1, 1000): 1.0}

    def reserved_whole_gpus(self):
        return self.reserved


def _state(busy: dict[str, tuple[str, int]]) -> ClusterState:
    """Racks a and b of two 8-GPU nodes; ``busy``: node -> (pod name, GPUs), running 5 min."""
    st = ClusterState()
    st.replace_all([make_node(n, labels={RACK: f"rack-{n[0]}"}) for n in NAMES], [])
    for node, (name, gpus) in busy.items():
        st.upsert_pod(PodRequest("default", f"{name}-{node}", node=node, phase="Running",
                                 gpus=gpus, milli=1000, created=time.time() - 300))
    return st


def _gang_pod(k: int, size: int = 2) -> dict:
    p = make_pod(f"gang-{k}", namespace="train", gpus=8, annotations={
        "kueue.x-k8s.io/podset-preferred-topology": RACK, "foresight.io/gang-size": str(size)})
    p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    return p


def _topology_values(hook: ExtenderHook, pod: dict) -> tuple[dict, dict]:
    from scheduler_hook.scores.base import Context
    comp = next(c for c in hook.scorer.components if c.name == "topology")
    with hook.state.lock:
        rows, names = hook.state.rows(NAMES)
        res = comp.score(Context(hook.state, rows, hook.pod(pod), hook.providers, hook.cfg))
    return ({n: float(res.value[i]) for i, n in enumerate(names)},
            {n: res.reason(i) for i, n in enumerate(names)})


def test_preferred_gang_goes_to_the_rack_departures_free_soon():
    # a0 and b0 full; no rack holds the 2-pod gang now. a0's pod is predicted to end in
    # 5 min, b0's in days: rack a holds the gang soon, rack b not
    st = _state({"a0": ("short", 8), "b0": ("long", 8)})
    providers = ProviderSet()
    hook = ExtenderHook(st, providers, load_config())
    plain, _ = _topology_values(hook, _gang_pod(0))
    assert plain["a1"] == plain["b1"]  # no run-time predictions: nothing known to free soon
    providers.set("runtime", Runtime({"short": 600.0, "long": 5e5, "gang": 36000.0}))
    value, why = _topology_values(hook, _gang_pod(0))
    assert value["a1"] == 1.0 and value["b1"] < 1.0
    assert "within 180 min by predicted departures" in why["a1"]  # 10 h x (1.3 - 1)
    # the same pods predicted the other way round: rack b
    providers.set("runtime", Runtime({"short": 5e5, "long": 600.0, "gang": 36000.0}))
    hook = ExtenderHook(st, providers, load_config())
    value, _ = _topology_values(hook, _gang_pod(0))
    assert value["b1"] == 1.0 and value["a1"] < 1.0
    # the departure comes after what spreading would cost (a 10-min gang): not soon enough
    providers.set("runtime", Runtime({"short": 3600.0, "long": 5e5, "gang": 600.0}))
    hook = ExtenderHook(st, providers, load_config())
    value, _ = _topology_values(hook, _gang_pod(0))
    assert value["a1"] == value["b1"]


def test_soon_horizon_is_the_spreading_cost_else_the_configured_wait():
    assert soon_horizon_s(1000.0, {"spread_slowdown": 1.5}) == pytest.approx(500.0)
    assert soon_horizon_s(None, {"soon_s": 42}) == 42.0


def test_keep_free_keeps_whole_domains_for_the_reserved_gpus():
    codes = np.array([0, 0, 1, 1, 2, 2, -1])
    total = np.full(7, 8.0)
    whole = np.array([8, 8, 8, 8, 4, 8, 8.0])  # domains 0 and 1 all free, 2 partly
    kept, share, n = keep_free(codes, whole, total, 16.0)
    assert n == 1 and kept.tolist() == [True, True] + [False] * 5
    kept, _, n = keep_free(codes, whole, total, 17.0)
    assert n == 2 and kept[:4].all() and not kept[4:].any()
    assert keep_free(codes, whole, total, 0.0)[2] == 0
    assert share[4] == pytest.approx(0.75) and share[6] == 0.0


def test_single_pods_keep_a_whole_rack_free_for_forecast_gangs():
    st = _state({"a0": ("busy", 4)})  # rack a partly used, rack b whole-free
    providers = ProviderSet()
    cfg = load_config()
    cfg["topology"] = {**cfg["topology"], "keep_level": RACK}
    hook = ExtenderHook(st, providers, cfg)
    single = make_pod("one", gpus=1)
    value, _ = _topology_values(hook, single)
    assert len(set(value.values())) == 1  # no demand forecast: nothing kept
    providers.set("demand", Demand(16.0))
    value, why = _topology_values(hook, single)
    assert value["b0"] == value["b1"] == 0.0 and min(value["a0"], value["a1"]) > 0
    assert value["a0"] > value["a1"] or value["a0"] == value["a1"]
    assert "kept whole-free for the 16 GPUs of forecast gang demand" in why["b0"]
    d = hook.scorer.decide(hook.pod(single), NAMES)
    assert d.names[int(np.argmax(d.scores))] in ("a0", "a1")
    high = make_pod("vip", gpus=1, priority=5000)
    assert len(set(_topology_values(hook, high)[0].values())) == 1
    providers.set("demand", Demand(0.0))
    value, _ = _topology_values(hook, single)
    assert value["b0"] > 0


@pytest.mark.parametrize("topology, says", [
    ({"levels": []}, "topology.levels must be a non-empty list"),
    ({"levels": "rack"}, "topology.levels must be a non-empty list"),
    ({"levels": ["rack", "bad key!"]}, "topology.levels[1]: 'bad key!'"),
    ({"levels": ["a/b/c"]}, "is not a label key"),
    ({"levels": ["Not_DNS/rack"]}, "is not a DNS subdomain"),
    ({"levels": ["rack", "rack"]}, "lists 'rack' twice"),
    ({"levels": ["rack"], "keep_level": ""}, "topology.keep_level"),
    ({"levels": ["rack"], "spread_slowdown": 0.5}, "topology.spread_slowdown must be a number"),
    ({"levels": ["rack"], "remember": True}, "topology.remember must be a number"),
    ({"levels": ["rack"], "level": "x"}, "unknown key topology.level"),
    ({"levels": ["rack"], "pack": "yes"}, "topology.pack must be true or false"),
    ({"levels": ["rack"], "elastic_wait": 1}, "topology.elastic_wait must be true or false"),
    ({"levels": ["rack"], "pack_gpus": 0}, "topology.pack_gpus must be a number"),
    ({"levels": ["rack"], "pack_level": "bad key!"}, "topology.pack_level"),
    ({"levels": ["rack"], "pack_gang_pods": 0}, "topology.pack_gang_pods must be a number"),
])
def test_bad_topology_config_is_a_one_line_error(tmp_path, topology, says):
    import yaml
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"topology": topology}))
    with pytest.raises(ForesightError) as err:
        load_config(path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_good_levels_pass_and_the_cli_says_one_line(tmp_path):
    topo.check_config({"topology": {"levels": ["nvidia.com/gpu.clique", "rack",
                                               "kubernetes.io/hostname"]}})
    path = tmp_path / "c.yaml"
    path.write_text("topology:\n  levels: [rack, 'x y']\n")
    cli = str(Path(sys.executable).with_name("foresight"))
    out = subprocess.run([cli, "serve", "--config", str(path),
                          "--snapshot", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "topology.levels[1]" in out.stderr


def test_pack_tiers_keep_draining_gang_nodes_and_empty_ones_for_last():
    free_at = np.array([500.0, 50.0, -np.inf, 50.0])
    empty = np.array([False, False, True, False])
    gang_node = np.array([True, True, True, False])  # the last one holds no gang pod
    first, then = pack_tiers(free_at, empty, gang_node, end=100.0)
    assert first.tolist() == [True, False, False, True]  # taken past 100 s, or no gang fits
    assert then.tolist() == [True, True, False, True]  # any taken node, never the empty one


def test_pack_tiers_by_rack_put_long_runs_in_racks_no_gang_gets_before_they_end():
    # rack 0: two gang nodes taken until 50 and 60 s (a 2-pod gang fits at 60 s); rack 1: two
    # taken until 50 s and 500 s (a 2-pod gang only at 500 s). A pod ending at 100 s
    # prolongs any of the 50/60 s nodes, but in rack 1 not the time a gang fits there
    free_at = np.array([50.0, 60.0, 50.0, 500.0])
    empty = np.zeros(4, bool)
    gang_node = np.ones(4, bool)
    codes = np.array([0, 0, 1, 1])
    first, late, then = pack_tiers(free_at, empty, gang_node, 100.0, codes, gang_pods=2)
    assert first.tolist() == [False, False, False, True]
    assert late.tolist() == [False, False, True, True]
    assert then.tolist() == [True] * 4
    # an empty node counts as free now: rack 1 with an empty node and one free at 50 s holds
    # the gang before the pod ends: not late
    _, late, _ = pack_tiers(np.array([50.0, 60.0, -np.inf, 50.0]), np.array([0, 0, 1, 0], bool),
                            gang_node, 100.0, codes, gang_pods=2)
    assert late.tolist() == [False, False, False, False]


def test_pack_sends_a_long_single_pod_where_it_does_not_keep_a_draining_node_taken():
    # a0 runs a pod predicted to end in days, b0 one predicted to end in 5 min; a1, b1 empty.
    # A 1-GPU pod predicted to run 10 h goes to a0 first (taken past its end anyway), b0 next
    # (it would keep b0 from a gang 10 h longer), the empty nodes last
    st = _state({"a0": ("long", 4), "b0": ("short", 4)})
    providers = ProviderSet()
    cfg = load_config()
    cfg["topology"] = {**cfg["topology"], "pack": True}
    hook = ExtenderHook(st, providers, cfg)
    single = make_pod("one", gpus=1)
    assert len(set(_topology_values(hook, single)[0].values())) == 1  # no predictions yet
    providers.set("runtime", Runtime({"long": 5e5, "short": 600.0, "one": 36000.0}))
    value, why = _topology_values(hook, single)
    assert value["a0"] > value["b0"] > value["a1"] == value["b1"]
    assert "do not keep it from a gang longer" in why["a0"]
    assert "kept for gangs, last" in why["a1"]
    d = hook.scorer.decide(hook.pod(single), NAMES)
    assert d.names[int(np.argmax(d.scores))] == "a0"
    # a short pod ends before b0 frees: b0 is as good as a0 for it
    providers.set("runtime", Runtime({"long": 5e5, "short": 3600.0, "one": 600.0}))
    value, _ = _topology_values(hook, single)
    assert value["a0"] == value["b0"] > value["a1"]
    # an 8-GPU pod is not packed (it takes a gang-capable node whole)
    assert len(set(_topology_values(hook, make_pod("one", gpus=8))[0].values())) == 1


def test_pack_level_gathers_a_long_pod_in_the_rack_no_gang_gets_before_it_ends():
    # rack a: a0 frees in 5 min, a1 in days (no 2-pod gang there before the 10-h pod ends);
    # rack b: both nodes free in 5 min. Rows alone: a0, b0, b1 alike (each would stay taken
    # longer). With pack_level a0 comes before b0 / b1: the pod does not delay rack a's gang
    st = _state({"a0": ("short", 4), "a1": ("long", 4), "b0": ("short", 4), "b1": ("short", 4)})
    providers = ProviderSet()
    providers.set("runtime", Runtime({"long": 5e5, "short": 600.0, "one": 36000.0}))
    cfg = load_config()
    cfg["topology"] = {**cfg["topology"], "pack": True}
    single = make_pod("one", gpus=1)
    plain, _ = _topology_values(ExtenderHook(st, providers, cfg), single)
    assert plain["a1"] > plain["a0"] == plain["b0"] == plain["b1"]
    cfg["topology"] = {**cfg["topology"], "pack_level": RACK, "pack_gang_pods": 2}
    value, why = _topology_values(ExtenderHook(st, providers, cfg), single)
    assert value["a1"] > value["a0"] > value["b0"] == value["b1"]
    assert "holds no gang before" in why["a0"] and "would keep it from a gang" in why["b0"]


def test_row_free_at_follows_bindings_and_departures_row_by_row():
    from scheduler_hook.scores.topology_prospect import row_free_at
    st = _state({"a0": ("long", 4)})
    rt = Runtime({"long": 5e5, "more": 1e6})
    now = time.time()
    row = {n: st.index[n] for n in NAMES}
    first = row_free_at(st, rt, now)
    assert first[row["a0"]] == pytest.approx(now - 300 + 5e5) and first[row["b0"]] == now
    st.upsert_pod(PodRequest("default", "more-b0", node="b0", phase="Running", gpus=1,
                             milli=1000, created=now))
    second = row_free_at(st, rt, now + 60)
    assert second[row["b0"]] == pytest.approx(now + 1e6)
    assert second[row["a0"]] == first[row["a0"]] and second[row["a1"]] == now + 60
    st.delete_pod("default", "long-a0")
    assert row_free_at(st, rt, now + 120)[row["a0"]] == now + 120


def test_elastic_wait_sends_an_elastic_gang_whole_to_the_rack_that_frees_soon():
    # a0 and b0 full, a0's pod ends in 10 min: no rack holds the 2-pod gang now, each holds
    # one pod. Elastic (min 1): smaller now; with elastic_wait: whole in rack a, soon
    st = _state({"a0": ("short", 8), "b0": ("long", 8)})
    providers = ProviderSet()
    providers.set("runtime", Runtime({"short": 600.0, "long": 5e5, "gang": 36000.0}))
    pod = _gang_pod(0)
    pod["metadata"]["annotations"]["foresight.io/gang-min"] = "1"
    cfg = load_config()
    _, why = _topology_values(ExtenderHook(st, providers, cfg), pod)
    assert any("elastic: starts at 1 of 2" in w for w in why.values())
    cfg["topology"] = {**cfg["topology"], "elastic_wait": True}
    value, why = _topology_values(ExtenderHook(st, providers, cfg), pod)
    assert value["a1"] == 1.0 and value["b1"] < 1.0
    assert "holds the 2 pod(s)" in why["a1"] and "by predicted departures" in why["a1"]
    # nothing frees soon: it starts smaller after all
    providers.set("runtime", Runtime({"short": 5e5, "long": 5e5, "gang": 36000.0}))
    _, why = _topology_values(ExtenderHook(st, providers, cfg), pod)
    assert any("elastic: starts at 1 of 2" in w for w in why.values())
