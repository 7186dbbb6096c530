"""Topology replay (issue 31): racks laid on the nodes, spread gangs run slower, and the three
policies' rules on a cluster small enough to follow by hand."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.replay.data import Nodes
from simulator.timeline.topology import BLOCK, RACK, openb_levels, run_topology, summarize
from simulator.timeline.workload import Jobs


def _nodes(n: int = 4) -> Nodes:
    return Nodes(np.array([f"n{i}" for i in range(n)], dtype=object), np.full(n, 64000),
                 np.full(n, 512000), np.full(n, 8), np.full(n, "H100", dtype=object))


def _jobs(single_s: float = 100.0, gang_s: float = 10000.0) -> Jobs:
    """Two 8-GPU pods at t=0, then a gang of two 8-GPU pods at t=1."""
    return Jobs(np.array([0.0, 0.0, 1.0]), np.array([single_s, single_s, gang_s]),
                np.array([1, 1, 2]), np.array([8, 8, 8]), np.array([1000, 1000, 1000]),
                np.zeros(3, np.int64), np.zeros(3, np.int64), ("t",))


KW = dict(rack_nodes=2, block_racks=1, spread_rack=1.3, spread_block=1.6)


def _split_seed() -> int:
    """A seed whose FGD ties put the two single pods in different racks: no rack then holds
    the gang at t=1."""
    for seed in range(50):
        r = run_topology(_nodes(), _jobs(), "fgd", 0.0, 10.0, seed=seed, **KW)
        if len({r["nodes"][0][0] // 2, r["nodes"][1][0] // 2}) == 2:
            return seed
    pytest.skip("no seed splits the singles")


def test_levels_laid_on_the_openb_nodes():
    dom = openb_levels(_nodes(40), rack_nodes=16, block_racks=2)
    assert dom.codes[RACK].tolist() == [0] * 16 + [1] * 16 + [2] * 8
    assert dom.codes[BLOCK].tolist() == [0] * 32 + [1] * 8
    assert dom.nested(RACK, BLOCK)


def test_fgd_spreads_and_pays_the_slowdown_required_waits_for_a_rack():
    seed = _split_seed()
    jobs = _jobs()
    fgd = run_topology(_nodes(), jobs, "fgd", 0.0, 1e6, seed=seed, **KW)
    assert fgd["start"][2] == 1.0 and fgd["spread"][2] == 2  # one rack per block here
    assert fgd["run"][2] == pytest.approx(10000 * 1.6)
    req = run_topology(_nodes(), jobs, "required", 0.0, 1e6, seed=seed, **KW)
    assert req["start"][2] == pytest.approx(100.0) and req["spread"][2] == 0
    assert req["run"][2] == 10000
    s = summarize(jobs, req, 0.0, 1e6)
    assert s["gangs"] == 1 and s["gangs_spread_racks"] == 0 and s["gangs_unstarted"] == 0


def test_topology_waits_when_departures_come_soon_and_spreads_when_they_do_not():
    seed = _split_seed()
    jobs = _jobs()
    soon = run_topology(_nodes(), jobs, "topology", 0.0, 1e6, seed=seed,
                        runtime_p50=jobs.duration, **KW)
    assert soon["start"][2] == pytest.approx(100.0) and soon["spread"][2] == 0
    # the singles are believed to run for days: waiting costs more than spreading
    late = run_topology(_nodes(), jobs, "topology", 0.0, 1e6, seed=seed,
                        runtime_p50=np.array([1e6, 1e6, 10000.0]), **KW)
    assert late["start"][2] == 1.0 and late["spread"][2] == 2
    with pytest.raises(ValueError, match="predicted run times"):
        run_topology(_nodes(), jobs, "topology", 0.0, 10.0)


def test_elastic_gang_starts_smaller_in_one_rack_and_runs_longer():
    seed = _split_seed()
    jobs = _jobs()
    res = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                       runtime_p50=np.array([1e6, 1e6, 10000.0]), **KW)
    assert res["start"][2] == 1.0 and res["size"][2] == 1 and res["spread"][2] == 0
    assert res["run"][2] == pytest.approx(20000.0)  # the same work on half the pods
    s = summarize(jobs, res, 0.0, 1e6)
    assert s["gangs_started_smaller"] == 1 and s["policy"] == "topology-elastic"
    assert s["gang_gpu_h_done_per_day"] == pytest.approx(2 * 8 * 10000 / 3600 / (1e6 / 86400), abs=0.05)


def test_a_waiting_gang_holds_its_rack_against_a_later_single_unless_it_ends_first():
    # one rack busy until t=100 and t=200, the other for days (a seed whose ties put the two
    # short singles in one rack). A gang of two 8-GPU pods arrives at t=1 and waits for that
    # rack (spreading costs more); a long 8-GPU single arrives at t=2 and would take the node
    # that frees at t=100
    nodes = _nodes()
    jobs = Jobs(np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0]),
                np.array([100.0, 200.0, 1e6, 1e6, 1e5, 5e4]),
                np.array([1, 1, 1, 1, 2, 1]), np.full(6, 8), np.full(6, 1000),
                np.zeros(6, np.int64), np.zeros(6, np.int64), ("t",))
    kw = dict(KW, rack_nodes=2, block_racks=2)
    for seed in range(20):
        free = run_topology(nodes, jobs, "topology", 0.0, 1e7, seed=seed,
                            runtime_p50=jobs.duration, **kw)
        if free["nodes"][0][0] // 2 == free["nodes"][1][0] // 2:
            break
    else:
        pytest.skip("no seed puts the two short singles in one rack")
    # without a hold the single takes n0 at t=100: the gang waits for it to end or spreads
    assert free["start"][5] == pytest.approx(100.0) and free["start"][4] > 200.0
    held = run_topology(nodes, jobs, "topology", 0.0, 1e7, seed=seed,
                        runtime_p50=jobs.duration, hold=1, **kw)
    assert held["start"][4] == pytest.approx(200.0) and held["spread"][4] == 0
    assert held["start"][5] > 200.0
    # a single predicted to end before the gang's predicted start may use the held node
    short = Jobs(*[a.copy() for a in (jobs.arrival, jobs.duration, jobs.pods, jobs.gpus,
                                      jobs.milli, jobs.priority, jobs.tenant)], ("t",))
    short.duration[5] = 50.0
    back = run_topology(nodes, short, "topology", 0.0, 1e7, seed=seed,
                        runtime_p50=short.duration, hold=1, **kw)
    assert back["start"][5] == pytest.approx(100.0) and back["start"][4] == pytest.approx(200.0)


def test_big_work_counts_what_each_job_delivers_inside_the_window():
    from simulator.timeline.topology import big_work_gpu_h
    jobs = _jobs()  # two 8-GPU singles of 100 s, a 2 x 8 gang of 10,000 s
    res = {"start": np.array([0.0, np.nan, 50.0]), "run": np.array([100.0, 100.0, 20000.0])}
    # the single: all of its 8 x 100 GPU-s; the gang runs twice as long as its work (half
    # size or spread): 10,000 of its 20,000 s lie in [0, 10050), half of its work
    got = big_work_gpu_h(jobs, res, 0.0, 10050.0)
    assert got == pytest.approx((8 * 100 + 16 * 10000 * 0.5) / 3600)
    assert big_work_gpu_h(jobs, res, 0.0, 50.0) == pytest.approx(8 * 50 / 3600)


def test_elastic_gang_regrows_when_its_rack_frees_and_finishes_sooner():
    seed = _split_seed()
    jobs = _jobs()  # singles of 100 s: the gang's rack-mate node frees at t=100
    kw = dict(KW, rack_nodes=2, block_racks=1)
    pred = np.array([1e6, 1e6, 10000.0])  # waiting looks dear: it starts at half size
    static = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                          runtime_p50=pred, **kw)
    grown = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                         runtime_p50=pred, regrow=True, **kw)
    assert static["run"][2] == pytest.approx(20000.0) and grown["size"][2] == 1
    # 99 s on one pod (99 pod-s of the 20,000), then the rest on two: 99 + 19,901 / 2
    assert grown["run"][2] == pytest.approx(99.0 + (20000.0 - 99.0) / 2)
    assert len(grown["nodes"][2]) == 2 and grown["spread"][2] == 0
    from simulator.timeline.topology import big_work_gpu_h
    # all the gang's 16 x 10,000 GPU-s of work is delivered by its end, none more
    end = 1.0 + grown["run"][2]
    assert big_work_gpu_h(jobs, grown, 0.0, end) == pytest.approx(
        big_work_gpu_h(jobs, static, 0.0, 1e6))


class _Reserved:
    """Gang demand forecast stand-in: ``gpus`` from t=0.5 on."""

    def __init__(self, gpus: float) -> None:
        self.gpus = gpus

    def at(self, t: float) -> float:
        return self.gpus if t >= 0.5 else 0.0


def test_node_reservation_holds_a_single_off_the_empty_nodes_a_gang_needs():
    # two long singles at t=0 in different racks (a split seed): no rack is whole-free, so the
    # rack-level keep has nothing to keep; the empty nodes are the forecast gang's 16 GPUs
    seed = _split_seed()
    jobs = Jobs(np.array([0.0, 0.0, 1.0, 2.0]), np.array([1e6, 1e6, 1e5, 1e4]),
                np.array([1, 1, 1, 2]), np.full(4, 8), np.full(4, 1000),
                np.zeros(4, np.int64), np.zeros(4, np.int64), ("t",))
    kw = dict(KW, rack_nodes=2, block_racks=1)
    args = dict(seed=seed, runtime_p50=jobs.duration, reserved=_Reserved(16.0), **kw)
    plain = run_topology(_nodes(), jobs, "topology", 0.0, 1e7, **args)
    assert len({plain["nodes"][0][0] // 2, plain["nodes"][1][0] // 2}) == 2
    assert plain["start"][2] == 1.0 and plain["start"][3] > 2.0  # the single took a node
    held = run_topology(_nodes(), jobs, "topology", 0.0, 1e7, reserve_nodes=True, **args)
    assert held["start"][3] == 2.0 and held["start"][2] > 2.0  # the gang got both
    with pytest.raises(ValueError, match="reserved"):
        run_topology(_nodes(), jobs, "topology", 0.0, 1e7, seed=seed,
                     runtime_p50=jobs.duration, reserve_nodes=True, **kw)


def test_pack_puts_a_long_small_pod_where_it_does_not_keep_a_draining_node_taken():
    # n0 runs a 6-GPU pod for 20,000 s, n1 one for 100 s, n2 is empty; a 1-GPU pod of 10,000 s
    # arrives at t=1. FGD alone may put it on n1 (then n1 stays taken 100 times longer); pack
    # puts it on n0, which is taken past its end anyway
    nodes = _nodes(3)
    jobs = Jobs(np.array([0.0, 0.0, 1.0]), np.array([20000.0, 100.0, 10000.0]),
                np.array([1, 1, 1]), np.array([6, 6, 1]), np.full(3, 1000),
                np.zeros(3, np.int64), np.zeros(3, np.int64), ("t",))
    kw = dict(KW, rack_nodes=3, block_racks=1)
    where = {}
    for seed in range(10):
        for pack in (False, True):
            r = run_topology(nodes, jobs, "topology", 0.0, 1e6, seed=seed,
                             runtime_p50=jobs.duration, pack=pack, **kw)
            assert r["nodes"][0] != r["nodes"][1]
            where.setdefault(pack, set()).add(r["nodes"][2][0] == r["nodes"][0][0])
    assert where[True] == {True}
    assert False in where[False], "FGD alone never chose the draining node: the test shows nothing"


def test_elastic_wait_waits_for_a_rack_that_frees_soon_and_starts_smaller_only_instead_of_spreading():
    seed = _split_seed()
    jobs = _jobs()  # the singles end at t=100: a rack then holds the gang whole
    eager = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                         runtime_p50=jobs.duration, **KW)
    assert eager["start"][2] == 1.0 and eager["size"][2] == 1
    waits = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                         runtime_p50=jobs.duration, elastic_wait=True, **KW)
    assert waits["start"][2] == pytest.approx(100.0) and waits["size"][2] == 2
    # believed to run for days: it would spread, and starts smaller in one rack instead
    late = run_topology(_nodes(), jobs, "topology-elastic", 0.0, 1e6, seed=seed,
                        runtime_p50=np.array([1e6, 1e6, 10000.0]), elastic_wait=True, **KW)
    assert late["start"][2] == 1.0 and late["size"][2] == 1 and late["spread"][2] == 0


def test_domain_plan_drains_one_rack_per_job_the_one_that_frees_first():
    from scheduler_hook.scores.drain import plan_domain_shadows
    # rack 0: nodes free at 10 and 100; rack 1: at 20 and 30. A 2-pod gang: rack 1 holds it
    # at 30 (rack 0 only at 100), although rack 0 has the single earliest node
    t, codes = np.array([10.0, 100.0, 20.0, 30.0]), np.array([0, 0, 1, 1])
    shadow, owner, chosen = plan_domain_shadows(t, codes, [2, 1])
    assert chosen == [1, 0] and owner.tolist() == [1, -1, 0, 0]
    assert shadow.tolist() == [10.0, np.inf, 30.0, 30.0]
    # kept: the rack drained last stays while it can hold the gang, even if no longer first
    _, owner, chosen = plan_domain_shadows(t, codes, [2], keep=[0])
    assert chosen == [0] and owner.tolist() == [0, 0, -1, -1]
    # a job no rack holds stops the plan: the one behind it drains nothing
    shadow, owner, chosen = plan_domain_shadows(t, codes, [3, 1])
    assert chosen == [] and (owner == -1).all() and np.isinf(shadow).all()


def test_drain_keeps_a_small_pod_off_the_draining_rack_unless_held_past_the_bound():
    # 2 racks of 2 nodes. Rack 0: n0 busy until t=100, n1 free; rack 1: n2 and n3 busy for
    # days. A 2 x 8 gang arrives at t=1 and drains rack 0 (predicted whole at t=100); a long
    # 1-GPU pod arriving at t=2 would take n1 (FGD's choice is the free node) and keep the
    # gang out for its whole run. With drain it goes elsewhere (here: nowhere, it waits),
    # unless it has waited longer than the hold bound (read at the next pass: a 10-s 1-GPU
    # pod arriving at t=70, which may backfill: it ends before the gang's shadow time)
    nodes = _nodes()
    jobs = Jobs(np.array([0.0, 0.0, 0.0, 1.0, 2.0, 70.0]),
                np.array([100.0, 1e6, 1e6, 1e5, 5e4, 10.0]),
                np.array([1, 1, 1, 2, 1, 1]), np.array([8, 8, 8, 8, 1, 1]), np.full(6, 1000),
                np.zeros(6, np.int64), np.zeros(6, np.int64), ("t",))
    kw = dict(KW, rack_nodes=2, block_racks=2, runtime_p50=jobs.duration)
    for seed in range(30):
        plain = run_topology(nodes, jobs, "topology", 0.0, 1e7, seed=seed, **kw)
        if plain["nodes"][0][0] // 2 != plain["nodes"][1][0] // 2 and \
                plain["nodes"][1][0] // 2 == plain["nodes"][2][0] // 2:
            break
    else:
        pytest.skip("no seed puts the short single alone in a rack")
    free = [nd for nd in range(4) if nd // 2 == plain["nodes"][0][0] // 2
            and nd != plain["nodes"][0][0]][0]
    assert plain["start"][4] == 2.0 and plain["nodes"][4] == [free]  # FGD's choice
    assert plain["start"][3] > 1e4  # the gang waits for the small pod (or spreads later)
    drained = run_topology(nodes, jobs, "topology", 0.0, 1e7, seed=seed, drain=1,
                           drain_hold_s=1e9, **kw)
    assert drained["start"][3] == pytest.approx(100.0) and drained["spread"][3] == 0
    assert drained["start"][4] >= drained["start"][3]  # kept off until the gang took the rack
    # past the hold bound (60 s) the small pod is admitted on the drained rack
    bound = run_topology(nodes, jobs, "topology", 0.0, 1e7, seed=seed, drain=1,
                         drain_hold_s=60.0, **kw)
    assert bound["start"][4] == pytest.approx(70.0) and bound["nodes"][4] == [free]
    assert bound["start"][3] > 1e4
    with pytest.raises(ValueError, match="replaces hold"):
        run_topology(nodes, jobs, "topology", 0.0, 10.0, drain=1, hold=1, **kw)


def test_topology_big_order_lets_a_short_gang_pass_a_long_one():
    # one rack of 2 nodes, both busy until 100; then a long gang (t=1) and a short one (t=2)
    jobs = Jobs(np.array([0.0, 0.0, 1.0, 2.0]), np.array([100.0, 100.0, 5000.0, 50.0]),
                np.array([1, 1, 2, 2]), np.full(4, 8), np.full(4, 1000),
                np.zeros(4, np.int64), np.zeros(4, np.int64), ("t",))
    kw = dict(rack_nodes=2, block_racks=1, runtime_p50=jobs.duration.astype(float))
    fifo = run_topology(_nodes(2), jobs, "topology", 0.0, 1e6, **kw)
    assert fifo["start"][2] == 100.0 and fifo["start"][3] == 5100.0
    sjf = run_topology(_nodes(2), jobs, "topology", 0.0, 1e6, big_order=1.0, **kw)
    assert sjf["start"][3] == 100.0 and sjf["start"][2] == 150.0
    base = run_topology(_nodes(2), jobs, "fgd", 0.0, 1e6, big_order=1.0, **kw)
    np.testing.assert_array_equal(base["start"], fifo["start"])  # baselines stay FIFO
