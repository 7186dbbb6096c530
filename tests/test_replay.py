"""The openb replay: protocol, resource accounting, policies, curve and CLI, on tiny inputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main
from simulator.replay import POLICIES, build_workload, load_nodes, load_pods, replay
from simulator.replay.cluster import Cluster
from simulator.replay.policies import Foresight, Pod

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time," \
             "deletion_time,scheduled_time\n"


def write_nodes(path: Path, rows: list[tuple[int, int, int, str]]) -> Path:
    df = pd.DataFrame(rows, columns=["cpu_milli", "memory_mib", "gpu", "model"])
    df.insert(0, "sn", [f"n{i}" for i in range(len(df))])
    df.to_csv(path, index=False)
    return path


def write_pods(path: Path, rows: list[tuple[int, int, int, int, str]]) -> Path:
    with path.open("w") as f:
        f.write(POD_HEADER)
        for i, (c, m, n, g, spec) in enumerate(rows):
            f.write(f"p{i},{c},{m},{n},{g},{spec},LS,Running,0,1,0\n")
    return path


@pytest.fixture()
def small(tmp_path):
    rng = np.random.default_rng(3)
    nodes = write_nodes(tmp_path / "nodes.csv",
                        [(32000, 128000, 4, "A")] * 6 + [(16000, 64000, 2, "B")] * 6 +
                        [(64000, 256000, 8, "A")] * 3 + [(8000, 32000, 0, "")])
    shapes = [(4000, 8000, 1, 500, ""), (8000, 16000, 1, 1000, ""), (2000, 4000, 1, 250, "B"),
              (16000, 64000, 4, 1000, "A"), (6000, 8000, 0, 0, ""), (4000, 16000, 1, 700, "A")]
    rows = [shapes[i] for i in rng.integers(0, len(shapes), 60)]
    return load_nodes(nodes), load_pods(write_pods(tmp_path / "pods.csv", rows)), tmp_path


def test_cpu_only_nodes_are_not_part_of_the_cluster(small):
    nodes, _, _ = small
    assert len(nodes) == 15 and nodes.gpu_capacity_milli == (24 + 12 + 24) * 1000


def test_workload_shuffles_then_tops_up_to_tune(small):
    nodes, pods, _ = small
    work = build_workload(pods, nodes.gpu_capacity_milli, 1.3, seed=5)
    req = work.gpu_request
    assert req.sum() >= 1.3 * nodes.gpu_capacity_milli > req[:-1].sum()
    first = sorted(zip(work.cpu[: len(pods)], work.gpu_milli[: len(pods)], work.num_gpu[: len(pods)]))
    assert first == sorted(zip(pods.cpu, pods.gpu_milli, pods.num_gpu))  # a permutation
    assert not np.array_equal(work.cpu[: len(pods)], pods.cpu)
    cut = build_workload(pods, nodes.gpu_capacity_milli, 0.3, seed=5)
    assert cut.gpu_request.sum() >= 0.3 * nodes.gpu_capacity_milli > cut.gpu_request[:-1].sum()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_respects_capacity_spec_and_sharing(small, policy):
    nodes, pods, _ = small
    res = replay(nodes, pods, policy, seed=1, keep_placements=True)
    work = build_workload(pods, nodes.gpu_capacity_milli, 1.3, seed=1)
    c = Cluster(nodes)
    for i, node, slots in res.placements:  # re-apply and check every constraint
        assert work.spec[i] == "" or nodes.model[node] in work.spec[i].split("|")
        n, m = int(work.num_gpu[i]), int(work.gpu_milli[i])
        assert len(slots) == n and len(set(slots)) == n
        if n > 1 or m == 1000:
            assert all(c.gpu_free[node, s] == 1000 for s in slots)  # whole GPUs
        c.place(node, slots[0] if slots else 0, int(work.cpu[i]), int(work.mem[i]), n, m)
    assert (c.cpu_free >= 0).all() and (c.mem_free >= 0).all() and (c.gpu_free >= 0).all()
    assert res.pods == len(work) and res.unscheduled == len(work) - len(res.placements)
    curve = np.array([res.alloc_curve[str(n)] for n in range(131)])
    assert list(res.alloc_curve) == [str(n) for n in range(131)]
    assert (np.diff(curve) >= 0).all() and (curve <= np.arange(131) + 1e-9 + 100 * 8 / 60).all()
    assert res.alloc_at_100 == res.alloc_curve["100"] and 0 < res.alloc_at_100 <= 100


def test_fractional_pods_share_a_gpu_and_fgd_keeps_the_whole_one(tmp_path):
    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 64000, 1, "A")] * 2))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(1000, 1000, 1, 500, "")] * 2 +
                                [(1000, 1000, 1, 1000, "")]))
    for seed in range(5):
        res = replay(nodes, pods, "fgd", seed=seed, tune=0)  # tune 0: the trace as is
        assert res.unscheduled == 0 and res.alloc_curve["130"] == 100.0


def test_gpu_spec_is_honoured(tmp_path):
    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 64000, 2, "A"),
                                                        (64000, 64000, 2, "B")]))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(1000, 1000, 1, 1000, "B")] * 3))
    res = replay(nodes, pods, "random", seed=0, tune=0, keep_placements=True)
    assert [n for _, n, _ in res.placements] == [1, 1] and res.unscheduled == 1


def test_foresight_learns_only_from_arrived_pods(small):
    nodes, pods, _ = small
    pol = Foresight()
    pol.reset(Cluster(nodes), pods)
    pol.observe(Pod(4000, 8000, 1, 500, ""))
    assert len(pol.mix) == 1 and pol.mix.gpu_milli.tolist() == [500]
    pol.observe(Pod(16000, 64000, 4, 1000, "A"))
    assert sorted(pol.mix.num_gpu.tolist()) == [1, 4]


def test_fgd_beats_random_on_a_real_subsample():
    csv = TRACES / "openb-2023" / "csv"
    if not (csv / "openb_pod_list_default.csv").is_file():
        pytest.skip("shared openb traces absent")
    nodes = load_nodes(csv / "openb_node_list_gpu_node.csv")
    keep = np.random.default_rng(0).choice(len(nodes), 80, replace=False)
    nodes = type(nodes)(*(getattr(nodes, f)[keep] for f in ("name", "cpu", "mem", "gpus", "model")))
    pods = load_pods(csv / "openb_pod_list_default.csv")
    pods = pods.take(np.random.default_rng(1).choice(len(pods), 600, replace=False))
    fgd = np.mean([replay(nodes, pods, "fgd", s).alloc_at_100 for s in (1, 2)])
    rnd = np.mean([replay(nodes, pods, "random", s).alloc_at_100 for s in (1, 2)])
    assert fgd > rnd + 1.0


def test_cli_writes_r_json(small):
    _, _, tmp = small
    out = tmp / "R.json"
    rc = main(["replay", "--pods", str(tmp / "pods.csv"), "--nodes", str(tmp / "nodes.csv"),
               "--policy", "bestfit", "--seed", "3", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and {"policy", "seed", "alloc_curve", "alloc_at_100", "seconds"} <= set(doc)
    assert doc["policy"] == "bestfit" and doc["seed"] == 3 and len(doc["alloc_curve"]) == 131


@pytest.mark.parametrize("args,needle", [
    (["--policy", "nope"], "unknown policy"),
    (["--pods", "missing.csv"], "not found"),
])
def test_cli_user_errors_are_one_line(small, capsys, args, needle):
    _, _, tmp = small
    base = {"--pods": str(tmp / "pods.csv"), "--nodes": str(tmp / "nodes.csv")}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = ["replay"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_bad_pod_csv_is_a_user_error(tmp_path):
    bad = tmp_path / "p.csv"
    bad.write_text("name,cpu_milli\np0,1\n")
    write_nodes(tmp_path / "n.csv", [(1000, 1000, 1, "A")])
    assert main(["replay", "--pods", str(bad), "--nodes", str(tmp_path / "n.csv")]) == 2


def test_cli_compare_prints_ours_beside_published(small, capsys):
    _, _, tmp = small
    (tmp / "nodes.csv").rename(tmp / "openb_node_list_gpu_node.csv")
    (tmp / "pods.csv").rename(tmp / "openb_pod_list_default.csv")
    pub = tmp / "pub"
    pub.mkdir()
    cols = ["workload", "sc_policy", "tune", "seed", "total_gpus"] + [str(n) for n in range(131)]
    rows = [["openb_pod_list_default", name, 1.3, 42, 60] + [float(n) * 0.9 for n in range(131)]
            for name in ("06-FGD", "05-BestFit")]
    pd.DataFrame(rows, columns=cols).to_csv(pub / "analysis_allo_discrete.csv", index=False)
    out = tmp / "cmp.json"
    rc = main(["replay", "--compare", "--csv-dir", str(tmp), "--published", str(pub),
               "--policies", "bestfit,foresight", "--seeds", "1-2", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = {r["policy"]: r for r in doc["summary"]}
    assert rows["bestfit"]["seeds"] == 2 and rows["bestfit"]["published_mean"] == 90.0
    assert np.isnan(rows["foresight"]["published_mean"]) or rows["foresight"]["published_mean"] is None
    assert rows["foresight"]["published_fgd"] == 90.0
    assert "90.00" in capsys.readouterr().out  # the published number is printed


def test_foresight_fit_scope_charges_best_fit_only_to_the_pods_in_scope(small):
    from simulator.replay.policies import FIT_TIE
    nodes, pods, _ = small
    share, whole, cpu = Pod(4000, 8000, 1, 500, ""), Pod(8000, 16000, 1, 1000, ""), \
        Pod(6000, 8000, 0, 0, "")
    pol = Foresight()
    assert pol.fit_scope == "sharing+cpu"
    assert pol.fit_weight_for(share) == pol.fit_weight == pol.fit_weight_for(cpu)
    assert pol.fit_weight_for(whole) == FIT_TIE
    assert pol.fit_weight_for(Pod(16000, 64000, 4, 1000, "")) == FIT_TIE
    pol.fit_scope = "sharing"
    assert pol.fit_weight_for(share) == pol.fit_weight and pol.fit_weight_for(cpu) == FIT_TIE
    pol.fit_scope = "all"
    assert {pol.fit_weight_for(p) for p in (share, whole, cpu)} == {pol.fit_weight}

    # the scope changes the node scores of a whole-GPU pod, not those of a sharing pod
    def scores(scope, pod):
        p = Foresight()
        p.fit_scope = scope
        c = Cluster(nodes)
        p.reset(c, pods)
        p.observe(share), p.observe(whole)
        slots = c.place(0, 0, share.cpu, share.mem, 1, share.milli)  # node 0 is partly used
        p.placed(0, slots, share)
        ok, slot_ok = c.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
        return p.score(pod, ok, slot_ok)[0]

    assert np.allclose(scores("sharing+cpu", share), scores("all", share))
    assert not np.allclose(scores("sharing+cpu", whole), scores("all", whole))
