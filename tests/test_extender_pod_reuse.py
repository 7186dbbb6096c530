"""The answers reuse the pod the watch parsed, when kube-scheduler sends that same version."""
from __future__ import annotations

import copy

import orjson

from scheduler_hook import watch
from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import parse_args


def _setup() -> tuple[ClusterState, ExtenderHook, watch.ClusterWatcher]:
    st = ClusterState()
    st.replace_all([make_node(f"n{i}", gpus=4) for i in range(3)], [])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    w = watch.ClusterWatcher(st, None)
    w.parsed = hook.watched_pods
    return st, hook, w


def _versioned(pod: dict, uid: str, rv: str) -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"].update(uid=uid, resourceVersion=rv)
    return pod


def test_a_watched_version_is_reused_and_any_other_is_parsed():
    st, hook, w = _setup()
    v1 = _versioned(make_pod("p", fraction=0.5, workload="w1"), "u1", "10")
    w._apply("pods", "ADDED", v1)
    sent = orjson.loads(orjson.dumps(v1))  # what kube-scheduler sends: an equal, new object
    got = hook.pod(sent)
    assert got is st.pending["default/p"] and got == parse_pod(sent)
    # a newer version the watch has not seen yet (annotation changed): parsed from the body
    v2 = _versioned(make_pod("p", fraction=0.25, workload="w1"), "u1", "11")
    fresh = hook.pod(v2)
    assert fresh.milli == 250 and fresh is not got
    # the same decisions either way
    names = ["n0", "n1", "n2"]
    body = orjson.dumps({"Pod": v1, "Nodes": None, "NodeNames": names})
    cold = ExtenderHook(st, ProviderSet(), load_config())
    assert hook.filter(parse_args(body)) == cold.filter(parse_args(body))
    assert hook.prioritize_json(parse_args(body)) == cold.prioritize_json(parse_args(body))


def test_only_unbound_pods_are_kept_and_no_more_than_the_bound(monkeypatch):
    monkeypatch.setattr(watch, "PARSED_KEEP", 3)
    _, hook, w = _setup()
    w._apply("pods", "ADDED", _versioned(make_pod("b", gpus=1, node="n0"), "ub", "5"))
    assert not hook.watched_pods
    for i in range(5):
        w._apply("pods", "ADDED", _versioned(make_pod(f"q{i}", gpus=1), f"u{i}", str(20 + i)))
    assert list(hook.watched_pods) == [("u2", "22"), ("u3", "23"), ("u4", "24")]
