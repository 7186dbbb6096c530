"""The hot-path shortcuts of the extender give exactly the answers of the plain path."""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState
from scheduler_hook.wire import ArgsParser, WireError, parse_args

FIX = Path(__file__).parent / "fixtures" / "kube-scheduler-1.34"
NAMES = [f"node-{i:03d}" for i in range(100)]


def body(pod: dict, names: list[str] | None = NAMES, nodes: object = None) -> bytes:
    # Go field order (Pod, Nodes, NodeNames), no whitespace: what kube-scheduler sends
    return orjson.dumps({"Pod": pod, "Nodes": nodes, "NodeNames": names})


def test_args_parser_reuses_the_names_of_an_identical_array_and_agrees_with_parse_args():
    parse = ArgsParser()
    first = parse(body(make_pod("a", gpus=1)))
    second = parse(body(make_pod("b", fraction=0.5)))
    assert second.names is first.names  # one tuple: later caches key on its identity
    assert list(second.names) == NAMES and second.cache_capable and second.node_objects is None
    assert second.pod == parse_args(body(make_pod("b", fraction=0.5))).pod
    # another list, or the same list written differently, is parsed afresh
    other = parse(body(make_pod("c"), NAMES[:-1] + ["elsewhere"]))
    assert other.names is not first.names and other.names[-1] == "elsewhere"
    spaced = b'{"Pod": {}, "Nodes": null, "NodeNames": ' + orjson.dumps(NAMES) + b"}"
    assert list(parse(spaced).names) == NAMES
    # "NodeNames" first (not Go's order), and inside the pod: still the plain answer
    pod = make_pod("d", annotations={"NodeNames": json.dumps(NAMES)})
    moved = b'{"NodeNames":' + orjson.dumps(NAMES) + b',"Pod":' + orjson.dumps(pod) + b"}"
    got = parse(moved)
    assert got.pod == pod and list(got.names) == NAMES
    # Nodes set as well: NodeNames wins, as in parse_args
    both = parse(body(make_pod("e"), nodes={"items": []}))
    assert both.cache_capable and list(both.names) == NAMES


@pytest.mark.parametrize("bad, reason", [
    (b'{"Pod": 3, "Nodes": null, "NodeNames":', "Pod must be an object"),
    (b'{"Pod": {"x": }, "Nodes": null, "NodeNames":', "not JSON"),
    (b'["Pod", "Nodes", "NodeNames":', "not JSON"),
])
def test_args_parser_still_rejects_a_malformed_body_around_a_known_array(bad, reason):
    parse = ArgsParser()
    parse(body({}))  # remember the array
    with pytest.raises(WireError, match=reason):
        parse(bad + orjson.dumps(NAMES) + b"}")


def test_prioritize_bytes_equal_the_plain_answer_for_every_score():
    st = ClusterState()
    nodes = [make_node(n, gpus=8) for n in NAMES]
    # fill node i with i % 9 whole GPUs: packing spreads the scores over 0-10
    pods = [make_pod(f"{n}-r{k}", gpus=1, node=n, phase="Running")
            for i, n in enumerate(NAMES) for k in range(i % 9)]
    st.replace_all(nodes, pods)
    hook = ExtenderHook(st, ProviderSet(), load_config())
    parse = ArgsParser()
    for shape in (dict(gpus=1), dict(gpus=4), dict(fraction=0.25)):
        raw = body(make_pod("p", **shape), NAMES + ["ghost"])
        fast = orjson.loads(hook.prioritize_json(parse(raw)))
        plain = hook.prioritize(parse_args(raw))
        assert fast == plain
    assert {h["Score"] for h in fast} >= {0, 10} and len({h["Score"] for h in fast}) > 3
    assert hook.prioritize_json(parse_args(body(make_pod("q"), ["ghost"]))) == b"[]"


def test_answers_name_the_right_hosts_after_a_resync_reorders_the_rows():
    st = ClusterState()
    st.replace_all([make_node(n, gpus=1) for n in NAMES],
                   [make_pod("r", gpus=1, node=NAMES[0], phase="Running")])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    parse = ArgsParser()
    before = orjson.loads(hook.prioritize_json(parse(body(make_pod("p1", gpus=1)))))
    assert {h["Host"]: h["Score"] for h in before}[NAMES[0]] == 0  # full node
    # same number of nodes, listed in reverse: every row now belongs to another name
    st.replace_all([make_node(n, gpus=1) for n in reversed(NAMES)],
                   [make_pod("r", gpus=1, node=NAMES[0], phase="Running")])
    after = orjson.loads(hook.prioritize_json(parse(body(make_pod("p2", gpus=1)))))
    assert [h["Host"] for h in after] == NAMES
    assert {h["Host"]: h["Score"] for h in after}[NAMES[0]] == 0


def test_captured_bodies_parse_the_same_through_the_parser():
    parse = ArgsParser()
    for name in ("extender_args_node_cache.json", "extender_args_full_nodes.json"):
        raw = (FIX / name).read_bytes()
        a, b = parse(raw), parse_args(raw)
        assert a.pod == b.pod and list(a.names) == list(b.names)
        assert a.cache_capable == b.cache_capable and a.node_objects == b.node_objects


def test_filter_answer_sends_the_request_array_back_only_when_every_node_passed():
    from scheduler_hook.app import verb_handlers

    st = ClusterState()
    # the first ten nodes' one GPU is taken whole: no room there for a GPU share
    st.replace_all([make_node(n, gpus=1) for n in NAMES],
                   [make_pod(f"{n}-r", gpus=1, node=n, phase="Running") for n in NAMES[:10]])
    hook = ExtenderHook(st, ProviderSet(), load_config())
    handle = verb_handlers(hook)["/scheduler/filter"]
    spaced = orjson.dumps(NAMES + ["ghost"]).replace(b",", b", ")  # as sent, whitespace too
    for pod, rejected in ((make_pod("whole", gpus=1), 10), (make_pod("share", fraction=0.5), 10),
                          (make_pod("none"), 0)):
        for names_json in (orjson.dumps(NAMES + ["ghost"]), spaced):
            raw = b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + \
                names_json + b"}"
            status, answer = handle(raw)
            plain = hook.filter(parse_args(raw))
            assert status == 200 and orjson.loads(answer) == plain
            failed = len(plain["FailedNodes"]) + len(plain["FailedAndUnresolvableNodes"])
            assert len(plain["NodeNames"]) == len(NAMES) + 1 - failed
            if pod["metadata"]["name"] == "share":
                assert failed == rejected
            if failed == 0:  # the array went back as it came, spaces and all
                assert names_json in answer
