"""The vectorized FGD fragmentation measure against a direct transcription of its definition."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_hook.fragmentation import (ShapeMix, ShapeMixTracker, fragmentation_increase,
                                          node_fragmentation)


def naive_frag(free: np.ndarray, cpu: int, mix: ShapeMix, acc: np.ndarray) -> float:
    """FGD's definition, one shape at a time (the published simulator's loop)."""
    total, frag = free.sum(), 0.0
    for k in range(len(mix)):
        m, n, c = mix.gpu_milli[k], mix.num_gpu[k], mix.cpu_milli[k]
        if n > 0 and acc[k] and cpu >= c and (free >= m).sum() >= n:
            frag += mix.freq[k] * free[free < m].sum()
        else:
            frag += mix.freq[k] * total
    return frag


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(7)
    k = 60
    mix = ShapeMix.from_pods(rng.choice([1000, 2000, 8000], k), rng.choice([0, 200, 500, 1000], k),
                             rng.choice([0, 1, 1, 1, 2, 4], k), rng.choice(["", "A", "A|B"], k))
    n, g = 50, 4
    free = rng.choice([0, 100, 300, 500, 700, 1000], (n, g))
    free[:5, 2:] = 0  # nodes with 2 GPUs: padding slots hold 0
    cpu = rng.choice([0, 1500, 3000, 9000], n)
    acc = mix.access(rng.choice(["A", "B", "C"], n))
    return mix, free, cpu, acc


def test_node_fragmentation_matches_definition(case):
    mix, free, cpu, acc = case
    got = node_fragmentation(free, mix, cpu, acc)
    want = [naive_frag(free[i], cpu[i], mix, acc[i]) for i in range(len(free))]
    assert np.allclose(got, want)
    single = node_fragmentation(free[3], mix, cpu[3], acc[3])
    assert isinstance(single, float) and np.isclose(single, want[3])


@pytest.mark.parametrize("pod", [(1000, 300, 1), (500, 700, 1), (1000, 1000, 1), (1000, 1000, 2),
                                 (2000, 0, 0)])
def test_increase_matches_placing_then_measuring(case, pod):
    mix, free, cpu, acc = case
    pc, pm, pn = pod
    inc = fragmentation_increase(free, cpu, mix, acc, pc, pm, pn)
    for i in range(len(free)):
        for g in range(free.shape[1]):
            after = free[i].copy()
            if pn == 0:
                ok = True
            elif pn == 1 and pm < 1000:
                ok = after[g] >= pm
                after[g] -= pm
            else:
                ok = after[g] >= 1000 and (after >= 1000).sum() >= pn
                if ok:
                    idx = [g] + [j for j in range(len(after)) if j != g and after[j] >= 1000]
                    after[idx[:pn]] = 0
            if not ok:
                assert inc[i, g] == np.inf
                continue
            want = naive_frag(after, cpu[i] - pc, mix, acc[i]) - naive_frag(free[i], cpu[i], mix,
                                                                               acc[i])
            assert np.isclose(inc[i, g], want)


def test_increase_prefers_the_gpu_that_keeps_whole_gpus():
    # half the pods want a whole GPU: a 500-milli pod should go onto the half-used GPU
    mix = ShapeMix.from_pods([1000, 1000], [500, 1000], [1, 1])
    inc = fragmentation_increase(np.array([[500, 1000]]), np.array([8000]), mix, None,
                                 1000, 500, 1)
    assert inc[0, 0] < inc[0, 1]


def test_node_filter_limits_work_and_marks_others_infeasible(case):
    mix, free, cpu, acc = case
    mask = np.zeros(len(free), dtype=bool)
    mask[[1, 4]] = True
    inc = fragmentation_increase(free, cpu, mix, acc, 1000, 300, 1, nodes=mask)
    full = fragmentation_increase(free, cpu, mix, acc, 1000, 300, 1)
    assert np.isinf(inc[~mask]).all()
    assert np.array_equal(inc[mask], full[mask])


def test_coverage_keeps_most_frequent_shapes():
    mix = ShapeMix.from_pods([1] * 10, [100] * 7 + [200] * 2 + [300], [1] * 10, coverage=0.9)
    assert sorted(mix.gpu_milli.tolist()) == [100, 200]
    assert np.isclose(mix.freq.sum(), 1.0) and np.isclose(mix.freq.max(), 7 / 9)


def test_tracker_learns_only_what_it_saw_and_forgets_old_shapes():
    tr = ShapeMixTracker(half_life=10)
    for _ in range(10):
        tr.observe(1000, 500, 1)
    assert len(tr.mix()) == 1
    for _ in range(10):
        tr.observe(2000, 1000, 2)
    mix = tr.mix()
    new = mix.freq[mix.num_gpu == 2][0]
    assert new > 0.6  # the recent shape weighs more than its plain 50% count
    plain = ShapeMixTracker(half_life=1e12)
    for s in [(1000, 500, 1)] * 10 + [(2000, 1000, 2)] * 10:
        plain.observe(*s)
    assert np.allclose(sorted(plain.mix().freq), [0.5, 0.5])
