"""Timeline replay results pinned: the speed work on the replay (issue 16) must not move a
single placement. The numbers were computed with the code before that work (git 522b3e2) on
the first 400 nodes of the openb cluster, one day; a change to any start time, count or to the
allocation fails. (Reads ../shared; skipped without it.)
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.replay.compare import shared_traces_dir

NODES = shared_traces_dir() / "openb-2023" / "csv" / "openb_node_list_gpu_node.csv"

# (profile, seed, gang semantics) -> policy -> (jobs started, sum of their start times in s,
# fragmentation events, fragment-blocked jobs, held jobs, gang restarts, mean allocation %)
PINNED = {
    ("helios", 1, True): {
        "bestfit": (4614, 52241997.3, 64, 169, 0, 0, 87.615),
        "fgd": (4619, 52656184.1, 59, 159, 0, 0, 87.627),
        "foresight": (4617, 52484489.0, 64, 161, 0, 0, 87.626),
        "foresight-reserve": (4626, 53717337.9, 62, 135, 397, 0, 87.656),
        "foresight-flat": (4622, 53219191.7, 58, 160, 353, 0, 87.643)},
    ("dlrm", 2, False): {
        "fgd": (7825, 271229923.5, 163, 1079, 0, 26, 90.461),
        "foresight": (7747, 266220098.4, 180, 1098, 0, 27, 90.481),
        "foresight-reserve": (5430, 132928577.5, 72, 1765, 2197, 7, 89.897),
        "foresight-flat": (6820, 211912600.7, 108, 1612, 840, 17, 90.585)},
}


def summary(profile: str, seed: int, gang: bool, policies: tuple[str, ...]) -> dict:
    from simulator.replay.data import Nodes, load_nodes
    from simulator.timeline.run import CaseConfig, run_case

    full = load_nodes(NODES)
    nodes = Nodes(*(getattr(full, f)[:400] for f in ("name", "cpu", "mem", "gpus", "model")))
    cfg = CaseConfig(profile=profile, seed=seed, days=1.0, gang=gang, policies=policies)
    rows, raw = run_case(nodes, cfg, keep=True)
    out = {}
    for r in rows:
        res = raw[r["policy"]]
        ok = np.isfinite(res.start)
        out[r["policy"]] = (int(ok.sum()), round(float(res.start[ok].sum()), 1),
                            res.frag_events, int(res.frag_blocked.sum()), int(res.held.sum()),
                            res.gang_restarts, r["alloc_mean"])
    return out


@pytest.mark.skipif(not NODES.is_file(), reason="shared openb traces absent")
@pytest.mark.parametrize("case", list(PINNED))
def test_timeline_results_are_pinned(case):
    assert summary(*case, tuple(PINNED[case])) == PINNED[case]


if __name__ == "__main__":  # prints PINNED for the code checked out (how it was made)
    cases = {("helios", 1, True): ("bestfit", "fgd", "foresight", "foresight-reserve",
                                   "foresight-flat"),
             ("dlrm", 2, False): ("fgd", "foresight", "foresight-reserve", "foresight-flat")}
    print({case: summary(*case, pols) for case, pols in cases.items()})
