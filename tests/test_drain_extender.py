"""Issue 28: the drain component in the extender. The plan is built from the pod watch (each
running pod's status.startTime and its predicted run time from the `runtime` provider) and
read through real HTTP, as kube-scheduler asks. Synthetic cluster."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import numpy as np
import pytest

from scheduler_hook.config import load_config
from scheduler_hook.drain_plan import DrainPlan, pending_jobs
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from test_extender_http import Served

RUN_S = {"res-short": 1000.0, "res-long": 50_000.0, "short": 600.0, "long": 3600.0,
         "big": 7200.0}


class Runtime:
    """Predicted run time by workload label (s); None for an unknown workload."""

    def runtime_s(self, pod) -> float | None:
        return RUN_S.get(pod.workload)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def running(name: str, node: str, workload: str, started: float, gpus: int = 1) -> dict:
    p = make_pod(name, gpus=gpus, node=node, workload=workload, phase="Running")
    p["status"]["startTime"] = _iso(started)
    return p


def pending(name: str, workload: str, gpus: int, age_s: float = 0.0, **kw) -> dict:
    p = make_pod(name, gpus=gpus, workload=workload, **kw)
    p["metadata"]["creationTimestamp"] = _iso(time.time() - age_s)
    return p


def cluster() -> ClusterState:
    """node-a: six 1-GPU residents predicted to end in ~15 min (the node the pending 8-GPU pod
    is drained for, and the one packing prefers: fuller); node-b: one resident for ~14 h."""
    now = time.time()
    st = ClusterState()
    for n in ("node-a", "node-b"):
        st.upsert_node(make_node(n, gpus=8))
    for i in range(6):
        st.upsert_pod(running(f"a{i}", "node-a", "res-short", now - 100))
    st.upsert_pod(running("b1", "node-b", "res-long", now - 100))
    st.upsert_pod(pending("big-0", "big", gpus=8))
    st.ready = True
    return st


def hook(st: ClusterState, weight: float = 5.0) -> ExtenderHook:
    cfg = load_config()
    for key in ("weights", "fallback_weights"):
        cfg[key] = {**cfg[key], "drain": weight}
    prov = ProviderSet()
    prov.set("runtime", Runtime())
    return ExtenderHook(st, prov, cfg)


def scores(client, pod: dict) -> dict[str, int]:
    r = client.post("/scheduler/prioritize",
                    json={"Pod": pod, "Nodes": None, "NodeNames": ["node-a", "node-b"]})
    assert r.status_code == 200
    return {h["Host"]: h["Score"] for h in r.json()}


def test_start_time_is_read_from_the_pod_status():
    t = time.time() - 100
    assert abs(parse_pod(running("x", "n", "w", t)).started - t) < 1.0
    assert parse_pod(make_pod("y", gpus=1)).started == 0.0


def test_plan_drains_the_node_whose_residents_end_first_for_the_pending_big_pod():
    st = cluster()
    plan = DrainPlan(st, hook(st).providers, load_config()).refresh()
    rows, _ = st.rows(["node-a", "node-b"])
    shadow = plan.shadow_s(rows) - plan.now()
    assert 800 < shadow[0] < 1000 and not np.isfinite(shadow[1])  # ~900 s: a0-a5's ends
    assert plan.ahead_of(rows)[0] == 0 and plan.rank(parse_pod(pending("big-0", "big", 8))) == 0


def drain_of(client, pod: str, node: str) -> dict:
    why = client.get(f"/v1/explain/default/{pod}").json()
    return next(n for n in why["prioritize"]["nodes"] if n["node"] == node)["components"]["drain"]


def test_small_pod_is_steered_off_the_drained_node_over_http_unless_it_ends_in_time():
    with Served(hook(cluster(), weight=0.0)) as client:  # the shipped weight: no drain
        plain = scores(client, pending("p-long", "long", gpus=1))
    assert plain["node-a"] >= plain["node-b"]  # packing and fragmentation alone: a tie here
    with Served(hook(cluster())) as client:
        long_ = scores(client, pending("p-long", "long", gpus=1))
        held = drain_of(client, "p-long", "node-a")
        short = scores(client, pending("p-short", "short", gpus=1))
        lent = drain_of(client, "p-short", "node-a")
    # predicted 60 min, the big pod is due on node-a in ~15: steered to node-b
    assert long_["node-a"] < long_["node-b"]
    assert held["value"] == 0.0 and "predicted to run longer" in held["reason"]
    # predicted 10 min: it ends before the shadow, node-a is open to it as without draining
    assert lent["value"] == 1.0 and lent["reason"].startswith("backfill")
    assert short["node-a"] >= short["node-b"]


def test_a_pod_pending_past_the_hold_bound_is_not_held_off():
    st = cluster()
    with Served(hook(st)) as client:
        old = scores(client, pending("p-old", "long", gpus=1, age_s=3 * 3600))
        why = drain_of(client, "p-old", "node-a")
    assert old["node-a"] >= old["node-b"]
    assert why["value"] == 1.0 and "longer than the 30 min" in why["reason"]


def test_the_plan_follows_the_watch():
    st = cluster()
    with Served(hook(st)) as client:
        scores(client, pending("p1", "long", 1))
        assert drain_of(client, "p1", "node-a")["value"] == 0.0
        st.delete_pod("default", "big-0")  # the big pod went away: nothing to drain for
        scores(client, pending("p2", "long", 1))
        assert drain_of(client, "p2", "node-a")["reason"] == "not drained for a big job"
        st.upsert_pod(pending("big-0", "big", gpus=8))  # back, and node-a's residents left
        for i in range(6):
            st.delete_pod("default", f"a{i}")
        scores(client, pending("p3", "long", 1))
        a = drain_of(client, "p3", "node-a")
    assert a["value"] == 0.0 and "due in 0 min" in a["reason"]  # empty: the big pod fits now


def test_a_later_big_job_keeps_off_the_node_drained_for_an_earlier_one():
    st = cluster()
    st.upsert_pod(pending("big-1", "long", gpus=8, age_s=-60))  # created after big-0
    with Served(hook(st)) as client:
        later = scores(client, pending("big-1", "long", gpus=8, age_s=-60))
        first = scores(client, pending("big-0", "big", gpus=8))
    assert later["node-a"] < later["node-b"]  # node-a is big-0's; node-b drains for big-1
    assert first["node-a"] >= first["node-b"]


def test_pending_jobs_group_gangs_and_keep_queue_order():
    def pod(name, gpus, prio=0, created=0.0, gang=""):
        ann = {"scheduling.k8s.io/group-name": gang} if gang else {}
        p = parse_pod(make_pod(name, gpus=gpus, priority=prio, annotations=ann))
        return p.__class__(**{**p.__dict__, "created": created, "gang": gang and f"default/{gang}"})

    pods = [pod("s", 1, created=1.0), pod("b", 8, created=5.0), pod("g1", 4, created=3.0,
            gang="g"), pod("g2", 4, created=4.0, gang="g"), pod("g3", 4, created=4.0,
            gang="g"), pod("hi", 8, prio=100, created=9.0)]
    got = pending_jobs({p.key: p for p in pods})
    assert got == [("default/hi", 1), ("gang:default/g", 2), ("default/b", 1)]
    # shortest predicted first, aged: b (created 5 s, predicted 1 s) passes the gang (created
    # 3 s, predicted 10 s) at alpha 1, not at alpha 0.1; priority still comes first
    run = {"default/b": 1.0, "default/g1": 10.0, "default/g2": 10.0, "default/g3": 10.0,
           "default/hi": 50.0}
    by = {p.key: p for p in pods}
    assert pending_jobs(by, runtime_s=lambda p: run[p.key], alpha=1.0) == \
        [("default/hi", 1), ("default/b", 1), ("gang:default/g", 2)]
    assert pending_jobs(by, runtime_s=lambda p: run[p.key], alpha=0.1) == got
    assert pending_jobs(by, runtime_s=lambda p: None, alpha=1.0) == got  # unknown: creation


@pytest.mark.parametrize("weights", ["weights", "fallback_weights"])
def test_the_shipped_config_keeps_the_component_off(weights):
    assert load_config()[weights]["drain"] == 0.0


def test_runtime_loader_serves_the_registry_model_at_the_configured_quantile(tmp_path):
    from artifacts.registry import Registry
    from forecaster.runtime.model import RuntimePredictor
    from scheduler_hook.providers import load_registry
    from test_runtime_backfill import pods_table

    RuntimePredictor().fit(pods_table()).save(tmp_path / "m")
    Registry(tmp_path / "reg").publish("runtime", tmp_path / "m", {
        "features": ["workload"], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
        "data_hash": "x", "metrics": {"primary": "mae", "mae": 1.0}, "code_version": "t"})
    pod = parse_pod(make_pod("p", gpus=1, workload="a"))
    got = {}
    for q in ("p50", "p90"):
        cfg = {**load_config(), "runtime": {"quantile": q}}
        prov = load_registry(str(tmp_path / "reg"), {"runtime": cfg["loaders"]["runtime"]},
                             3600, cfg=cfg)
        got[q] = prov.fresh("runtime").runtime_s(pod)
    assert 70 < got["p50"] < 140 < got["p90"]  # workload a runs ~100 s
    cfg = {**load_config(), "runtime": {"quantile": "p99"}}  # a bad quantile: slot missing, why
    prov = load_registry(str(tmp_path / "reg"), {"runtime": cfg["loaders"]["runtime"]}, 3600,
                         cfg=cfg)
    assert prov.fresh("runtime") is None and "p99" in prov.slots["runtime"].error


@pytest.mark.parametrize("cfg, says", [
    ({"drain_max_hold_s": -1}, "drain_max_hold_s must be a number >= 0"),
    ({"drain_big_gpus": "eight"}, "drain_big_gpus must be a number >= 1"),
    ({"drain_replan_s": True}, "drain_replan_s must be a number"),
    ({"drain_big_order": -1}, "drain_big_order must be a number >= 0"),
    ({"runtime": {"quantile": "p99"}}, "runtime.quantile must be p10, p50 or p90"),
    ({"runtime": "p50"}, "runtime must be a mapping"),
])
def test_bad_drain_config_is_a_one_line_error(tmp_path, cfg, says):
    import yaml

    from ground.errors import ForesightError

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ForesightError) as err:
        load_config(path)
    assert says in str(err.value) and "\n" not in str(err.value)
    path.write_text(yaml.safe_dump({"drain_max_hold_s": 600, "runtime": {"quantile": "p90"}}))
    assert load_config(path)["runtime"]["quantile"] == "p90"
