"""Dev-seed ablations behind issue 13's choices (never seeds 42-51): where FGD puts CPU-only
pods among its ties, what else could explain the CPU-heavy gap, and Foresight's constraint terms.

Usage: PYTHONPATH=. nice .venv/bin/python bench/replay_issue13_dev.py TRACE VARIANT[,..] 0-1
Prints one JSON line per run. The runs quoted in bench/results/replay_generalize.md are in
bench/results/replay_issue13_dev.jsonl with the commit whose policies they ran on (`code`):
cd390ab = FGD with random CPU-only ties and Foresight before issue 13; a4f2c22 = the policies
of issue 13 (the `fgd-tie-*` variants override the CPU-only tie, so they run like cd390ab);
rows with `"pass": 2` ran on the policies of issue 13's second pass (`default-spec20`:
class-usable reserve, weight 2, stranded ratio of GPU pods), where `foresight-reserve-gpu1` +
`foresight-strand-all` together are the first pass's Foresight. Rows with `"pass": 3` ran on
issue 13's third pass (host reserve and CPU-excess tie-break; `foresight-pass2` = the second
pass's Foresight); the earlier variants now run on top of the third pass's defaults. Pass-3
rows named `foresight-shapes*`, `-cpupods`, `-hostsc*`, `-hostss*` ran exploratory code that
was dropped (see the Reading of replay_generalize.md). Rows with `"pass": 4` (session 6) ran
the third pass's policies with one generic knob changed (`foresight-fit*`, `-hl*`, `-refresh8`,
`-fitall`): none was adopted (see the Reading). Pass-4 rows with `"code": "pass3"` named
`foresight-residue*` ran the residue probe (now the real term, see VARIANTS below) on the
third pass; rows with `"code":
"residue"` ran after the residue term became Foresight's default (`foresight` = weight 10,
`foresight-pass3` = the third pass, `-res3` / `-res5` = weights 3 / 5).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.replay import policies as P
from simulator.replay.data import Nodes, Pods, load_nodes, load_trace
from simulator.replay.engine import replay

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb-2023" / "csv"


def _tie(c, pod, rule: str) -> np.ndarray:
    """A tie-break value per node (higher = preferred), for the rules tried."""
    nd = c.nodes
    cpu_left, mem_left = (c.cpu_free - pod.cpu) / nd.cpu, (c.mem_free - pod.mem) / nd.mem
    if rule == "least":  # kube-scheduler NodeResourcesLeastAllocated (cpu, memory)
        return (cpu_left + mem_left) / 2
    if rule == "least+balanced":  # ... plus NodeResourcesBalancedAllocation
        return ((cpu_left + mem_left) / 2 + 1 - np.abs(cpu_left - mem_left)) / 2
    if rule == "mostalloc":  # dominant CPU/memory share after placement (a packer)
        return np.maximum(1 - cpu_left, 1 - mem_left)
    if rule == "freecpu-per-gpu":  # Foresight's CPU-only rule before issue 13
        t = (c.cpu_free - pod.cpu) / np.maximum(c.gpu_free.sum(axis=1), 100)
        return t / (1 + np.abs(t))
    if rule == "fewest-free":  # the rule chosen for the port
        return -P.free_gpu_share(c)
    raise ValueError(rule)


def fgd_tie(rule: str, all_pods: bool = False) -> P.Policy:
    class Tie(P.FGD):
        name = f"fgd-tie-{rule}"
        cpu_tie = "random"

        def score(self, pod, node_ok, slots):
            node, q = super().score(pod, node_ok, slots)
            if pod.num_gpu and not all_pods:
                return node, q
            return node + 1e-3 * _tie(self.cluster, pod, rule), q  # < 1: only among ties
    return Tie()


def foresight(**attrs) -> P.Policy:
    return type("F", (P.Foresight,), {"name": "foresight-" + ",".join(attrs), **attrs})()


VARIANTS = {
    **{f"fgd-tie-{r}": (lambda r=r: fgd_tie(r)) for r in
       ("least", "least+balanced", "mostalloc", "freecpu-per-gpu", "fewest-free")},
    "fgd-tie-mostalloc-all": lambda: fgd_tie("mostalloc", all_pods=True),
    "foresight-reserve0.5": lambda: foresight(reserve_weight=0.5),
    "foresight-reserve2": lambda: foresight(reserve_weight=2.0),
    "foresight-reserve4": lambda: foresight(reserve_weight=4.0),
    "foresight-nobalance": lambda: foresight(balance=0.0),
    "foresight-nofit": lambda: foresight(fit_scope="none"),
    # second pass (default-spec20): the reserve cost on class-usable GPU, the stranded ratio
    "foresight-pass1": lambda: foresight(reserve_usable=False, reserve_weight=1.0,
                                         strand_ratio="all"),  # Foresight of the first pass
    "foresight-usable1-strandall": lambda: foresight(reserve_weight=1.0, strand_ratio="all"),
    "foresight-reserve1": lambda: foresight(reserve_weight=1.0),
    "foresight-reserve-gpu": lambda: foresight(reserve_usable=False),
    "foresight-reserve-gpu1": lambda: foresight(reserve_usable=False, reserve_weight=1.0),
    "foresight-strand-all": lambda: foresight(strand_ratio="all"),
    "foresight-strand-gpuonly": lambda: foresight(strand_ratio="gpu-pods-only"),
    # third pass (default-spec20): CPU-rich hosts kept for a class's CPU-heavy pods
    # (host_weight) and whole-GPU pods' tie-break toward nodes with no spare CPU (whole_tie);
    # both are Foresight's defaults since pass 3
    "foresight-pass2": lambda: foresight(whole_tie="bestfit", host_weight=0.0),
    "foresight-hosts2-only": lambda: foresight(whole_tie="bestfit"),
    "foresight-hosts4-only": lambda: foresight(whole_tie="bestfit", host_weight=4.0),
    "foresight-hosts8-only": lambda: foresight(whole_tie="bestfit", host_weight=8.0),
    "foresight-excess-only": lambda: foresight(host_weight=0.0),
    "foresight-excess-hosts1": lambda: foresight(host_weight=1.0),
    "foresight-excess-hosts4": lambda: foresight(host_weight=4.0),
    # fourth pass (`default-spec20` +0.28 on the final seeds): generic knobs, dev seeds 0-5
    "foresight-fit15": lambda: foresight(fit_weight=15.0),
    "foresight-fit60": lambda: foresight(fit_weight=60.0),
    "foresight-hl2000": lambda: foresight(half_life=2000.0),
    "foresight-hl20000": lambda: foresight(half_life=20000.0),
    "foresight-refresh8": lambda: foresight(refresh=8),
    "foresight-fitall": lambda: foresight(fit_scope="all"),
    "foresight-hl1000": lambda: foresight(half_life=1000.0),
    "foresight-hl2000-refresh8": lambda: foresight(half_life=2000.0, refresh=8),
    # session 6: the residue term (scheduler_hook/residue.py), Foresight's default since
    "foresight-pass3": lambda: foresight(residue_weight=0.0),  # the third pass's Foresight
    "foresight-res3": lambda: foresight(residue_weight=3.0),
    "foresight-res5": lambda: foresight(residue_weight=5.0),
}


def _keep_off(light_too: bool, cost: float = 1e5) -> P.Policy:
    """Upper-bound probe (not a policy): pods other than CPU-heavy P100-only ones pay ``cost``
    on the 64-core P100 nodes, so those nodes' CPU waits for the P100 pods that need it."""
    class KeepOff(P.Foresight):
        name = "foresight-keepoff"
        whole_tie, host_weight = "bestfit", 0.0  # on top of the second pass's Foresight

        def score(self, pod, node_ok, slots):
            node, slot = super().score(pod, node_ok, slots)
            nd = self.cluster.nodes
            big = (nd.model == "P100") & (nd.cpu >= 64000)
            mine = pod.spec == "P100" and (pod.cpu >= 8000 or not light_too)
            return (node, slot) if mine else (node - cost * big, slot)
    return KeepOff()


def _hosts_only(keep: str, **attrs) -> P.Policy:
    """Probe: the host reserve of one class only."""
    pol = foresight(**attrs)
    old = pol.reset

    def reset(cluster, trace):
        old(cluster, trace)
        obs = pol.hosts.observe

        def observe(pod):
            if pod.spec == keep or not pod.num_gpu or not pod.spec:
                obs(pod)
            else:
                pol.hosts.total += pod.num_gpu * pod.milli
        pol.hosts.observe = observe
    pol.reset = reset
    return pol


VARIANTS["foresight-hosts2-p100only"] = lambda: _hosts_only("P100", whole_tie="bestfit")
VARIANTS["foresight-keepoff"] = lambda: _keep_off(False)
VARIANTS["foresight-keepoff-light"] = lambda: _keep_off(True)
VARIANTS["foresight-keepoff-soft"] = lambda: _keep_off(True, 500.0)


def cluster(kind: str) -> Nodes:
    """'gpu' = the 1,213 GPU nodes (the protocol); 'all' = with the 310 CPU-only nodes."""
    if kind == "gpu":
        return load_nodes(CSV / "openb_node_list_gpu_node.csv")
    df = pd.read_csv(CSV / "openb_node_list_all_node.csv")
    return Nodes(df.sn.astype(str).to_numpy(), df.cpu_milli.to_numpy(np.int64),
                 df.memory_mib.to_numpy(np.int64), df.gpu.fillna(0).to_numpy(np.int64),
                 df.model.fillna("").astype(str).to_numpy())


def main() -> None:
    trace, variants, seeds = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    lo, hi = (int(x) for x in seeds.split("-"))
    pods = load_trace(CSV, trace)
    for s in range(lo, hi + 1):
        for v in variants:
            name, nodes, work = v, cluster("gpu"), pods
            if v.endswith("-allnodes"):  # CPU-only nodes take CPU-only pods too
                v, nodes = v[: -len("-allnodes")], cluster("all")
            if v.endswith("-nomem"):  # memory never binds
                v = v[: -len("-nomem")]
                work = Pods(pods.cpu, np.zeros_like(pods.mem), pods.num_gpu, pods.gpu_milli,
                            pods.spec)
            pol = VARIANTS[v]() if v in VARIANTS else v
            r = replay(nodes, work, pol, s, until=100)
            print(json.dumps({"trace": trace, "variant": name, "seed": s,
                              "a": r.alloc_at_100, "s": round(r.seconds, 1)}), flush=True)


# The residue probe's variants (session 6). The probe that produced the `"code": "pass3"` rows
# was a copy of the term on the third pass's Foresight; it is now the real term
# (scheduler_hook/residue.py), which gives the same numbers (`default-spec20` seeds 0 / 1
# at weight 10: 95.9097 / 95.9839 both ways).
for _w in (1, 3, 10, 30):
    for _s in (0.02, 0.05):
        VARIANTS[f"foresight-residue{_w}-{_s}"] = (
            lambda w=_w, s=_s: foresight(residue_weight=float(w), residue_share=s))


if __name__ == "__main__":
    main()
