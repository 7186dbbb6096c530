"""Lending idle large MIG instances to waiting small pods (issue 28 item 4): the slot's
geometry, who may lend, and the replay's timing (lend, reconfigure, close, give back).

Small synthetic clusters; nothing here reads ../shared."""
from __future__ import annotations

import numpy as np
from test_timeline_mig import pods  # (arrival, duration, profile) rows of 1g.10gb / 7g.80gb

from scheduler_hook import mig
from scheduler_hook.mig_lend import lendable, slot_geometry
from simulator.timeline.mig import MigNodeSpec, run_mig
from simulator.timeline.mig_lend import LendRule

H = 3600.0


def served(geo: dict[str, int], waiting: dict[str, int]) -> int:
    return sum(mig.profile_compute(p) * min(n, waiting.get(p, 0)) for p, n in geo.items())


def test_slot_geometry_serves_most_waiting_slices_and_fits_beside_the_rest():
    waiting = {"1g.10gb": 3, "2g.20gb": 1, "3g.40gb": 0}
    geo = slot_geometry("A100-80GB", {"7g.80gb": 1}, "7g.80gb", waiting)
    assert served(geo, waiting) == 5  # every waiting slice fits in a 7g's 7 slices
    assert mig.is_valid(geo, "A100-80GB")
    assert sum(mig.profile_compute(p) * n for p, n in geo.items()) <= 7
    # a 4g beside a running 3g: what replaces it must fit beside that 3g
    rest = {"4g.40gb": 1, "3g.40gb": 1}
    geo = slot_geometry("A100-80GB", rest, "4g.40gb", {"1g.10gb": 6})
    assert geo == {"1g.10gb": 4}
    assert mig.is_valid({"3g.40gb": 1, **geo}, "A100-80GB")
    # a profile the model lacks is never created
    assert slot_geometry("A100-80GB", {"7g.80gb": 1}, "7g.80gb", {"1g.5gb": 3}) == {}


def test_lendable_keeps_the_reserve_and_never_a_profile_with_waiting_pods():
    idle = {"7g.80gb": 2, "4g.40gb": 3, "3g.40gb": 5, "1g.10gb": 4}
    assert lendable(idle, {}, keep=0) == ["4g.40gb", "7g.80gb"]  # most idle first
    assert lendable(idle, {"4g.40gb": 1}, keep=0) == ["7g.80gb"]
    assert lendable(idle, {}, keep=2) == ["4g.40gb"]
    assert lendable(idle, {}, keep=0, min_compute=2) == ["3g.40gb", "4g.40gb", "7g.80gb"]


def case(lend: LendRule | None):
    # one 1-GPU all-balanced node (two 1g) and one 1-GPU all-7g node; four 1g pods at 0 for
    # an hour, then a 7g pod at 10 min
    specs = [MigNodeSpec("bal", "A100-80GB", 1), MigNodeSpec("big", "A100-80GB", 1)]
    p = pods([(0.0, H, "1g.10gb")] * 4 + [(600.0, H, "7g.80gb")])
    res = run_mig(specs, p, "x", 0.0, 10 * H, initial={"bal": "all-balanced",
                                                       "big": "all-7g.80gb"}, lend=lend)
    return p, res


def test_replay_lends_an_idle_7g_reconfigures_and_gives_it_back_after_its_pods():
    p, off = case(None)
    small = np.flatnonzero(~p.large)
    assert sorted(off.start[small]) == [0.0, 0.0, H, H]  # two wait for the 1g instances
    assert off.start[p.large][0] == 600.0
    assert off.extra == {}
    p, on = case(LendRule(keep=0, downtime_s=300.0))
    # the idle 7g is split into 1g instances, up after the 300-s reconfiguration
    assert sorted(on.start[small]) == [0.0, 0.0, 300.0, 300.0]
    # the 7g pod closes the slot and waits for its pods (not preempted) and the way back
    assert on.start[p.large][0] == 300.0 + H + 300.0
    assert on.extra["lends"] == 1 and on.extra["pods"] == 2
    assert on.extra["closed_for_big"] == 1


def test_replay_keeps_the_reserve_idle():
    _, kept = case(LendRule(keep=1))
    off = case(None)[1]
    np.testing.assert_array_equal(kept.start, off.start)
    assert kept.extra.get("lends", 0) == 0
