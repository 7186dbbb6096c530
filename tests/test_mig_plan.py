"""The MIG geometry planner: the plan itself, `foresight mig plan`, and /v1/mig/plan."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from migutil import mig_pod, mixed_node, single_node
from scheduler_hook import mig
from scheduler_hook.config import load_config
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.mig_plan import plan_objects
from scheduler_hook.providers import ProviderSet
from scheduler_hook.snapshot import load_snapshot, split_list
from serving.app import create_api
from serving.store import ModelStore
from test_cli_errors import assert_one_line_error, run_cli

DATA = Path(__file__).resolve().parent.parent / "data" / "mig"
BAL40 = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}


def demo() -> tuple[list[dict], list[dict], list[dict]]:
    nodes, pods = split_list(json.loads((DATA / "demo_snapshot.json").read_text()))
    rows = list(csv.DictReader((DATA / "demo_forecast.csv").open()))
    return nodes, pods, rows


def a30_node() -> dict:
    # a real MIG GPU (4 slices, not 7/8) that the catalog leaves out on purpose
    return mixed_node("a30-0", {"1g.6gb": 4}, gpus=2, product="NVIDIA-A30", memory_mib=24576,
                      config="all-1g.6gb")


def test_demo_plan_covers_the_forecast_by_re_splitting_two_empty_nodes():
    nodes, pods, rows = demo()
    p = plan_objects(nodes, pods, rows, "p90")
    assert p.unmet_before > 0 and p.unmet_after == 0
    changed = {n.node: n for n in p.nodes if n.changed}
    # the A100 3g.20gb and H100 2g.20gb shortfalls, each met by re-splitting an *empty* node
    assert set(changed) == {"a100-1g-1", "h100-7g-0"}
    assert all(not n.drain for n in changed.values())
    for n in changed.values():  # a named mig-parted config, valid on that GPU model
        named = mig.configs_for(n.model)[n.proposed]
        assert mig.is_valid(named.as_dict, n.model)
    assert p.commands == [
        "kubectl label node a100-1g-1 nvidia.com/mig.config=all-balanced --overwrite",
        "kubectl label node h100-7g-0 nvidia.com/mig.config=all-balanced --overwrite"]
    for prof, d in p.demand.items():
        assert p.supply_after.get(prof, 0) >= d


def test_covered_demand_changes_nothing():
    nodes, pods, _ = demo()
    p = plan_objects(nodes, pods, None)  # no forecast: the pods running or pending
    assert "no MIG forecast" in p.source
    assert p.commands == [] and p.unmet_after == 0


def test_a_busy_node_is_re_split_only_after_its_pods_and_the_quieter_one_goes_first():
    nodes = [mixed_node("busy", {"1g.5gb": 7}, gpus=1, config="all-1g.5gb"),
             mixed_node("quiet", {"1g.5gb": 7}, gpus=1, config="all-1g.5gb")]
    pods = [mig_pod(f"b{i}", "1g.5gb", node="busy", phase="Running") for i in range(4)]
    pods.append(mig_pod("q0", "1g.5gb", node="quiet", phase="Running"))
    rows = [{"unique_id": "q|mig:3g.20gb", "p90": 2}, {"unique_id": "q|mig:1g.5gb", "p90": 5}]
    p = plan_objects(nodes, pods, rows)
    by = {n.node: n for n in p.nodes}
    assert by["quiet"].changed and not by["busy"].changed
    assert by["quiet"].proposed == "all-3g.20gb"
    assert by["quiet"].drain == ["default/q0"]  # the GPU must be empty first
    assert by["quiet"].stranded == 1  # 3g + 3g leaves one compute slice
    assert p.unmet_after == 0


def test_single_strategy_nodes_stay_single_profile_and_pending_resplits_are_left_alone():
    n1 = single_node("s", "1g.5gb", 7, gpus=1)
    n2 = mixed_node("pending", {"1g.5gb": 7}, gpus=1, config="all-1g.5gb")
    n2["metadata"]["labels"]["nvidia.com/mig.config.state"] = "pending"
    p = plan_objects([n1, n2], [], [{"unique_id": "mig:2g.10gb", "p90": 3}])
    by = {n.node: n for n in p.nodes}
    assert by["s"].proposed == "all-2g.10gb"
    assert not by["pending"].changed
    assert any("pending" in note for note in p.notes)


def test_custom_geometries_are_valid_and_come_with_their_configmap_entry():
    nodes = [mixed_node("n", {"7g.40gb": 1}, gpus=1, config="all-7g.40gb")]
    rows = [{"unique_id": "mig:4g.20gb", "p90": 1}, {"unique_id": "mig:2g.10gb", "p90": 1},
            {"unique_id": "mig:1g.5gb", "p90": 1}]
    named = plan_objects(nodes, [], rows)
    assert named.unmet_after > 0  # no named A100-40GB config holds 4g + 2g + 1g
    p = plan_objects(nodes, [], rows, custom=True)
    n = p.nodes[0]
    assert n.changed and not n.proposed.startswith("all-") and p.unmet_after == 0
    assert '"4g.20gb": 1' in n.custom_yaml and "mig-enabled: true" in n.custom_yaml


def test_unknown_gpu_model_is_refused_naming_the_node():
    with pytest.raises(mig.MigError, match="node a30-0: GPU model 'NVIDIA-A30' has no known"):
        plan_objects([a30_node()], [], None)


# ---- the command line --------------------------------------------------------------------
def test_cli_plans_the_demo():
    proc = run_cli("mig", "plan", "--demo")
    assert proc.returncode == 0, proc.stderr
    for needle in ("current config", "pods to drain", "slices stranded", "demand covered",
                   "kubectl label node a100-1g-1 nvidia.com/mig.config=all-balanced"):
        assert needle in proc.stdout


def test_cli_plans_a_snapshot_file_as_json(tmp_path):
    nodes, pods, _ = demo()
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + pods}))
    fc = tmp_path / "fc.csv"
    fc.write_text("unique_id,p10,p50,p90\ninference|mig:3g.20gb,10,30,40\n")
    proc = run_cli("mig", "plan", "--snapshot", str(snap), "--forecast", str(fc), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["demand"] == {"3g.20gb": 40.0}
    assert out["unmet_slices_after"] == 0
    by = {n["node"]: n for n in out["nodes"]}
    # 40 x 3g.20gb needs 20 of the 24 A100s split 3g+3g: both empty A100 nodes, then the
    # one with fewer pods to wait for (9 on a100-bal-0 against 10 on a100-1g-0)
    assert {n for n, v in by.items() if v["changed"]} == {"a100-1g-1", "a100-bal-1",
                                                          "a100-bal-0"}
    assert len(by["a100-bal-0"]["drain"]) == 9 and not by["a100-bal-1"]["drain"]
    assert not by["h100-7g-0"]["changed"]  # no H100 profile is forecast: H100s untouched


def test_cli_unknown_model_is_one_line_exit_2(tmp_path):
    snap = tmp_path / "a30.json"
    snap.write_text(json.dumps({"kind": "List", "items": [a30_node()]}))
    proc = run_cli("mig", "plan", "--snapshot", str(snap))
    assert proc.returncode == 2
    assert_one_line_error(proc, "node a30-0", "no known MIG geometry")


@pytest.mark.parametrize("args,needle", [
    (["--demo", "--quantile", "p75"], "--quantile"),
    ([], "--snapshot FILE or --demo"),
    (["--snapshot", "/nonexistent.json"], "snapshot not found"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    proc = run_cli("mig", "plan", *args)
    assert proc.returncode == 2
    assert_one_line_error(proc, needle)


# ---- REST ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api() -> TestClient:
    store = ModelStore(None)
    store.refresh()
    return TestClient(create_api(store))


def test_rest_plan_matches_the_planner(api):
    nodes, pods, rows = demo()
    body = {"snapshot": {"kind": "List", "items": nodes + pods}, "quantile": "p90",
            "forecast": [{k: (float(v) if k.startswith("p") else v) for k, v in r.items()
                          if v != ""} for r in rows]}
    r = api.post("/v1/mig/plan", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["commands"] == plan_objects(nodes, pods, rows, "p90").commands


@pytest.mark.parametrize("body,field", [
    ({"snapshot": {"kind": "List", "items": []}, "quantile": "p75"}, "quantile"),
    ({"snapshot": {"kind": "List", "items": []}, "forecast": [{"p90": 1}]}, "forecast.0.unique_id"),
    ({"snapshot": {"kind": "List", "items": []},
      "forecast": [{"unique_id": "mig:1g.5gb", "p90": "lots"}]}, "forecast.0.p90"),
    ({"snapshot": {"kind": "List", "items": []}, "colour": 1}, "colour"),
    ({"snapshot": {"items": 3}}, "snapshot"),
    ({"snapshot": {"kind": "List", "items": [a30_node()]}}, "snapshot: node a30-0"),
    ({"snapshot": {"kind": "List", "items": []}}, "snapshot: no MIG node"),
    ({"snapshot": {"kind": "List", "items": [{**a30_node(), "metadata": {
        "name": "a30-0", "labels": ["x"]}}]}}, "snapshot: node 0: Node a30-0: metadata.labels"),
    ({"snapshot": {"kind": "List", "items": [{**a30_node(), "status": "Ready"}]}},
     "snapshot: node 0: Node a30-0: status must be an object"),
])
def test_rest_bad_input_is_422_naming_the_field(api, body, field):
    r = api.post("/v1/mig/plan", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(field)


def test_rest_get_needs_cluster_state_and_plans_it():
    store = ModelStore(None)
    store.refresh()
    assert TestClient(create_api(store)).get("/v1/mig/plan").status_code == 503
    state = load_snapshot(DATA / "demo_snapshot.json")
    hook = ExtenderHook(state, ProviderSet(), load_config())
    r = TestClient(create_api(store, hook)).get("/v1/mig/plan", params={"quantile": "p50"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["quantile"] == "p50" and len(out["nodes"]) == 7
    # bound pods only (pending ones are not in the extender's state): demand already met
    assert out["commands"] == []


def test_cli_fits_the_demand_forecaster_on_mig_series(tmp_path):
    """The plan from the demand forecaster's own per-shape quantiles: 3g.20gb use around
    20 instances over the next 6 h (the demo A100s offer 16) must re-split a node; the 1g.5gb and
    a non-MIG series ride along."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    ds = pd.date_range("2026-11-01", periods=12 * 144, freq="10min")
    daily = np.sin(2 * np.pi * (ds.hour.to_numpy() - 6) / 24)
    frames = [pd.DataFrame({"unique_id": uid, "ds": ds,
                            "y": np.maximum(base * (1 + 0.4 * daily)
                                            + rng.normal(0, 1, len(ds)), 0).round()})
              for uid, base in (("inference|mig:3g.20gb", 28), ("inference|mig:1g.5gb", 20),
                                ("inference|2", 5))]
    series = tmp_path / "mig_series.csv"
    pd.concat(frames).to_csv(series, index=False)
    nodes, pods, _ = demo()
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"kind": "List", "items": nodes + pods}))
    proc = run_cli("mig", "plan", "--snapshot", str(snap), "--series", str(series),
                   "--horizon", "6h", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["demand"]) == {"3g.20gb", "1g.5gb"}  # the non-MIG series is left out
    assert out["demand"]["3g.20gb"] > 16 and "forecast" in out["source"]
    assert out["changes"] >= 1 and out["unmet_slices_after"] == 0
    proc = run_cli("mig", "plan", "--snapshot", str(snap), "--series", str(series),
                   "--forecast", str(DATA / "demo_forecast.csv"))
    assert proc.returncode == 2
    assert_one_line_error(proc, "not both")


def test_plan_is_optimal_against_brute_force_on_small_clusters():
    """Every combination of named configs on 4 random nodes, against the plan: least unmet
    compute slices, then least re-split cost (1 + 1/4 per pod to drain). The greedy alone
    misses it on about one case in six; the integer program must not miss any."""
    import itertools
    import random
    from collections import Counter

    import scipy.optimize

    from scheduler_hook.mig_plan import DRAIN_COST, _offer, candidates, node_states, unmet
    from scheduler_hook.podspec import parse_pod
    from scheduler_hook.state import parse_node

    if not hasattr(scipy.optimize, "milp"):
        pytest.skip("scipy < 1.9: the planner falls back to its greedy search")
    configs = {c.name: c.as_dict for c in mig.configs_for("A100-40GB").values()
               if c.mig_enabled and c.geometry and "+me" not in str(c.geometry)}
    for seed in range(40):
        rng = random.Random(seed)
        nodes, pods = [], []
        for i in range(4):
            name = rng.choice(sorted(configs))
            nodes.append(mixed_node(f"n{i}", configs[name], gpus=rng.choice([1, 2, 4]),
                                    config=name))
            pods += [mig_pod(f"p{i}-{j}", next(iter(configs[name])), node=f"n{i}",
                             phase="Running") for j in range(rng.choice([0, 0, 1, 3]))]
        demand = {p: rng.randint(0, 10) for p in ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb",
                                                  "7g.40gb") if rng.random() < 0.6}
        p = plan_objects(nodes, pods, [{"unique_id": f"mig:{k}", "p90": v}
                                       for k, v in demand.items()])
        got = (p.unmet_after, sum(1 + DRAIN_COST * len(n.drain) for n in p.nodes if n.changed))
        states = node_states([parse_node(n) for n in nodes], [parse_pod(x) for x in pods])
        best = None
        for combo in itertools.product(*[[None] + candidates(s, False) for s in states]):
            supply: Counter[str] = Counter()
            for s, c in zip(states, combo):
                supply.update(_offer(c, s.gpus) if c else s.offer)
            key = (unmet(demand, supply), sum(1 + DRAIN_COST * len(s.pods)
                                              for s, c in zip(states, combo) if c))
            best = key if best is None or key < best else best
        assert got == best, (seed, got, best)


def test_protect_small_covers_1g_3g_demand_before_4g_7g():
    from collections import Counter

    from scheduler_hook.mig_plan import NodeState, plan, protect_small

    m = mig.MODELS["A100-80GB"]
    bal = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    states = [NodeState(f"n{i}", m, 1, "mixed", "all-balanced",
                        Counter(bal), []) for i in range(2)]
    # two GPUs; demand for 2 whole-GPU 7g instances and 4 1g ones: not both
    demand = {"7g.80gb": 2.0, "1g.10gb": 4.0}
    plain = plan(states, demand)
    assert plain.supply_after.get("7g.80gb", 0) == 2  # 14 slices outweigh 4
    kept = plan(states, demand, weights=protect_small(demand))
    assert kept.supply_after.get("1g.10gb", 0) >= 4
    assert kept.supply_after.get("7g.80gb", 0) == 1  # the GPU left over still goes to 7g
    assert protect_small({"3g.40gb": 1, "4g.40gb": 1}) == {"3g.40gb": 100.0, "4g.40gb": 1.0}


@pytest.mark.parametrize("exact", [True, False])
def test_small_bursts_take_only_the_slices_no_demand_needs(exact):
    from collections import Counter

    from scheduler_hook.mig_plan import NodeState, plan, protect_small, small_bursts, unmet

    m = mig.MODELS["A100-80GB"]
    bal = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    states = [NodeState(f"n{i}", m, 1, "mixed", "all-balanced", Counter(bal), [])
              for i in range(3)]
    # three GPUs: 7g demand takes two; the third serves 1g demand (1) and its burst level (7)
    demand = {"7g.80gb": 2.0, "1g.10gb": 1.0}
    burst = small_bursts({"1g.10gb": 7.0, "7g.80gb": 3.0})
    assert burst == {"1g.10gb": 7.0}  # only the profiles protect_small puts first
    got = plan(states, demand, weights=protect_small(demand), burst=burst, exact=exact)
    assert got.supply_after.get("7g.80gb", 0) == 2  # the burst takes nothing from demand
    assert got.supply_after.get("1g.10gb", 0) == 7  # the spare GPU as seven 1g instances
    without = plan(states, demand, weights=protect_small(demand), exact=exact)
    assert without.supply_after.get("1g.10gb", 0) < 7
    # a burst slice counts below a slice of demand
    assert unmet({"1g.10gb": 1.0}, Counter(), burst={"1g.10gb": 3.0}) == 1.0 + 0.5 * 3


@pytest.mark.parametrize("exact", [True, False])
def test_burst_levels_give_spare_slices_where_they_spare_most_waits(exact):
    """Issue 28: the slices no demand needs go to the 1g-3g profile whose past concurrency
    says an instance spares more waiting pods, not by slices alone; flipping the pod counts
    flips the choice; every burst slice still counts below a slice of demand."""
    from collections import Counter

    import numpy as np

    from scheduler_hook.mig_plan import BURST_WEIGHT, NodeState, burst_levels, plan, protect_small

    m = mig.MODELS["A100-80GB"]
    bal = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    states = [NodeState(f"n{i}", m, 1, "mixed", "all-balanced", Counter(bal), [])
              for i in range(2)]
    demand = {"7g.80gb": 1.0}  # takes one GPU; the other is spare
    samples = {"1g.10gb": np.arange(8.0).repeat(10), "2g.20gb": np.arange(4.0).repeat(20),
               "7g.80gb": np.ones(80)}

    def spare(pods):
        rows = burst_levels(samples, pods)
        assert {p for p, _, _ in rows} == {"1g.10gb", "2g.20gb"}  # 7g is not 1g-3g
        for p in ("1g.10gb", "2g.20gb"):  # a profile's first slice above demand: <= top
            assert 0 < sum(w for q, _, w in rows if q == p) <= BURST_WEIGHT + 1e-9
        got = plan(states, demand, weights=protect_small(demand), burst=rows, exact=exact)
        assert got.supply_after.get("7g.80gb", 0) == 1  # the burst takes nothing from demand
        return got.supply_after

    many_2g = spare({"1g.10gb": 10, "2g.20gb": 1000, "7g.80gb": 5})
    many_1g = spare({"1g.10gb": 1000, "2g.20gb": 10, "7g.80gb": 5})
    assert many_2g.get("2g.20gb", 0) == 3 and many_2g.get("1g.10gb", 0) <= 1
    assert many_1g.get("1g.10gb", 0) == 7 and many_1g.get("2g.20gb", 0) == 0


def test_past_week_geometry_levels_keep_4g_7g_of_the_mean_plan():
    """The burst split moves slices among 1g-3g profiles only: 4g/7g keep the instances the
    plan of the past week's mean gives them; "floor" keeps each 1g-3g profile at least at
    the named plan's (static-past-week's) count where the first plan had that many."""
    from simulator.timeline.mig import mig_cluster
    from simulator.timeline.mig_run import (SMALL_MAX, WARMUP_S, geometry_supply,
                                            mean_concurrent, past_week_geometry,
                                            static_geometry)
    from simulator.timeline.mig_workload import generate_mig_pods

    specs = mig_cluster(2)
    slices = sum(s.gpus for s in specs) * mig.COMPUTE_SLICES
    pods = generate_mig_pods("helios", 0, days=1.0, load=0.5, slices=slices, share40=1 / 3,
                             history_days=8.0)
    t = -WARMUP_S
    first = geometry_supply(specs, past_week_geometry(specs, pods, t, custom=True,
                                                      protect=True))
    named = geometry_supply(specs, static_geometry(specs, mean_concurrent(pods, t - 7 * 86400,
                                                                          t)))
    for mode in ("split", "floor"):
        got = geometry_supply(specs, past_week_geometry(specs, pods, t, custom=True,
                                                        protect=True, levels=mode))
        big = [p for p in pods.profiles if mig.profile_compute(p) > SMALL_MAX]
        assert {p: got[p] for p in big} == {p: first[p] for p in big}
        if mode == "floor":
            for p in pods.profiles:
                if mig.profile_compute(p) <= SMALL_MAX:
                    assert got[p] >= min(first[p], named[p])
