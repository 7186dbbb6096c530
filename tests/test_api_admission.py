"""`POST /v1/interference` with a side's minimum speed (`a_min_speed` / `b_min_speed`): the
admission bound at that floor and the extender gate's decision, for a model fitted on the
committed H200 pairs."""
from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from test_scores import cluster, ctx

from artifacts.adapters import InterferenceAdapter
from features.h200 import load_h200_pairs
from forecaster.interference.model import InterferenceModel
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import ColocationSafety
from scheduler_hook.state import SHARING_LABEL
from serving.app import create_api
from serving.store import ModelStore

DATA = Path(__file__).resolve().parent.parent / "data"
FOUR = ["a_speed_pred", "b_speed_pred", "a_speed_p10", "b_speed_p10"]
ADMIT = FOUR + ["a_admit_bound", "b_admit_bound", "admitted", "admit_source"]
PODS = ["gemm_bf16", "decode_gemv", "embedding_gather", "resnet50_train"]  # incoming
RESIDENTS = ["hbm_copy", "kv_decode", "gpt_train", "small_kernels", "softmax_bw",
             "transformer_infer"]
FLOORS = [None, 0.5, 0.7, 0.8, 0.9]


@pytest.fixture(scope="module")
def model() -> InterferenceModel:
    if not (DATA / "h200b" / "pairs.csv").is_file():
        pytest.skip("data/h200* measurements not in this checkout")
    train = pd.concat([load_h200_pairs(DATA / d) for d in ("h200", "h200m", "h200b")],
                      ignore_index=True)
    m = InterferenceModel(n_estimators=40, n_threads=1).fit(train)
    m.train_speeds_ = pd.concat([train["a_speed"], train["b_speed"]]).dropna().to_numpy()
    assert {"mps", "timeslice"} <= set(m.admit_q_)
    return m


def client_for(model) -> TestClient:
    class Loaded:
        version = "7"

    Loaded.model = model

    class Store:
        def get(self, kind):
            return Loaded() if kind == "interference" else None

    app = create_api(ModelStore(None))
    app.state.foresight.store = Store()
    return TestClient(app)


def gate_refuses(model, pod: str, floor: float | None, residents: list[tuple]) -> list[bool]:
    """The extender's co-location gate on one shared GPU per resident (workload, floor,
    node sharing label): whether it refuses placing `pod` beside each."""
    ann = lambda f: {"foresight.io/min-speed": str(f)} if f else {}
    nodes = [make_node(f"n{i}", gpus=1, labels={SHARING_LABEL: label})
             for i, (_, _, label) in enumerate(residents)]
    pods = [make_pod(f"r{i}", fraction=0.5, node=f"n{i}", workload=w, phase="Running",
                     annotations=ann(f)) for i, (w, f, _) in enumerate(residents)]
    st = cluster(nodes, pods)
    prov = ProviderSet()
    prov.set("interference", InterferenceAdapter(model))
    c = ctx(st, make_pod("p", fraction=0.25, workload=pod, annotations=ann(floor)), prov)
    res = ColocationSafety().score(c)
    by_node = {st.names[r]: bool(v) for r, v in zip(c.rows, res.violation)}
    return [by_node[f"n{i}"] for i in range(len(residents))]


def test_the_api_admits_exactly_what_the_extender_gate_admits(model):
    client = client_for(model)
    api_ok, gate_ok, p10_ok, sources = [], [], [], set()
    for k, pod in enumerate(PODS):
        a_floor = [0.8, 0.6, None, 0.9][k]
        residents = [(w, FLOORS[(i + j + k) % len(FLOORS)], label)
                     for i, w in enumerate(RESIDENTS)
                     for j, label in enumerate(("mps", "time-slicing"))]
        refused = gate_refuses(model, pod, a_floor, residents)
        pairs = []
        for w, f, label in residents:
            p = {"a_workload": pod, "b_workload": w,
                 "sharing": "mps" if label == "mps" else "timeslice"}
            p.update({"a_min_speed": a_floor} if a_floor else {})
            p.update({"b_min_speed": f} if f else {})
            pairs.append(p)
        r = client.post("/v1/interference", json={"pairs": pairs})
        assert r.status_code == 200, r.text
        for p, pred, no in zip(pairs, r.json()["predictions"], refused):
            if "a_min_speed" not in p and "b_min_speed" not in p:
                assert list(pred) == FOUR and not no  # no floor: nothing to refuse
                continue
            assert list(pred) == ADMIT
            api_ok.append(pred["admitted"])
            gate_ok.append(not no)
            sources.add(pred["admit_source"])
            p10_ok.append(all(pred[f"{s}_speed_p10"] >= p[f"{s}_min_speed"]
                              for s in "ab" if f"{s}_min_speed" in p))
            for s in "ab":
                assert (pred[f"{s}_admit_bound"] is None) == (f"{s}_min_speed" not in p)
    assert api_ok == gate_ok
    assert len(set(api_ok)) == 2  # both decisions occur on these pairs
    assert api_ok != p10_ok  # the admission bound decided, not the p10
    assert sources == {"admission"}


def test_a_floor_out_of_range_is_a_422_naming_the_field(model):
    client = client_for(model)
    ok = {"a_workload": "gemm_bf16", "b_workload": "hbm_copy", "sharing": "mps"}
    for field, value in [("a_min_speed", 0.0), ("a_min_speed", 1.5), ("b_min_speed", -0.2),
                         ("b_min_speed", "0.8")]:
        r = client.post("/v1/interference", json={"pairs": [ok] * 3 + [{**ok, field: value}]})
        assert r.status_code == 422, (field, value)
        assert r.json()["error"].startswith(f"pairs.3.{field}"), r.json()["error"]
    # a floor is not a description of its side
    r = client.post("/v1/interference", json={"pairs": [
        {"a_min_speed": 0.8, "b_workload": "hbm_copy", "sharing": "mps"}]})
    assert r.status_code == 422 and r.json()["error"].startswith("pairs.0: side 'a'")
    assert client.post("/v1/interference", json={"pairs": [{**ok, "a_min_speed": 1}]}
                       ).status_code == 200  # 1.0 is a floor (the pod may not slow at all)


def test_without_a_floor_the_answer_is_the_old_one_and_the_cache_keys_on_floors(model):
    client = client_for(model)
    pair = {"a_workload": "gemm_bf16", "b_workload": "kv_decode", "sharing": "mps"}
    plain = client.post("/v1/interference", json={"pairs": [pair]})
    want = model.predict(pd.DataFrame([pair]))
    got = plain.json()["predictions"][0]
    assert list(got) == FOUR
    assert [got[c] for c in FOUR] == pytest.approx(want.iloc[0].tolist(), rel=1e-12)
    assert list(plain.json()) == ["model_version", "predictions"]
    strict = client.post("/v1/interference", json={"pairs": [{**pair, "a_min_speed": 0.9}]})
    loose = client.post("/v1/interference", json={"pairs": [{**pair, "a_min_speed": 0.5}]})
    again = client.post("/v1/interference", json={"pairs": [pair]})
    assert again.content == plain.content  # the floored answers did not enter its cache entry
    s, lo = strict.json()["predictions"][0], loose.json()["predictions"][0]
    assert {k: s[k] for k in FOUR} == got
    # mps calibrates a wider margin at 0.5 than at 0.9: each floor answers its own bound
    assert model.admit_q_["mps"]["0.5"] > model.admit_q_["mps"]["0.9"]
    assert lo["a_admit_bound"] < s["a_admit_bound"] <= got["a_speed_pred"]
    # in a request with floors, a pair without one answers the old shape, the same values
    mixed = client.post("/v1/interference", json={"pairs": [{**pair, "b_min_speed": 0.7},
                                                             pair]})
    assert mixed.json()["predictions"][1] == got
    # the batch path (above the cached size) answers as the cached one
    rows = [{**pair, "a_min_speed": 0.9}, {**pair, "a_min_speed": 0.5}] * 40
    batch = client.post("/v1/interference", json={"pairs": rows}).json()["predictions"]
    assert batch[0] == s and batch[1] == lo


@pytest.mark.parametrize("kind", ["baseline", "old artifact"])
def test_a_model_without_an_admission_table_answers_the_p10_and_says_so(model, kind):
    from training.kinds.interference import as_baseline

    m = copy.deepcopy(model)
    if kind == "baseline":
        m = as_baseline(m, "median")
    else:
        del m.admit_q_  # saved before the admission bound existed
    client = client_for(m)
    pairs = [{"a_workload": "gemm_bf16", "b_workload": w, "sharing": "mps",
              "a_min_speed": 0.8, "b_min_speed": f} for w in RESIDENTS for f in (0.5, 0.9)]
    r = client.post("/v1/interference", json={"pairs": pairs})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert {p["admit_source"] for p in preds} == {"p10"}
    for p, q in zip(preds, pairs):
        assert p["a_admit_bound"] == p["a_speed_p10"] and p["b_admit_bound"] == p["b_speed_p10"]
        assert p["admitted"] == (p["a_speed_p10"] >= 0.8 and p["b_speed_p10"] >= q["b_min_speed"])
    # and the gate, asked the same, refuses the same
    refused = gate_refuses(m, "gemm_bf16", 0.8, [(q["b_workload"], q["b_min_speed"], "mps")
                                                 for q in pairs])
    assert [not p["admitted"] for p in preds] == refused
    # a sharing mode the fitted model has no table for: the p10 too
    node = client_for(model).post("/v1/interference", json={"pairs": [
        {**pairs[0], "sharing": "node"}]}).json()["predictions"][0]
    assert node["admit_source"] == "p10" and node["a_admit_bound"] == node["a_speed_p10"]


def test_a_side_unlike_every_trained_workload_is_refused_and_the_api_says_why(model):
    client = client_for(model)
    # side a described by its solo fields: a known workload's, then a host-bound loop's
    known = load_h200_pairs(DATA / "h200b").iloc[0]
    fields = ["gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
              "mem_copy_util", "power_w", "step_s"]
    like = {f"a_{f}": float(known[f"a_{f}"]) for f in fields if pd.notna(known[f"a_{f}"])}
    odd = {**like, "a_gpu_util": 3.0, "a_sm_active": 0.01, "a_sm_occupancy": 0.001,
           "a_power_w": 95.0, "a_step_s": 40.0}
    base = {"b_workload": "gemm_bf16", "sharing": "mps", "a_min_speed": 0.5}
    r = client.post("/v1/interference", json={"pairs": [{**like, **base}, {**odd, **base}]})
    assert r.status_code == 200, r.text
    ok, new = r.json()["predictions"]
    assert ok["admit_source"] == "admission" and ok["a_admit_bound"] > 0
    assert new["admit_source"] == "unfamiliar" and new["a_admit_bound"] == 0.0
    assert new["admitted"] is False and new["a_speed_pred"] > 0  # the speeds are answered


def test_a_pod_of_a_key_never_seen_run_is_refused_beside_a_floor_and_the_reason_says_why(model):
    residents = [("gemm_bf16", None, "mps"), ("hbm_copy", 0.7, "time-slicing")]
    nodes = [make_node(f"n{i}", gpus=1, labels={SHARING_LABEL: label})
             for i, (_, _, label) in enumerate(residents)]
    pods = [make_pod(f"r{i}", fraction=0.5, node=f"n{i}", workload=w, phase="Running",
                     annotations={"foresight.io/min-speed": str(f)} if f else {})
            for i, (w, f, _) in enumerate(residents)]
    st = cluster(nodes, pods)
    prov = ProviderSet()
    prov.set("interference", InterferenceAdapter(model))
    for pod, floor in (("brand-new", 0.6), ("brand-new", None), ("decode_gemv", 0.6)):
        ann = {"foresight.io/min-speed": str(floor)} if floor else {}
        c = ctx(st, make_pod("p", fraction=0.25, workload=pod, annotations=ann), prov)
        res = ColocationSafety().score(c)
        by = {st.names[r]: i for i, r in enumerate(c.rows)}
        why = {n: res.violation_reason(i) if res.violation[i] else None for n, i in by.items()}
        if pod == "brand-new":
            # its own floor (n0), or the resident's (n1): nothing calibrated beside a stranger
            assert (why["n0"] is not None) == (floor is not None)
            assert why["n1"] is not None and "no bound is calibrated beside hbm_copy" in why["n1"]
        else:  # a known workload: the calibrated bound decides, no such note
            assert all(w is None or "no bound is calibrated" not in w for w in why.values())
    # the API answers the same pair as unfamiliar
    r = client_for(model).post("/v1/interference", json={"pairs": [
        {"a_workload": "brand-new", "b_workload": "gemm_bf16", "sharing": "mps",
         "a_min_speed": 0.6}]}).json()["predictions"][0]
    assert r["admit_source"] == "unfamiliar" and r["admitted"] is False
