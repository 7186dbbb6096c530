"""Beyond-packing replay mode and Foresight's stranded-GPU term, on tiny synthetic inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from foresight.errors import ForesightError
from simulator.replay import load_nodes, load_pods, replay
from simulator.replay.cluster import Cluster
from simulator.replay.colocation import ColocationMode
from simulator.replay.policies import Foresight
from test_replay import write_nodes, write_pods


def gavel_table(path, good: set[tuple[int, int]]):
    jobs = [f"job{i}" for i in range(3)]
    rows = []
    for gpu in ("v100", "p100"):
        for a in range(3):
            for b in range(3):
                s = 0.95 if (a, b) in good or (b, a) in good else 0.5
                rows.append(("physical", gpu, jobs[a], 1, jobs[b], 1, 1.0, 1.0, s, s, s, s))
    pd.DataFrame(rows, columns=["source", "gpu", "job_a", "scale_a", "job_b", "scale_b",
                                "solo_thr_a", "solo_thr_b", "colo_thr_a", "colo_thr_b",
                                "norm_speed_a", "norm_speed_b"]).to_csv(path, index=False)
    return path


@pytest.fixture()
def colo(tmp_path):
    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 256000, 4, "A")] * 8))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(2000, 4000, 1, 300, "")] * 60 +
                                [(8000, 16000, 1, 1000, "")] * 6))
    mode = ColocationMode(gavel_table(tmp_path / "g.csv", {(0, 0), (1, 1), (2, 2)}))
    return nodes, pods, mode


def test_colocation_counts_are_reported_and_foresight_avoids_predicted_slow_pairs(colo):
    nodes, pods, mode = colo
    out = {}
    for pol in ("bestfit", "fgd", "foresight"):
        slow = [replay(nodes, pods, pol, s, tune=0.8, mode=mode).extra["slow_pairs"]
                for s in range(3)]
        out[pol] = sum(slow)
    r = replay(nodes, pods, "foresight", 0, tune=0.8, mode=mode)
    assert {"sharing_pods", "colocated_pairs", "slow_pairs", "memory_overflow_pods"} <= set(r.extra)
    assert r.extra["colocated_pairs"] > 0
    assert out["foresight"] < min(out["bestfit"], out["fgd"])


def test_same_seed_same_workloads(colo):
    nodes, pods, mode = colo
    a = replay(nodes, pods, "bestfit", 4, tune=0.8, mode=mode).extra
    b = replay(nodes, pods, "bestfit", 4, tune=0.8, mode=mode).extra
    assert a == b


def test_missing_gavel_table_is_a_user_error(tmp_path):
    with pytest.raises(ForesightError):
        ColocationMode(tmp_path / "absent.csv")


def test_stranded_gpu_counts_free_gpu_beyond_what_cpu_covers(tmp_path):
    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(16000, 64000, 4, "A")]))
    pol = Foresight()
    pol.reset(Cluster(nodes), load_pods(write_pods(tmp_path / "p.csv", [(1, 1, 0, 0, "")])))
    pol.strand_demand[:] = (8000.0, 1.0, 1000.0)  # GPU pods ask 8 cores per GPU, little memory
    got = pol.stranded(np.array([4000.0, 1000.0]), np.array([16000, 16000]),
                       np.array([64000, 64000]))
    assert np.allclose(got, [2000.0, 0.0])  # 16 cores cover 2 of 4 free GPUs


def zeus_table(path):
    rows = [("d", "hot", 1, "sgd", 250, 1.0, 240.0), ("d", "hot", 2, "sgd", 250, 1.0, 230.0),
            ("d", "cool", 1, "sgd", 250, 1.0, 60.0), ("d", "cool", 2, "sgd", 250, 1.0, 50.0),
            ("d", "cool", 1, "sgd", 100, 2.0, 40.0)]
    pd.DataFrame(rows, columns=["dataset", "network", "batch_size", "optimizer", "power_limit",
                                "time_per_epoch", "average_power"]).to_csv(path, index=False)
    return path


def test_power_mode_keeps_foresight_under_the_cap_where_baselines_go_over(tmp_path):
    from simulator.replay.power import PowerMode

    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 256000, 4, "A")] * 20))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(4000, 8000, 1, 1000, "")] * 40))
    mode = PowerMode(zeus_table(tmp_path / "z.csv"), rack_nodes=2, cap_frac=0.45)
    over = {p: sum(replay(nodes, pods, p, s, tune=0.9, mode=mode).extra["racks_over_cap"]
                   for s in range(3)) for p in ("bestfit", "fgd", "foresight")}
    assert over["foresight"] == 0 and max(over["bestfit"], over["fgd"]) > 0
    r = replay(nodes, pods, "foresight", 0, tune=0.9, mode=mode)
    assert r.extra["racks"] == 10 and r.extra["worst_rack_power_over_cap"] <= 1.0


def test_colocation_prediction_maps_the_other_gpu_model_through_measured_pairs(tmp_path):
    # truth: a job beside itself runs at 0.95/0.9, any other pair at 0.5; the other GPU model
    # measured everything 0.3 lower, so raw it calls every pair slow
    truth = {(0, 0): 0.95, (1, 1): 0.9}
    rows = []
    for gpu, shift in (("v100", 0.0), ("p100", -0.3)):
        for a in range(3):
            for b in range(3):
                s = truth.get((a, b), 0.5) + shift
                rows.append(("physical", gpu, f"job{a}", 1, f"job{b}", 1, 1, 1, s, s, s, s))
    path = tmp_path / "g.csv"
    pd.DataFrame(rows, columns=["source", "gpu", "job_a", "scale_a", "job_b", "scale_b",
                                "solo_thr_a", "solo_thr_b", "colo_thr_a", "colo_thr_b",
                                "norm_speed_a", "norm_speed_b"]).to_csv(path, index=False)
    mode = ColocationMode(path)
    mode.start(8, (4, 1), seed=0)
    mode.workload[:] = [0, 0, 1, 0, 1, 2, 1, 1]
    mode.placed(0, 0, [0], 300)  # job0 alone on GPU 0
    assert mode.predicted_slow(1)[0, 0]  # raw: job0 beside job0 looks slow (0.65)
    for i, node in ((2, 1), (3, 1), (4, 2), (5, 2), (6, 3), (7, 3)):  # measure 01, 12, 11
        mode.placed(i, node, [0], 300)
    assert mode.measured[0, 1] and mode.measured[1, 2] and mode.measured[1, 1]
    assert not mode.measured[0, 0]
    assert np.isclose(mode.pred_pair[0, 0], 0.95)  # fitted line, never measured
    assert not mode.predicted_slow(1)[0, 0]  # job0 may now join job0
    mode.workload[1] = 2
    assert mode.predicted_slow(1)[0, 0]  # job2 beside job0 stays slow


def test_foresight_refuses_gpus_where_memory_is_predicted_to_overflow(tmp_path):
    class BigPeaks(ColocationMode):
        def start(self, n_pods, shape, seed):
            super().start(n_pods, shape, seed)
            self.workload[:], self.ratio[:] = 0, 1.3  # one job, peaks at 1.3 x its share

    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 256000, 1, "A")]))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(1000, 1000, 1, 400, "")] * 3))
    mode = BigPeaks(gavel_table(tmp_path / "g.csv", {(0, 0)}))
    base = replay(nodes, pods, "bestfit", 0, tune=1.0, mode=mode)
    assert base.extra["memory_overflow_pods"] == 2  # 2 x 400 x 1.3 > 1000
    r = replay(nodes, pods, "foresight", 0, tune=1.0, mode=mode)
    # the second pod would overflow even as a last resort: it is refused, not squeezed in
    assert r.extra["memory_overflow_pods"] == 0 and r.unscheduled == 2


def test_power_report_gives_each_rack_power_as_a_share_of_its_nameplate(tmp_path):
    from simulator.replay.power import PowerMode

    nodes = load_nodes(write_nodes(tmp_path / "n.csv", [(64000, 256000, 4, "A")] * 20))
    pods = load_pods(write_pods(tmp_path / "p.csv", [(4000, 8000, 1, 1000, "")] * 40))
    mode = PowerMode(zeus_table(tmp_path / "z.csv"), rack_nodes=2, cap_frac=0.45)
    r = replay(nodes, pods, "bestfit", 0, tune=0.9, mode=mode).extra
    frac = np.array(r["rack_power_frac"])
    assert len(frac) == r["racks"] and r["racks_over_cap"] == int((frac > 0.45).sum())
    assert np.isclose(frac.max() / 0.45, r["worst_rack_power_over_cap"], atol=2e-3)
    assert np.isclose(frac.mean(), r["cluster_power_frac"], atol=1e-3)  # equal racks
