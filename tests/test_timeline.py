"""Timeline replay (issue 16): departures, backfill, fragments, gangs, reservation, forecast.

Small synthetic clusters; nothing here reads ../shared."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.replay.data import Nodes
from simulator.timeline.engine import run_timeline
from simulator.timeline.workload import Jobs

BIG = 10**7  # a run time longer than any test


def nodes(*gpus: int) -> Nodes:
    n = len(gpus)
    return Nodes(np.array([f"n{i}" for i in range(n)]), np.full(n, 64000),
                 np.full(n, 262144), np.array(gpus), np.full(n, "A100"))


def jobs(rows: list[tuple]) -> Jobs:
    """rows: (arrival, duration, pods, gpus, milli[, priority])."""
    a = np.array([r + (0,) * (6 - len(r)) for r in rows], dtype=float)
    return Jobs(a[:, 0], a[:, 1], a[:, 2].astype(int), a[:, 3].astype(int),
                a[:, 4].astype(int), a[:, 5].astype(int), np.zeros(len(a), int), ("q",))


def test_departure_frees_gpus_and_fifo_waits():
    j = jobs([(0, 100, 1, 8, 1000), (10, 50, 1, 8, 1000), (20, 50, 1, 8, 1000)])
    r = run_timeline(nodes(8), j, "bestfit", 0, 1000)
    assert r.start[0] == 0 and r.start[1] == 100 and r.start[2] == 150
    assert np.isfinite(r.start).all()


def test_backfill_lets_small_job_pass_blocked_big_one():
    # node of 8: a 4-GPU job runs; an 8-GPU job waits; a later 2-GPU job starts at once
    j = jobs([(0, 500, 1, 4, 1000), (10, 50, 1, 8, 1000), (20, 50, 1, 2, 1000)])
    r = run_timeline(nodes(8), j, "fgd", 0, 2000)
    assert r.start[2] == 20 and r.start[1] == 500


def test_gang_blocked_in_fragments_is_counted():
    # six 8-GPU nodes each hold a 5-GPU job: 18 whole GPUs free, no node with 8
    rows = [(i, BIG, 1, 5, 1000) for i in range(6)] + [(10, 100, 2, 8, 1000)]
    j = jobs(rows)
    r = run_timeline(nodes(*[8] * 6), j, "bestfit", 0, 3600)
    assert np.isnan(r.start[6]) and r.frag_blocked[6] and r.frag_events >= 1
    assert not r.frag_blocked[:6].any()


def test_gang_without_enough_free_gpus_is_not_fragmentation():
    rows = [(i, BIG, 1, 5, 1000) for i in range(4)] + [(10, 100, 2, 8, 1000)]
    r = run_timeline(nodes(*[8] * 4), jobs(rows), "bestfit", 0, 3600)
    assert np.isnan(r.start[4]) and not r.frag_blocked[4]  # 12 free < 16 asked


def test_fractional_blocked_in_fragments():
    # two GPUs with 600 milli taken each: 800 free in all, no GPU with 500
    rows = [(0, BIG, 1, 1, 600), (1, BIG, 1, 1, 600), (5, 100, 1, 1, 500)]
    r = run_timeline(nodes(2), jobs(rows), "bestfit", 0, 3600)
    assert np.isnan(r.start[2]) and r.frag_blocked[2]


def test_gangs_deadlock_without_gang_semantics_only():
    # two busy nodes free at t=100 and t=200; two 2x8 gangs queued meanwhile
    rows = [(0, 100, 1, 8, 1000), (0, 200, 1, 8, 1000),
            (1, 1000, 2, 8, 1000), (2, 1000, 2, 8, 1000)]
    loose = run_timeline(nodes(8, 8), jobs(rows), "bestfit", 0, 3 * 3600, gang=False,
                         gang_timeout_s=10 * 3600)
    assert loose.deadlocks == 1 and np.isnan(loose.start[2:]).all()
    strict = run_timeline(nodes(8, 8), jobs(rows), "bestfit", 0, 3 * 3600, gang=True)
    assert strict.deadlocks == 0 and strict.start[2] == 200 and strict.start[3] == 1200


def test_partial_gang_times_out_and_queues_again():
    # gang A holds a pod from t=100, gang B from t=800; A gives up at the 2400 s check and
    # queues its pods again behind B's: B completes at once, A runs when B leaves
    rows = [(0, 100, 1, 8, 1000), (0, 800, 1, 8, 1000),
            (1, 1000, 2, 8, 1000), (2, 1000, 2, 8, 1000)]
    r = run_timeline(nodes(8, 8), jobs(rows), "bestfit", 0, 6 * 3600, gang=False,
                     gang_timeout_s=1800)
    assert r.gang_restarts == 1 and r.deadlocks == 1
    assert r.start[3] == 2400 and r.start[2] == 3400


class _Fixed:
    def __init__(self, until: float, gpus: float) -> None:
        self.until, self.gpus = until, gpus

    def at(self, t: float) -> float:
        return self.gpus if t < self.until else 0.0


def test_reservation_holds_small_pods_off_empty_nodes_until_it_drops():
    # two empty 8-GPU nodes, 16 GPUs reserved until t=1000: a 1-GPU pod waits, an 8-GPU does not
    rows = [(10, 100, 1, 1, 1000), (20, 100, 1, 8, 1000)]
    r = run_timeline(nodes(8, 8), jobs(rows), "foresight-flat", 0, 3600,
                     reserved=_Fixed(1000, 16), reserve_for="big")
    assert r.start[1] == 20
    assert r.start[0] == 1200 and r.held[0]  # first sample after the reservation drops
    free = run_timeline(nodes(8, 8), jobs(rows), "foresight", 0, 3600)
    assert free.start[0] == 10


def test_replay_reservation_runs_the_extender_component(monkeypatch):
    from scheduler_hook.scores import reservation

    calls = []
    real = reservation.Reservation.score

    def spy(self, ctx):
        calls.append(ctx.providers.fresh("demand").reserved_whole_gpus())
        return real(self, ctx)

    monkeypatch.setattr(reservation.Reservation, "score", spy)
    rows = [(10, 100, 1, 1, 1000)]
    run_timeline(nodes(8, 8), jobs(rows), "foresight-reserve", 0, 1200,
                 reserved=_Fixed(600, 16))
    assert calls and calls[0] == 16


def test_workload_sizes_and_profiles():
    from simulator.timeline.workload import generate_jobs

    for prof in ("helios", "dlrm"):
        j = generate_jobs(prof, 3, days=2, history_days=1, capacity_gpus=600)
        assert (np.diff(j.arrival) >= 0).all() and len(j) > 100
        big = j.gpus >= 8
        assert set(np.unique(j.pods[big])) <= {1, 2, 4} and (j.pods[~big] == 1).all()
        frac = j.milli < 1000
        assert frac.any() and (j.gpus[frac] == 1).all()
        # the offered load is near what was asked (0.8 x 600 GPUs), within Poisson/burst noise
        gpu_s = (j.gpu_request * j.duration)[j.arrival >= 0].sum() / (2 * 86400)
        assert 0.2 * 480 < gpu_s < 3 * 480
    with pytest.raises(ValueError):
        generate_jobs("nope", 0)


def test_flat_schedule_is_the_running_mean_of_past_bins():
    from simulator.timeline.forecast import FREQ_S, ReservedSchedule

    # one 2x8 gang every hour from -2 days: 16 GPUs per 6 bins
    rows = [(t, 100, 2, 8, 1000) for t in np.arange(-2 * 86400, 86400, 3600.0)]
    s = ReservedSchedule(jobs(rows), "flat", 0, 3600, horizon=3, reserve_for="gang")
    assert s.at(0) == pytest.approx(16 / 6 * 3, rel=0.02)
    assert s.at(FREQ_S * 2) == pytest.approx(s.at(0), rel=0.02)


def test_forecast_schedule_never_reads_later_arrivals():
    from simulator.timeline.forecast import ReservedSchedule
    from simulator.timeline.workload import generate_jobs

    j = generate_jobs("helios", 5, days=0.5, history_days=4, capacity_gpus=2000)
    kw = dict(horizon=3, reserve_for="big", refit_s=6 * 3600, n_estimators=10)
    a = ReservedSchedule(j, "forecast", 0, 6 * 3600, **kw)
    cut = 3 * 3600.0
    keep = (j.arrival < cut) | ~j.big  # drop the big jobs after `cut`
    j2 = Jobs(j.arrival[keep], j.duration[keep], j.pods[keep], j.gpus[keep], j.milli[keep],
              j.priority[keep], j.tenant[keep], j.tenants, j.t0)
    b = ReservedSchedule(j2, "forecast", 0, 6 * 3600, **kw)
    n = int(cut // 600)
    assert np.allclose(a.values[:n + 1], b.values[:n + 1])
    assert a.values.max() > 0


def test_cli_bad_input_exits_2(capsys):
    from foresight.cli import main

    assert main(["timeline", "--profile", "nope"]) == 2
    assert main(["timeline", "--policies", "bogus"]) == 2
    assert main(["timeline", "--nodes", "/no/such.csv"]) == 2
    assert main(["timeline", "--days", "0"]) == 2
    assert main(["timeline", "--big-order", "-1"]) == 2
    assert main(["timeline", "--max-hold", "nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 6 and "--big-order" in err and "--max-hold" in err


def test_running_aggregates_match_a_recount():
    from simulator.timeline.cluster import TimelineCluster

    c = TimelineCluster(nodes(8, 8, 2, 4))
    rng = np.random.default_rng(0)
    placed = []
    for _ in range(1500):
        if placed and rng.random() < 0.5:
            c.release(*placed.pop(int(rng.integers(len(placed)))))
        else:
            g = int(rng.choice([1, 2, 8]))
            m = int(rng.choice([300, 1000])) if g == 1 else 1000
            ok = np.flatnonzero(c.whole >= g if m == 1000 else c.maxfree >= m)
            if not len(ok):
                continue
            n = int(rng.choice(ok))
            slots = c.place(n, int(np.flatnonzero(c.gpu_free[n] >= m)[0]), 0, 0, g, m)
            placed.append((n, slots, g, m))
        a, b = c.aggregates(), c.aggregates(np.ones(4, bool))  # running totals vs recount
        assert (a.ge[:9], a.maxfree, a.whole, a.milli) == (b.ge[:9], b.maxfree, b.whole, b.milli)
        off = np.flatnonzero(rng.random(4) < 0.5)  # the totals less some nodes vs the mask
        mask = np.ones(4, bool)
        mask[off] = False
        a, b = c.aggregates_excluding(off), c.aggregates(mask)
        assert (a.ge[:9], a.maxfree, a.whole, a.milli) == (b.ge[:9], b.maxfree, b.whole, b.milli)


def test_cli_runs_on_a_small_cluster(tmp_path):
    import json

    from foresight.cli import main

    csv = tmp_path / "nodes.csv"
    csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n" +
                   "".join(f"n{i},64000,262144,{8 if i < 12 else 2},A100\n" for i in range(20)))
    out = tmp_path / "r.json"
    rc = main(["timeline", "--nodes", str(csv), "--days", "0.25", "--seeds", "1",
               "--policies", "bestfit,fgd", "--out", str(out), "--plot",
               str(tmp_path / "p.png")])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["policy"] for r in rows] == ["bestfit", "fgd"]
    assert {"frac", "1", "2-4", "8", "gang", "8+gang", "alloc_mean"} <= set(rows[0])
    assert 0 < rows[0]["alloc_mean"] <= 100 and (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize("name", ["bestfit", "fgd", "foresight"])
def test_node_scores_are_the_policy_scores(name):
    # the per-shape caches (1-D, dirty rows only) against the policy's own (N x G) score
    from simulator.timeline.cluster import TimelineCluster
    from simulator.replay.policies import Pod
    from simulator.timeline.policies import Placer, trace_of

    c = TimelineCluster(nodes(8, 8, 8, 4, 2, 8, 1, 8))
    shapes = [(1, 1000), (2, 1000), (8, 1000), (1, 500), (1, 250), (1, 810), (4, 1000)]
    rng = np.random.default_rng(1)
    gs, ms = zip(*[shapes[i] for i in rng.integers(len(shapes), size=300)])
    p = Placer(name)
    p.reset(c, trace_of(np.array(gs), np.array(ms)), 0)
    pol, placed, checked = p.policy, [], 0
    for step in range(400):
        g, m = shapes[int(rng.integers(len(shapes)))]
        p.observe(g, m)
        if placed and rng.random() < 0.45:
            n, slots, g0, m0 = placed.pop(int(rng.integers(len(placed))))
            c.release(n, slots, g0, m0)
            p.changed(n, slots, g0, m0)
            continue
        node_ok = c.maxfree >= m if m < 1000 else c.whole >= g
        cand = np.flatnonzero(node_ok)
        if not len(cand):
            continue
        pod = Pod(0, 0, g, m, "")
        # the timeline classes leave ``score`` (and ``increase``) to the replay's policies
        ref_node, ref_slot = pol.score(pod, node_ok, (c.gpu_free >= m) & node_ok[:, None])
        fast = pol.node_scores(pod, node_ok)
        assert np.array_equal(fast[cand], ref_node[cand])
        for n in cand:
            want = np.argmax(np.where(c.gpu_free[n] >= m, ref_slot[n], -np.inf))
            assert pol.slot(pod, int(n)) == want
        checked += 1
        n, s = p.choose(g, m, None)
        slots = c.place(n, s, 0, 0, g, m)
        p.changed(n, slots, g, m)
        placed.append((n, slots, g, m))
    assert checked > 150
