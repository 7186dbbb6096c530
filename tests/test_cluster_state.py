"""Cluster state from snapshots and from list+watch against a loopback fake apiserver."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest
from kubernetes import client

from foresight.errors import ForesightError
from scheduler_hook.fake_kube import FakeKubeAPI, make_node, make_pod
from scheduler_hook.snapshot import load_snapshot
from scheduler_hook.state import ClusterState
from scheduler_hook.watch import ClusterWatcher


def free_of(st: ClusterState, node: str) -> list[float]:
    r = st.index[node]
    return st.free_milli[r, :st.gpu_count[r]].tolist()


def test_snapshot_loads_nodes_pods_and_fractional_allocations(tmp_path):
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        make_node("a", gpus=2, gpu_mem_mib=40960), make_node("b", gpus=4),
        make_pod("w", gpus=1, node="a", phase="Running"),
        make_pod("f1", fraction=0.5, node="a", phase="Running"),
        make_pod("f2", gpu_memory_mib=10240, node="a", phase="Running"),  # 0.25 of 40 GiB
        make_pod("done", gpus=4, node="b", phase="Succeeded"),
        make_pod("pending", gpus=2),
    ]}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    st = load_snapshot(path)
    assert st.ready and set(st.nodes) == {"a", "b"}
    assert sorted(free_of(st, "a")) == [0.0, 250.0]  # whole GPU + 0.5 + 0.25 on the other
    assert free_of(st, "b") == [1000.0] * 4           # finished pods hold nothing
    assert st.shape_counts[(2, 1000)] == 1 and st.shape_counts[(1, 500)] == 1
    assert st.nodes["a"].gpu_model == "NVIDIA-H100" and st.gpu_mem[st.index["a"]] == 40960


def test_snapshot_errors_are_one_line_user_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ForesightError, match="not JSON"):
        load_snapshot(bad)
    bad.write_text(json.dumps({"kind": "Pod"}))
    with pytest.raises(ForesightError, match="items"):
        load_snapshot(bad)
    with pytest.raises(ForesightError, match="not found"):
        load_snapshot(tmp_path / "missing.json")


def test_pod_events_move_allocation_and_node_deletion_drops_row():
    st = ClusterState()
    st.upsert_pod(make_pod("early", gpus=1, node="late-node", phase="Running"))
    st.upsert_node(make_node("late-node", gpus=2))  # pod seen before its node
    assert sorted(free_of(st, "late-node")) == [0.0, 1000.0]
    st.delete_pod("default", "early")
    assert free_of(st, "late-node") == [1000.0, 1000.0]
    st.upsert_pod(make_pod("pinned", fraction=0.3, node="late-node", phase="Running",
                           annotations={"foresight.io/gpu-index": "1"}))
    assert free_of(st, "late-node") == [1000.0, 700.0]
    st.delete_node("late-node")
    assert "late-node" not in st.index and not st.live.any()
    st.upsert_node(make_node("n2", gpus=16))  # wider than the arrays: columns grow
    assert free_of(st, "n2") == [1000.0] * 16


def test_rows_grow_past_initial_capacity():
    st = ClusterState()
    for i in range(200):
        st.upsert_node(make_node(f"n{i}", gpus=1))
    rows, known = st.rows(["n0", "nope", "n199"])
    assert known == ["n0", "n199"] and len(set(rows.tolist())) == 2
    assert st.gpu_count[rows].tolist() == [1, 1]


def wait_for(cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def api():
    fake = FakeKubeAPI().start()
    yield fake
    fake.stop()


def core(fake: FakeKubeAPI) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = fake.url
    return client.CoreV1Api(client.ApiClient(cfg))


@pytest.fixture(params=["threads", "loop"])
def apply_on(request):
    """Where the watcher applies state changes: its own threads, or an attached event loop
    (as `foresight serve` does); yields (attach function, thread the changes must run on)."""
    if request.param == "threads":
        yield (lambda w: None), None
        return
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    yield (lambda w: w.attach(loop)), t
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


def test_watch_ready_after_first_list_then_follows_events_and_resyncs_on_410(api, apply_on):
    api.put("nodes", make_node("a", gpus=2))
    api.put("pods", make_pod("p1", gpus=1, node="a", phase="Running"))
    api.fail_next = [500]  # the first list fails: backoff, then retry
    st = ClusterState()
    attach, thread = apply_on
    ran_on: set[str] = set()
    recompute = st._recompute
    st._recompute = lambda name: (ran_on.add(threading.current_thread().name),
                                  recompute(name))[1]
    w = ClusterWatcher(st, core(api), watch_timeout_s=5, backoff_s=0.05)
    attach(w)
    w.start()
    try:
        assert not st.ready
        assert wait_for(lambda: st.ready)
        assert w.errors["nodes"] + w.errors["pods"] >= 1
        assert sorted(free_of(st, "a")) == [0.0, 1000.0]
        api.put("nodes", make_node("b", gpus=4))
        api.put("pods", make_pod("p2", fraction=0.5, node="a", phase="Running"))
        assert wait_for(lambda: "b" in st.nodes and sorted(free_of(st, "a")) == [0.0, 500.0])
        api.delete("pods", "default/p1")
        assert wait_for(lambda: sorted(free_of(st, "a")) == [500.0, 1000.0])
        # history compacted while watching: an object changes that the open watch never sees,
        # the watch gets 410 Gone, the watcher lists again and catches up.
        api.compact()
        with api.cond:  # change state without an event, as compaction would hide it
            api.objects["nodes"].pop("b")
            api.rv += 1
        api.put("nodes", make_node("c", gpus=1))
        assert wait_for(lambda: w.resyncs["nodes"] >= 1)
        assert wait_for(lambda: "b" not in st.nodes and "c" in st.nodes)
        listed = [p for m, p, _ in api.requests if m == "GET" and "watch" not in p]
        assert len(listed) >= 4  # a failed list, the two first lists, the node resync
        if thread is not None:  # lists and events alike changed the state on the loop only
            assert ran_on == {thread.name}
        else:
            assert ran_on <= {"watch-nodes", "watch-pods"}
    finally:
        w.stop()


def test_watch_backs_off_exponentially_while_the_apiserver_is_down():
    st = ClusterState()
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: connection refused
    cfg.retries = False
    w = ClusterWatcher(st, client.CoreV1Api(client.ApiClient(cfg)), backoff_s=0.05,
                       backoff_max_s=0.4).start()
    try:
        time.sleep(1.5)
        assert not st.ready
        # with doubling delays 0.05..0.4 s, 1.5 s allows far fewer tries than with none
        assert 2 <= w.errors["nodes"] <= 9
    finally:
        w.stop()
    assert np.all(~st.live)


def test_an_unreadable_power_cap_is_no_cap_and_does_not_stop_the_node_list(caplog):
    odd = make_node("odd", gpus=8, annotations={"foresight.io/power-cap-watts": "lots"})
    st = ClusterState()
    with caplog.at_level("WARNING", logger="foresight.extender"):
        st.replace_nodes([odd, make_node("fine", gpus=8)])  # one bad value: the list still reads
    assert set(st.nodes) == {"odd", "fine"} and np.isnan(st.nodes["odd"].power_cap_w)
    assert "foresight.io/power-cap-watts 'lots'" in caplog.text
