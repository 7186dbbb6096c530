"""Lending an idle large MIG instance to waiting small pods (issue 28 item 4).

A static or slowly re-planned geometry must choose between the 1g-3g pods' bursts and the
4g/7g pods' slack: the same slices serve both. Dynamic MIG partitioning (what nebuly's nos
and NVIDIA's DRA driver do on a running node) changes only the instances that are idle: an
idle 4g or 7g instance may be destroyed and its slices re-created as 1g-3g instances while the
other instances of the GPU keep running, and re-created as the large instance once those small
instances are idle again. This module holds the pure decisions; the replay
(`simulator.timeline.mig_lend`) applies them.

Rules (the replay's; all reactive, no forecast):
- lend: a small profile has pods waiting and no free instance; an idle large instance whose
  own profile has no pod waiting and more than ``keep`` idle instances is split into the
  small geometry that serves most of the waiting slices (`slot_geometry`).
- close: a lent instance takes no new pod once a pod of its large profile waits with no
  free instance of it (or no small pod waits for it while it is empty); it is re-created as
  the large instance when its last small pod has left. Small pods on it are not preempted.
"""
from __future__ import annotations

from itertools import product

from scheduler_hook import mig

SMALL_MAX = 3  # compute slices of the profiles that may borrow (1g-3g)


def slot_geometry(model: mig.GpuModel | str, geometry: dict[str, int], big: str,
                  waiting: dict[str, int], max_compute: int = SMALL_MAX) -> dict[str, int]:
    """The small instances to create in place of one idle ``big`` instance of a GPU of
    ``model`` split as ``geometry`` (the GPU's other instances stay where they are).

    ``waiting``: small profile -> pods waiting for it (profiles at 0 may fill spare slices).
    Among the valid fillings of ``big``'s compute slices by those profiles, the one that
    serves most waiting compute slices, then uses most slices, then has fewest profile
    kinds (fewer resource names to advertise); {} when none is valid.
    """
    m = mig.MODELS[model] if isinstance(model, str) else model
    rest = {p: n - (p == big) for p, n in geometry.items() if n - (p == big) > 0}
    budget = mig.profile_compute(big)
    names = sorted(p for p in waiting
                   if p in m.profiles and mig.profile_compute(p) <= max_compute)
    comp = [mig.profile_compute(p) for p in names]
    best, best_key = {}, None
    for counts in product(*(range(budget // c + 1) for c in comp)):
        used = sum(c * n for c, n in zip(comp, counts))
        if not used or used > budget:
            continue
        cand = {p: n for p, n in zip(names, counts) if n}
        served = sum(c * min(n, max(0, waiting[p])) for p, c, n in zip(names, comp, counts))
        key = (served, used, -len(cand))
        if best_key is not None and key <= best_key:
            continue
        full = dict(rest)
        for p, n in cand.items():
            full[p] = full.get(p, 0) + n
        if mig.is_valid(full, m):
            best, best_key = cand, key
    return best


def lendable(idle: dict[str, int], waiting: dict[str, int], keep: int,
             min_compute: int = SMALL_MAX + 1) -> list[str]:
    """Profiles of at least ``min_compute`` slices an instance may be lent from, most idle
    first: none of their pods waits and more than ``keep`` of their instances are idle (the
    reserve kept for their own next arrivals)."""
    out = [p for p, n in idle.items() if mig.profile_compute(p) >= min_compute
           and not waiting.get(p, 0) and n > keep]
    return sorted(out, key=lambda p: (-idle[p], p))
