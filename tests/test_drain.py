"""Issue 28, third try: targeted draining (EASY backfilling with predicted run times), the
shared rule (scheduler_hook/scores/drain.py) and the timeline replay's gate. Synthetic."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from scheduler_hook.scores.drain import (Drain, drain_times, effective_end, may_backfill,
                                         plan_shadows)
from simulator.timeline.engine import run_timeline
from test_timeline import jobs, nodes

INF = np.inf


def test_drain_time_is_when_enough_gpus_are_predicted_free():
    free_at = np.array([[0, 50, 300, INF], [100, 200, 0, 0]], float)  # node 0 has 3 GPUs
    assert drain_times(free_at, 2, 10.0).tolist() == [50.0, 10.0]
    assert drain_times(free_at, 4, 10.0).tolist() == [INF, 200.0]


def test_an_overdue_resident_is_expected_to_run_as_long_again():
    got = effective_end(np.array([500.0, 90.0, 90.0]), np.array([0.0, -1000.0, 95.0]), 100.0)
    assert got.tolist() == [500.0, 1200.0, 100.0 + 600.0]  # floor of 10 min


def test_plan_gives_each_pending_job_the_earliest_nodes_in_queue_order():
    drain_t = np.array([400.0, 100.0, 300.0, 200.0, INF, 50.0])
    shadow, owner = plan_shadows(drain_t, [1, 2], forecast_nodes=2, horizon_s=1000, now=0.0)
    assert owner.tolist() == [-2, 1, -2, 1, -1, 0]
    assert shadow[5] == 50 and shadow[1] == shadow[3] == 200  # a gang: its last node
    assert shadow[2] == 300 and shadow[0] == 500  # forecast nodes: needed 0, 500 s ahead
    assert not np.isfinite(shadow[4])
    # a job more nodes than are left stops the plan (a later job would jump it)
    _, owner = plan_shadows(drain_t[:2], [3, 1], 0, 1000, 0.0)
    assert (owner == -1).all()


def test_a_pod_may_backfill_only_if_it_ends_by_the_shadow():
    shadow = np.array([INF, 1000.0, 1000.0])
    assert may_backfill(shadow, 100.0, 900.0).tolist() == [True, True, True]
    assert may_backfill(shadow, 100.0, 901.0).tolist() == [True, False, False]
    assert may_backfill(shadow, 100.0, None).tolist() == [True, False, False]


def test_component_scores_zero_where_the_pod_would_delay_the_big_job():
    plan = SimpleNamespace(now=lambda: 0.0, shadow_s=lambda rows: np.array([INF, 600.0])[rows])
    rt = SimpleNamespace(runtime_s=lambda pod: pod.run)
    ctx = SimpleNamespace(rows=np.arange(2), n=2, cfg={},
                          providers=SimpleNamespace(fresh={"drain": plan, "runtime": rt}.get),
                          pod=SimpleNamespace(priority=0, gpus=1, run=3600.0))
    got = Drain().score(ctx)
    assert got.value.tolist() == [1.0, 0.0] and "longer" in got.reason(1)
    ctx.pod.run = 300.0
    assert Drain().score(ctx).value.tolist() == [1.0, 1.0]
    ctx.pod.priority = 1000
    assert Drain().score(ctx).value.tolist() == [1.0, 1.0]


class _Zero:
    horizon_s = 1800.0

    @staticmethod
    def at(t: float) -> float:
        return 0.0


def test_replay_drains_the_node_that_frees_first_and_backfills_short_pods():
    rows = [(0, 1000, 1, 5, 1000),   # node A frees at 1000
            (0, 5000, 1, 5, 1000),   # node B at 5000
            (10, 100, 1, 8, 1000),   # the big job: drains A, shadow 1000
            (20, 3000, 1, 1, 1000),  # long: not on A (it would delay the big job) -> B
            (30, 200, 1, 1, 1000)]   # short: ends by 1000, may go anywhere
    pred = np.array([1000.0, 5000.0, 100.0, 3000.0, 200.0])
    r = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 9000, reserved=_Zero(),
                     reserve_for="big", runtime_s=pred, max_hold_s=0)
    assert r.start[2] == 1000 and r.start[3] == 20 and r.start[4] == 30


def test_a_later_big_job_does_not_take_a_gangs_drained_node():
    rows = [(0, 1000, 1, 5, 1000), (0, 2000, 1, 5, 1000),  # nodes A and B
            (10, 100, 2, 8, 1000),   # a gang of two 8-GPU pods: both nodes, shadow 2000
            (20, 5000, 1, 8, 1000)]  # ends long after 2000: may not take node A at 1000
    pred = np.array([1000.0, 2000.0, 100.0, 5000.0])
    kw = dict(reserved=_Zero(), reserve_for="big", runtime_s=pred, max_hold_s=0)
    r = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 9000, **kw)
    assert r.start[2] == 2000 and r.start[3] == 2100
    fgd = run_timeline(nodes(8, 8), jobs(rows), "fgd", 0, 9000)
    assert fgd.start[3] == 1000 and fgd.start[2] == 6000  # the single jumps the gang


def test_hold_multi_holds_2_to_4_gpu_jobs_longer_and_1_gpu_jobs_as_before():
    rows = [(0, 1000, 1, 5, 1000),    # node A frees at 1000: drained for the big job
            (0, 50000, 1, 7, 1000),   # node B: one GPU free for a long time
            (10, 100, 1, 8, 1000),    # the big job, shadow 1000
            (20, 3000, 1, 2, 1000)]   # 2 GPUs for ~3000 s: fits only on A, would delay it
    pred = np.array([1000.0, 50000.0, 100.0, 3000.0])
    kw = dict(reserved=_Zero(), reserve_for="big", runtime_s=pred, max_hold_s=100)
    r = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, **kw)
    assert abs(r.start[3] - 120) < 1  # pending past the 100-s bound: takes A
    assert r.start[2] > 3000  # and the big job waits for it
    held = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, hold_multi=np.inf,
                        **kw)
    assert held.start[2] == 1000 and held.start[3] == 1100  # after the big job, on A
    one = [*rows[:3], (20, 3000, 1, 1, 1000), (25, 3000, 1, 1, 1000)]  # 1-GPU: bound as before
    kw["runtime_s"] = np.append(pred, 3000.0)
    a = run_timeline(nodes(8, 8), jobs(one), "drain-pending", 0, 90000, hold_multi=np.inf, **kw)
    b = run_timeline(nodes(8, 8), jobs(one), "drain-pending", 0, 90000, **kw)
    np.testing.assert_array_equal(a.start, b.start)
    assert a.start[3] == 20 and abs(a.start[4] - 125) < 1  # B's free GPU; then aged: A


def test_protect_jobs_keeps_aged_pods_off_the_head_jobs_drained_node():
    rows = [(0, 1000, 1, 5, 1000),    # node A frees at 1000: drained for the big job
            (0, 50000, 1, 8, 1000),   # node B full for a long time
            (10, 100, 1, 8, 1000),    # the big job, shadow 1000
            (20, 3000, 1, 1, 1000)]   # 1 GPU for ~3000 s: fits only on A
    kw = dict(reserved=_Zero(), reserve_for="big", max_hold_s=100,
              runtime_s=np.array([1000.0, 50000.0, 100.0, 3000.0]))
    free = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, **kw)
    assert abs(free.start[3] - 120) < 1 and free.start[2] > 3000  # aged: takes A, big waits
    kept = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, protect_jobs=1,
                        **kw)
    assert kept.start[2] == 1000 and kept.start[3] == 1100  # the head job keeps its node


class _Ages:
    """A stand-in for `RemainingRuntime`: fixed predicted ends per job, whatever the age."""

    def __init__(self, ends: dict[int, float]) -> None:
        self.ends, self.asked = ends, []

    def end(self, j, start, now):
        self.asked.append(float(now))
        return (np.array([self.ends.get(int(x), np.nan) for x in j]),
                np.full(len(j), np.inf))


def test_residents_ends_given_their_age_pick_the_node_to_drain():
    rows = [(0, 6000, 1, 5, 1000),   # node A: predicted 1000 from start, truly runs 6000
            (0, 3000, 1, 5, 1000),   # node B: frees at 3000
            (10, 100, 1, 8, 1000),   # the big job
            (20, 4000, 1, 1, 1000)]  # a long 1-GPU pod: not on the drained node
    kw = dict(reserved=_Zero(), reserve_for="big", max_hold_s=0,
              runtime_s=np.array([1000.0, 3000.0, 100.0, 4000.0]))
    fixed = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, **kw)
    # drained A on the fixed prediction, so the pod took B; the big job waits for the pod
    assert fixed.start[3] == 20 and fixed.start[2] == 4020
    ages = _Ages({0: 6000.0, 1: 3000.0})
    cond = run_timeline(nodes(8, 8), jobs(rows), "drain-pending", 0, 90000, remaining=ages,
                        **kw)
    assert cond.start[2] == 3000 and cond.start[3] == 20  # drained B; the pod went to A
    assert ages.asked and min(ages.asked) >= 0.0


def test_big_jobs_queue_shortest_predicted_first_with_aging():
    from simulator.timeline.run import queue_order

    rows = [(0, 1000, 1, 8, 1000),     # the one 8-GPU node, busy until 1000
            (10, 5000, 1, 8, 1000),    # big, predicted long
            (20, 100, 1, 8, 1000),     # big, predicted short, arrived later
            (30, 100, 1, 1, 1000)]     # a small job: its place in the queue is its arrival
    j = jobs(rows)
    pred = np.array([1000.0, 5000.0, 100.0, 100.0])
    kw = dict(reserved=_Zero(), reserve_for="big", max_hold_s=0, runtime_s=pred)
    fifo = run_timeline(nodes(8), j, "drain-pending", 0, 90000, **kw)
    assert fifo.start[1] == 1000 and fifo.start[2] == 6000
    sjf = run_timeline(nodes(8), j, "drain-pending", 0, 90000,
                       order_s=queue_order(j, pred, 1.0), **kw)
    assert sjf.start[2] == 1000 and sjf.start[1] == 1100  # the short one overtakes
    # aging: at alpha 0.001 the 4900-s difference is worth 4.9 s < the 10 s between arrivals
    aged = run_timeline(nodes(8), j, "drain-pending", 0, 90000,
                        order_s=queue_order(j, pred, 0.001), **kw)
    np.testing.assert_array_equal(aged.start, fifo.start)
    order = queue_order(j, pred, 1.0)
    assert order[3] == 30.0 and order[2] == 120.0  # small jobs keep their arrival
    assert queue_order(j, pred, 0.0) is None and queue_order(j, None, 1.0) is None
    area = queue_order(jobs([(0, 10, 4, 8, 1000)]), np.array([10.0]), 1.0, area=True)
    assert area.tolist() == [40.0]  # a 4-pod gang counts 4 x its run time


def test_pack_keeps_a_long_small_pod_off_the_node_about_to_free():
    rows = [(0, 1000, 1, 5, 1000),   # node A: busy until 1000
            (0, 5000, 1, 5, 1000),   # node B: until 5000
            (10, 3000, 1, 1, 1000),  # a long small pod: on A it would keep A until 3010
            (20, 100, 1, 8, 1000)]   # an 8-GPU job: needs a whole node
    pred = np.array([1000.0, 5000.0, 3000.0, 100.0])
    j = jobs(rows)
    for seed in range(8):  # fgd's tie between A and B, broken at random, never matters
        packed = run_timeline(nodes(8, 8), j, "fgd", 0, 9000, seed=seed, runtime_s=pred,
                              pack=True)
        assert packed.start[2] == 10 and packed.start[3] == 1000  # A emptied at 1000
    plain = [run_timeline(nodes(8, 8), j, "fgd", 0, 9000, seed=s).start[3] for s in range(8)]
    assert 3010 in plain and set(plain) <= {1000, 3010}  # without pack, often on A
    with np.testing.assert_raises(ValueError):
        run_timeline(nodes(8, 8), j, "fgd", 0, 9000, pack=True)
