"""A pod or node the extender cannot have meant is a PodSpecError / ValueError naming the field
(HTTP 400), never an exception deeper in (a 500) or a silent reading of nonsense."""
from __future__ import annotations

import copy

import pytest

from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.nodeinfo import parse_node
from scheduler_hook.podspec import PodSpecError, parse_pod
from scheduler_hook.wire import WireError, parse_args


def _gpu(value):
    pod = make_pod("p", gpus=1)
    for kind in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][kind]["nvidia.com/gpu"] = value
    return pod


@pytest.mark.parametrize("value", ["Infinity", "1e308", 10**30, "1.5", "-1", -5, "NaN"])
def test_a_gpu_count_that_is_not_a_whole_device_count_is_refused(value):
    with pytest.raises(PodSpecError, match=r"resources\.limits\[nvidia\.com/gpu\]"):
        parse_pod(_gpu(value))


@pytest.mark.parametrize("value", ["2", 2, "0", "1k"])
def test_whole_gpu_counts_still_parse(value):
    assert parse_pod(_gpu(value)).gpus == {"2": 2, 2: 2, "0": 0, "1k": 1000}[value]


def test_a_mig_count_is_checked_the_same_way():
    pod = make_pod("p")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.5gb": "Infinity"}}
    with pytest.raises(PodSpecError, match=r"nvidia\.com/mig-1g\.5gb"):
        parse_pod(pod)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.5gb"] = "2"
    assert (parse_pod(pod).mig_profile, parse_pod(pod).mig_count) == ("1g.5gb", 2)


@pytest.mark.parametrize("ann, field", [
    ({"foresight.io/min-speed": "2"}, "min-speed"),
    ({"foresight.io/min-speed": "-1"}, "min-speed"),
    ({"foresight.io/min-speed": "nan"}, "min-speed"),
    ({"foresight.io/slo-min-speed": "5"}, "slo-min-speed"),
    ({"gpu-memory": "-1"}, "gpu-memory"),
    ({"gpu-memory": "inf"}, "gpu-memory"),
    ({"gpu-fraction": "1e-9"}, "gpu-fraction"),
    ({"foresight.io/gpu-index": "-1"}, "gpu-index"),
])
def test_annotations_out_of_range_are_refused_by_name(ann, field):
    with pytest.raises(PodSpecError, match=field):
        parse_pod(make_pod("p", gpus=0 if "gpu-memory" in ann or "gpu-fraction" in ann else 1,
                           annotations=ann))


def test_annotations_in_range_keep_their_meaning():
    assert parse_pod(make_pod("p", gpus=1, annotations={"foresight.io/min-speed": "0.8"})
                     ).slo_min_speed == 0.8
    assert parse_pod(make_pod("p", gpus=1, annotations={"foresight.io/min-speed": "0"})
                     ).slo_min_speed == 0.0
    assert parse_pod(make_pod("p", fraction=0.001)).milli == 1
    assert parse_pod(make_pod("p", gpu_memory_mib=20000)).gpu_memory_mib == 20000


@pytest.mark.parametrize("edit, field", [
    (lambda p: p["spec"].__setitem__("containers", 5), "spec.containers"),
    (lambda p: p["spec"].__setitem__("priority", "inf"), "spec.priority"),
    (lambda p: p["spec"].__setitem__("priority", "nan"), "spec.priority"),
    (lambda p: p["spec"].__setitem__("priority", 2**40), "spec.priority"),
    (lambda p: p["metadata"].__setitem__("namespace", 5), "namespace"),
    (lambda p: p["metadata"].__setitem__("name", "x" * 300), "name"),
    (lambda p: p["spec"].__setitem__("affinity", {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
            "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": 5}]}]}}}), "values"),
    (lambda p: p["spec"].__setitem__("affinity", {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [None, 5]}}}),
     "nodeSelectorTerms"),
])
def test_malformed_pod_fields_are_named(edit, field):
    pod = make_pod("p", gpus=1)
    edit(pod)
    with pytest.raises(PodSpecError, match=field):
        parse_pod(pod)


@pytest.mark.parametrize("value", ["Infinity", "1e308", "-1", "abc"])
def test_node_allocatable_that_is_not_a_device_count_is_named(value):
    node = make_node("n", gpus=8)
    node["status"]["allocatable"]["nvidia.com/gpu"] = value
    with pytest.raises(ValueError, match=r"allocatable\[nvidia\.com/gpu\]"):
        parse_node(node)
    node = copy.deepcopy(node)
    node["status"]["allocatable"] = {"nvidia.com/mig-1g.10gb": value}
    node["metadata"]["labels"]["nvidia.com/mig.strategy"] = "mixed"
    with pytest.raises(ValueError, match=r"allocatable\[nvidia\.com/mig-1g\.10gb\]"):
        parse_node(node)


@pytest.mark.parametrize("meta", [None, [], 5])
def test_a_node_list_item_without_a_metadata_object_is_a_wire_error(meta):
    body = b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": %s}]}}' \
        % str(meta).replace("None", "null").encode()
    with pytest.raises(WireError, match=r"Nodes\.items\[0\]\.metadata\.name"):
        parse_args(body)


@pytest.mark.parametrize("ann, says", [
    ({"foresight.io/gang-size": "-1"}, "gang-size: a whole number of pods"),
    ({"foresight.io/gang-size": "1e9"}, "gang-size: a whole number of pods"),
    ({"foresight.io/gang-min": "-1"}, "gang-min: a whole number of pods"),
    ({"foresight.io/gang-size": "2", "foresight.io/gang-min": "5"}, "above the gang's size 2"),
    ({"foresight.io/min-speed": 10 ** 400}, "min-speed: not a number"),  # a 401-digit JSON int
    ({"gpu-memory": 10 ** 400}, "gpu-memory: not a number"),
])
def test_our_gang_annotations_and_giant_numbers_are_named(ann, says):
    with pytest.raises(PodSpecError, match=says):
        parse_pod(make_pod("p", gpus=0 if "gpu-memory" in ann else 1, annotations=ann))


def test_a_giant_priority_is_named_and_sane_gangs_still_parse():
    pod = make_pod("p", gpus=1, annotations={"foresight.io/gang-size": "4",
                                            "foresight.io/gang-min": "2"})
    assert (parse_pod(pod).gang_size, parse_pod(pod).gang_min) == (4, 2)
    pod["spec"]["priority"] = 10 ** 400
    with pytest.raises(PodSpecError, match="spec.priority: not a number"):
        parse_pod(pod)
