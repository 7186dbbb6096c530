"""Issue 13 policy rules: where FGD puts CPU-only pods among its ties, and Foresight's reserve
cost for GPU models that constrained demand needs."""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import Cluster
from simulator.replay.data import Nodes, Pods
from simulator.replay.policies import FGD, FGDRandomTie, Foresight, Pod


def _nodes(models: list[str], gpus: int = 2) -> Nodes:
    n = len(models)
    return Nodes(np.array([f"n{i}" for i in range(n)]), np.full(n, 64000), np.full(n, 256000),
                 np.full(n, gpus), np.array(models))


def _trace(specs: list[str]) -> Pods:
    n = len(specs)
    return Pods(np.full(n, 4000), np.full(n, 1024), np.ones(n, np.int64),
                np.full(n, 1000), np.array(specs, dtype=object))


def _pick(pol, cluster: Cluster, pod: Pod) -> np.ndarray:
    ok, slots = cluster.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
    node, _ = pol.score(pod, ok, slots)
    return np.flatnonzero(node == node[ok].max())


def test_fgd_puts_a_cpu_only_pod_where_fewest_gpus_are_free_among_its_ties():
    cluster = Cluster(_nodes(["A"] * 3))
    cluster.place(0, 0, 8000, 0, 2, 1000)  # n0: both GPUs taken
    cluster.place(1, 0, 8000, 0, 1, 1000)  # n1: one of two
    trace = _trace([""] * 10)
    cpu_pod = Pod(4000, 1024, 0, 0, "")
    fgd, rnd = FGD(), FGDRandomTie()
    for pol in (fgd, rnd):
        pol.reset(cluster, trace)
    assert list(_pick(fgd, cluster, cpu_pod)) == [0]
    assert list(_pick(rnd, cluster, cpu_pod)) == [0, 1, 2]  # the old port: a three-way tie
    # a GPU pod is still placed by FGD's measure alone (the tie-break is for CPU-only pods)
    gpu_pod = Pod(4000, 1024, 1, 1000, "")
    assert list(_pick(fgd, cluster, gpu_pod)) == list(_pick(rnd, cluster, gpu_pod))


def test_foresight_keeps_unconstrained_pods_off_models_that_constrained_demand_needs():
    def scores(seen_spec: str, pod_spec: str, weight: float = 1.0) -> np.ndarray:
        cluster = Cluster(_nodes(["T4", "G2"]))
        pol = Foresight()
        pol.reserve_weight = weight
        pol.reset(cluster, _trace([]))
        for _ in range(40):  # arrivals: half of them may use T4 only (or nothing in particular)
            pol.observe(Pod(4000, 1024, 1, 1000, seen_spec))
            pol.observe(Pod(4000, 1024, 1, 1000, ""))
        pod = Pod(4000, 1024, 1, 1000, pod_spec)
        ok, slots = cluster.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
        return pol.score(pod, ok, slots)[0]

    free = scores("", "")
    assert free[0] == free[1]  # nothing constrained: the two nodes are alike
    s, measure_only = scores("T4", ""), scores("T4", "", weight=0.0)
    # FGD's measure already prefers G2 (T4-only shapes see G2's GPUs as fragments); the reserve
    # cost adds what taking a T4 that T4-only demand needs is worth
    assert measure_only[0] < measure_only[1]
    assert s[1] - s[0] > measure_only[1] - measure_only[0] + 100
    cost = Foresight.reserve_cost  # and a T4-only pod pays no reserve cost on T4
    pol = Foresight()
    pol.reset(Cluster(_nodes(["T4", "G2"])), _trace([]))
    for _ in range(40):
        pol.observe(Pod(4000, 1024, 1, 1000, "T4"))
    assert np.all(cost(pol, Pod(4000, 1024, 1, 1000, "T4")) == 0)
    assert cost(pol, Pod(4000, 1024, 1, 1000, ""))[0] > 0
    assert cost(pol, Pod(4000, 1024, 1, 1000, ""))[1] == 0


def test_reserve_charges_only_the_gpu_a_constrained_class_could_still_use():
    # two P100 nodes of 2 GPUs: one with 16 cores, one with 64; P100-only pods ask 12 cores
    # per GPU, so the 16-core node can sell only 1,333 of its 2,000 milli to them
    nodes = Nodes(np.array(["small", "big", "g2"]), np.array([16000, 64000, 64000]),
                  np.full(3, 256000), np.full(3, 2), np.array(["P100", "P100", "G2"]))
    cluster = Cluster(nodes)
    pol = Foresight()
    pol.reset(cluster, _trace([]))
    for _ in range(40):
        pol.observe(Pod(12000, 1024, 1, 1000, "P100"))
        pol.observe(Pod(2000, 1024, 1, 1000, ""))
    light = pol.reserve_cost(Pod(1000, 1024, 1, 500, ""))  # a light pod, half a GPU
    assert light[2] == 0  # G2 serves no constrained class
    # on the small node most of the half GPU it takes is GPU that P100 pods could not have
    # used (1,333 usable before, 1,250 after: its core); on the big node all 500 are lost
    assert light[0] < 0.2 * light[1]
    heavy = pol.reserve_cost(Pod(12000, 1024, 1, 500, ""))  # the same GPU, but P100-heavy CPU
    assert heavy[0] > light[0]  # its CPU is what P100 pods would run short of
    old = Foresight()
    old.reserve_usable = False  # the rule before: the GPU taken, whatever the node's CPU
    old.reset(Cluster(nodes), _trace([]))
    for _ in range(40):
        old.observe(Pod(12000, 1024, 1, 1000, "P100"))
        old.observe(Pod(2000, 1024, 1, 1000, ""))
    was = old.reserve_cost(Pod(1000, 1024, 1, 500, ""))
    assert np.isclose(was[0], was[1]) and was[0] > 0


def test_stranded_term_uses_what_gpu_pods_ask_unless_cpu_only_pods_exceed_the_cluster():
    nodes = Nodes(np.array(["a"]), np.array([96000]), np.array([400000]), np.array([8]),
                  np.array(["G2"]))  # 12 cores per GPU
    pol = Foresight()
    pol.reset(Cluster(nodes), _trace([]))
    for _ in range(10):
        pol.observe(Pod(10000, 1024, 1, 1000, ""))  # GPU pods: 10 cores per GPU
        pol.observe(Pod(4000, 1024, 0, 0, ""))  # CPU-only pods: 14 cores per GPU in all
    gpu, cpu, mem = np.array([8000.0]), np.array([96000]), np.array([400000])
    assert pol.stranded(gpu, cpu, mem)[0] == 0  # 96 cores cover 8 GPUs at 10 cores each
    pol.strand_ratio = "all"
    pol.observe(Pod(4000, 1024, 0, 0, ""))
    assert pol.stranded(gpu, cpu, mem)[0] > 0  # the rule before: 14+ cores per GPU
    pol = Foresight()
    pol.reset(Cluster(nodes), _trace([]))
    for _ in range(10):
        pol.observe(Pod(10000, 1024, 1, 1000, ""))
        pol.observe(Pod(20000, 1024, 0, 0, ""))  # 30 cores per GPU in all: more than 12
    # CPU-only pods ask 18 cores per GPU beyond the cluster's 12: GPU pods' share shrinks
    assert np.isclose(pol.strand_demand[0] / pol.strand_demand[2], (10000 + 18000) / 1000)
    assert pol.stranded(gpu, cpu, mem)[0] > 0


def _p100_cluster() -> Cluster:
    # P100 nodes as in openb: 16 cores for 2 GPUs (the typical one) and 64 cores for 2 GPUs
    return Cluster(Nodes(np.array(["small", "small2", "big", "g2"]),
                         np.array([16000, 16000, 64000, 96000]), np.full(4, 256000),
                         np.array([2, 2, 2, 8]), np.array(["P100", "P100", "P100", "G2"])))


def test_host_reserve_keeps_cpu_rich_nodes_of_a_class_for_its_cpu_heavy_pods():
    cluster = _p100_cluster()
    pol = Foresight()
    pol.reset(cluster, _trace([]))
    assert np.all(pol.hosts.cost(Pod(12000, 1024, 1, 470, "")) == 0)  # no class seen yet
    for _ in range(20):
        pol.observe(Pod(11908, 1024, 1, 470, "P100"))  # 25 cores per GPU: fits the big node
        pol.observe(Pod(3152, 1024, 1, 810, "P100"))  # light: fits anywhere
        pol.observe(Pod(11000, 1024, 1, 1000, ""))
    rho, hosts = pol.hosts.sub[frozenset({"P100"})]
    assert rho == 8.0 and list(np.flatnonzero(hosts)) == [2]  # 8 cores per GPU; the 64-core node
    unconstrained = pol.hosts.cost(Pod(11000, 1024, 1, 1000, ""))
    light = pol.hosts.cost(Pod(3152, 1024, 1, 810, "P100"))
    cpu_only = pol.hosts.cost(Pod(16000, 1024, 0, 0, ""))
    for cost in (unconstrained, light, cpu_only):  # every other pod pays on the big node only
        assert cost[2] > 0 and np.all(cost[[0, 1, 3]] == 0)
    assert unconstrained[2] > light[2]  # in proportion to the GPU it takes ...
    assert np.isclose(cpu_only[2] / unconstrained[2], 16000 * 470 / 11908 / 1000)  # ... or CPU
    assert np.all(pol.hosts.cost(Pod(11908, 1024, 1, 470, "P100")) == 0)  # the heavy pods: none
    # and the score follows: a light P100 pod goes to a 16-core node, not to the big one
    cluster.place(0, 0, 3152, 1024, 1, 810)  # (both partly used: FGD's measure alike)
    cluster.place(2, 0, 3152, 1024, 1, 810)
    light_pod = Pod(3152, 1024, 1, 810, "P100")
    pol.host_weight = 0.0
    assert list(_pick(pol, cluster, light_pod)) == [2]  # before: the big node
    pol.host_weight = 2.0
    assert set(_pick(pol, cluster, light_pod)) <= {0, 1}


def test_whole_gpu_pods_break_ties_toward_nodes_without_spare_cpu():
    cluster = _p100_cluster()
    pol = Foresight()
    pol.reset(cluster, _trace([]))
    for _ in range(10):
        pol.observe(Pod(11000, 1024, 1, 1000, ""))  # 11 cores per GPU, nothing constrained
    pod = Pod(11000, 1024, 1, 1000, "")
    excess = pol.cpu_excess(pod, cluster.gpu_free.sum(axis=1) - 1000)
    # left after the pod: big 53 cores for 1 GPU (42 spare), G2 85 for 7 (8 spare)
    assert np.allclose(excess[2:], [42000 / 64000, 8000 / 96000])
    pol.whole_tie = "bestfit"  # the rule before: the tightest node share (the big P100 node)
    assert list(_pick(pol, cluster, pod)) == [2]
    pol.whole_tie = "cpu-excess"
    assert list(_pick(pol, cluster, pod)) == [3]


def test_terminal_waste_is_what_common_fraction_sizes_cannot_fill():
    from scheduler_hook.fragmentation import ShapeMix
    from scheduler_hook.residue import TerminalWaste

    # 320, 470, 650, 810 common; 110 rare (under 5 % of fractions); one whole-GPU shape
    mix = ShapeMix.from_counts({(4000, 320, 1, ""): 20, (4000, 470, 1, ""): 40,
                                (4000, 650, 1, ""): 20, (4000, 810, 1, ""): 60,
                                (4000, 110, 1, ""): 2, (8000, 1000, 1, ""): 200})
    w = TerminalWaste(0.05).fit(mix)
    assert w.sizes_ == (32, 47, 65, 81)
    free = np.array([120, 350, 530, 1000, 300])
    # 120: nothing common fits; 350: a 320 leaves 30; 530: a 470 leaves 60;
    # 1000: 650 + 320 leaves 30; 300: nothing fits
    np.testing.assert_array_equal(w(free), [120, 30, 60, 30, 300])
    # a 650 on a fresh GPU adds nothing: W(1000) = W(350) = 30
    assert w.added(np.array([1000]), 650)[0] == 0
    assert TerminalWaste(0.01).fit(mix)(np.array([120]))[0] == 10  # the rare 110 counts now


def test_foresight_pairs_a_fraction_where_its_residue_can_still_be_filled():
    nodes = Nodes(np.array(["n0", "n1"]), np.full(2, 64000), np.full(2, 256000),
                  np.full(2, 1), np.array(["G2", "G2"]))

    def scores(weight: float) -> np.ndarray:
        cluster = Cluster(nodes)
        cluster.place(0, 0, 4000, 0, 1, 230)  # n0: a lone 230-milli pod; n1: an empty GPU
        pol = Foresight()
        pol.residue_weight = weight
        pol.reset(cluster, _trace([]))
        for g, n in ((230, 10), (320, 20), (470, 40), (650, 20), (810, 60)):
            for _ in range(n):  # every size before the last mix refresh (each new size)
                pol.observe(Pod(4000, 1024, 1, g, ""))
        assert pol.residue.sizes_ == ((23, 32, 47, 65, 81) if weight else None)
        pod = Pod(4000, 1024, 1, 650, "")
        ok, slots = cluster.feasible(pod.cpu, pod.mem, pod.num_gpu, pod.milli, pod.spec)
        return pol.score(pod, ok, slots)[0]

    # a 650 beside the 230 leaves 120 that nothing common fills (the 770 it takes could have
    # been filled to 70 by 470 + 230): terminal waste +50; on the empty GPU it leaves 350,
    # filled to 30 by a 320, as the empty GPU would have been (650 + 320): +0
    off, on, strong = scores(0.0), scores(10.0), scores(30.0)
    assert np.argmax(off) == 0  # FGD's measure fills the GPU that already holds a pod
    assert (on[1] - on[0]) - (off[1] - off[0]) == 10.0 * 50
    assert np.argmax(strong) == 1
