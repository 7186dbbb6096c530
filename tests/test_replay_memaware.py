"""`memaware` (issue 19): ranks GPUs by (1 - memory used share) x (1 - idle share) from what the
GPUs show, with no prediction of the incoming pod's own peak."""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import Cluster
from simulator.replay.data import Nodes
from simulator.replay.engine import make_policy
from simulator.replay.policies import Pod


class _Shown:
    """What telemetry shows per GPU slot: residents' milli per job and each job's peak ratio."""

    def __init__(self, shape: tuple[int, int], ratio: list[float]) -> None:
        self.ratio = np.asarray(ratio)
        self.slot_milli = np.zeros((*shape, len(ratio)))
        self.shared_slot = np.zeros(shape, dtype=bool)

    def put(self, c: Cluster, node: int, slot: int, job: int, milli: int) -> None:
        c.place(node, slot, 0, 0, 1, milli)
        self.slot_milli[node, slot, job] += milli
        self.shared_slot[node, slot] = True


def _setup():
    nodes = Nodes(np.array(["a", "b"]), np.array([64000, 64000]), np.array([262144, 262144]),
                  np.array([2, 2]), np.array(["V100", "V100"]))
    c = Cluster(nodes)
    pol = make_policy("memaware")
    pol.reset(c, None)
    shown = _Shown(c.shape, [1.3, 0.7])
    pol.mode = shown
    return c, pol, shown


def _choice(c: Cluster, pol, pod: Pod) -> tuple[int, int]:
    node_ok, slots = c.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
    node_s, slot_s = pol.score(pod, node_ok, slots)
    node = int(np.argmax(node_s))
    return node, int(np.argmax(np.where(slots[node], slot_s[node], -np.inf)))


def test_prefers_the_gpu_that_shows_more_free_memory_at_equal_load():
    c, pol, shown = _setup()
    shown.put(c, 0, 0, job=0, milli=500)  # shows 650 milli of memory in use
    shown.put(c, 1, 0, job=1, milli=500)  # shows 350
    assert _choice(c, pol, Pod(1000, 1024, 1, 300, "")) == (1, 0)


def test_packs_onto_a_busy_gpu_rather_than_an_idle_one():
    c, pol, shown = _setup()
    shown.put(c, 0, 1, job=1, milli=400)
    # an idle GPU scores 0 (1 - idle share = 0): the busy one with room wins
    assert _choice(c, pol, Pod(1000, 1024, 1, 300, "")) == (0, 1)


def test_does_not_predict_the_incoming_pods_own_peak():
    """Two GPUs that show the same memory score the same whatever the new pod will use:
    nothing in the score depends on the incoming workload (foresight's overflow check does)."""
    c, pol, shown = _setup()
    shown.put(c, 0, 0, job=1, milli=500)
    shown.put(c, 1, 0, job=1, milli=500)
    pod = Pod(1000, 1024, 1, 450, "")
    node_ok, slots = c.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
    s, _ = pol.score(pod, node_ok, slots)
    assert s[0] == s[1] > 0
