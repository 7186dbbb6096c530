"""`POST /v1/interference/gpu`: a pending pod and the pods already on one GPU, answered with
the extender gate's own rule (delays add, each side held to its own floor)."""
from __future__ import annotations

import numpy as np
import pytest
from test_api_admission import client_for, model  # noqa: F401 - the fixture
from test_scores import cluster, ctx

from artifacts.adapters import InterferenceAdapter
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import ColocationSafety
from scheduler_hook.state import SHARING_LABEL

CASES = [  # (pending pod, its floor, [(resident, floor)], sharing)
    ("gemm_bf16", 0.8, [("hbm_copy", None), ("kv_decode", 0.5)], "mps"),
    ("decode_gemv", 0.6, [("gpt_train", None), ("small_kernels", None)], "timeslice"),
    ("resnet50_train", None, [("softmax_bw", 0.7), ("transformer_infer", 0.9)], "timeslice"),
    ("embedding_gather", 0.5, [("hbm_copy", None), ("gpt_train", 0.5),
                               ("small_kernels", None)], "mps"),
    ("gemm_bf16", 0.9, [("transformer_infer", None), ("kv_decode", None)], "timeslice"),
    ("gemm_bf16", 0.6, [("small_kernels", None)], "mps"),
    ("resnet50_train", 0.3, [("small_kernels", None), ("decode_gemv", None)], "timeslice"),
]


def gate_admits(model, pod, floor, residents, sharing) -> bool:  # noqa: F811
    """The extender's gate on a 1-GPU node holding every resident."""
    ann = lambda f: {"foresight.io/min-speed": str(f)} if f else {}  # noqa: E731
    label = "mps" if sharing == "mps" else "time-slicing"
    st = cluster([make_node("n", gpus=1, labels={SHARING_LABEL: label})],
                 [make_pod(f"r{i}", fraction=0.2, node="n", workload=w, phase="Running",
                           annotations=ann(f)) for i, (w, f) in enumerate(residents)])
    prov = ProviderSet()
    prov.set("interference", InterferenceAdapter(model))
    res = ColocationSafety().score(ctx(st, make_pod("p", fraction=0.2, workload=pod,
                                                    annotations=ann(floor)), prov))
    return not bool(res.violation[0])


def body(pod, floor, residents, sharing) -> dict:
    side = lambda w, f: {"workload": w, **({"min_speed": f} if f else {})}  # noqa: E731
    return {"sharing": sharing, "pod": side(pod, floor),
            "residents": [side(w, f) for w, f in residents]}


def test_the_gpu_answer_is_the_extender_gates_and_composes_the_pair_answers(model):  # noqa: F811
    client = client_for(model)
    answers = []
    for pod, floor, residents, sharing in CASES:
        r = client.post("/v1/interference/gpu", json=body(pod, floor, residents, sharing))
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["admitted"] == gate_admits(model, pod, floor, residents, sharing)
        answers.append(out["admitted"])
        # the pod's speed: its pairwise speeds (as /v1/interference answers them) combined
        pairs = [{"a_workload": pod, "b_workload": w, "sharing": sharing}
                 for w, _ in residents]
        pw = [p["a_speed_pred"] for p in client.post(
            "/v1/interference", json={"pairs": pairs}).json()["predictions"]]
        want = 1 / (1 + sum(1 / min(max(s, 0.01), 1.0) - 1 for s in pw))
        assert out["pod"]["speed_pred"] == pytest.approx(want, rel=1e-9)
        assert out["pod"]["speed_pred"] <= min(pw) + 1e-12  # company never speeds it up
        assert (out["pod"]["bound"] is None) == (floor is None)
        assert [x["min_speed"] for x in out["residents"]] == [f for _, f in residents]
    assert len(set(answers)) == 2  # both decisions occur


def test_undescribed_pods_and_bad_bodies_are_422s_naming_the_field(model):  # noqa: F811
    client = client_for(model)
    ok = body("gemm_bf16", 0.8, [("hbm_copy", None)], "mps")
    r = client.post("/v1/interference/gpu", json={**ok, "residents": [{"min_speed": 0.5}]})
    assert r.status_code == 422 and r.json()["error"].startswith("residents.0: not described")
    r = client.post("/v1/interference/gpu", json={**ok, "pod": {"min_speed": 0.5}})
    assert r.status_code == 422 and r.json()["error"].startswith("pod: not described")
    r = client.post("/v1/interference/gpu", json={**ok, "residents": []})
    assert r.status_code == 422 and r.json()["error"].startswith("residents")
    r = client.post("/v1/interference/gpu", json={**ok, "sharing": "node"})
    assert r.status_code == 422 and r.json()["error"].startswith("sharing")
    r = client.post("/v1/interference/gpu", json={**ok, "pod": {"workload": "x",
                                                                "min_speed": 1.5}})
    assert r.status_code == 422 and r.json()["error"].startswith("pod.min_speed")
    many = [{"workload": "hbm_copy"}] * 40
    r = client.post("/v1/interference/gpu", json={**ok, "residents": many})
    assert r.status_code == 422 and r.json()["error"].startswith("residents")


def test_three_busy_pods_get_less_than_any_pair_gives(model):  # noqa: F811
    client = client_for(model)
    two = client.post("/v1/interference/gpu", json=body(
        "gemm_bf16", None, [("gemm_fp32", None)], "timeslice")).json()
    three = client.post("/v1/interference/gpu", json=body(
        "gemm_bf16", None, [("gemm_fp32", None), ("gemm_fp32", None)], "timeslice")).json()
    assert three["pod"]["speed_pred"] < two["pod"]["speed_pred"]
    s = two["pod"]["speed_pred"]
    assert three["pod"]["speed_pred"] == pytest.approx(1 / (1 + 2 * (1 / s - 1)), rel=1e-9)
    assert np.isclose(three["residents"][0]["speed_pred"], three["residents"][1]["speed_pred"])
