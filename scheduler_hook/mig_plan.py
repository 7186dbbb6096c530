"""MIG geometry planner: which mig-parted configuration each MIG node should carry so that the
forecast demand per profile is covered, changing as few nodes as possible. It proposes; it
never applies (the output is `kubectl label node ... nvidia.com/mig.config=...` lines).

Demand: instances per profile for the next hours, from the demand forecaster's per-shape
forecast at a chosen quantile (`unique_id` = `<queue>|mig:<profile>`, summed over queues; a
sum of upper quantiles is conservative), or, without one, the MIG requests of the pods now
running or pending (the mix of recent requests).

Search: unmet demand is counted in compute slices, sum over profiles of
`c * max(0, demand - supply)`. The plan minimises it first, then the re-split cost (1 per node
plus 1/4 per pod that must finish first: a GPU must be empty to be re-split, and mig-parted
re-splits every GPU of a node for `devices: all`), then stranded slices, named configs before
custom ones. It is solved exactly as a small integer program over classes of alike nodes
(scheduler_hook.mig_solve, scipy's HiGHS); a greedy search (the change removing most unmet
slices per unit of cost, one node at a time, needless changes reverted) gives the answer when
scipy cannot, and is kept when the solver's is not better. A node changes at most once per
plan. Candidates: the named configs for the node's GPU model, and with `custom=True` every
maximal valid geometry (they need an entry in the mig-parted ConfigMap; the plan prints it).
Single-strategy nodes keep one profile per node. Supply is pooled per profile across
strategies (a mixed pod cannot use a single node's devices: a cluster mixing both strategies
for one profile gets an optimistic plan).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler_hook import mig
from scheduler_hook.mig_k8s import CONFIG_LABEL

# the 1g-3g weights and burst levels (issue 28), re-exported: callers import them from here
from scheduler_hook.mig_small import (  # noqa: F401
    BURST_QUANTILES,
    BURST_WEIGHT,
    Burst,
    burst_levels,
    burst_rows,
    protect_small,
    small_bursts,
)

QUANTILES = ("p10", "p50", "p90")
DRAIN_COST = 0.25  # a pod to wait for costs a quarter of a node change
BUSY_STATES = ("pending", "rebooting")  # the MIG manager is already re-splitting the node


@dataclass
class Candidate:
    name: str
    geometry: mig.Geometry  # per GPU
    named: bool = True


@dataclass
class NodeState:
    name: str
    model: mig.GpuModel
    gpus: int
    strategy: str
    current: str                 # config name, or "custom (<geometry>)" when not a named one
    offer: Counter[str]          # instances now, node-wide (allocatable)
    pods: list[str]              # pods that would have to finish before a re-split
    busy: bool = False           # a re-split is already in progress


@dataclass
class NodePlan:
    node: str
    model: str
    gpus: int
    current: str
    proposed: str
    changed: bool
    geometry: str                # proposed geometry per GPU
    covered: dict[str, int]      # forecast instances this node serves, per profile
    stranded: int                # compute slices no forecast profile can use
    drain: list[str]             # pods that must finish first (only when changed)
    custom_yaml: str = ""        # mig-parted entry to add, for a custom geometry

    @property
    def label_command(self) -> str:
        return f"kubectl label node {self.node} {CONFIG_LABEL}={self.proposed} --overwrite"


@dataclass
class Plan:
    nodes: list[NodePlan]
    demand: dict[str, float]
    supply_before: dict[str, int]
    supply_after: dict[str, int]
    source: str
    quantile: str
    unmet_before: float = 0.0    # compute slices of demand with no instance
    unmet_after: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def commands(self) -> list[str]:
        return [n.label_command for n in self.nodes if n.changed]

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "quantile": self.quantile, "demand": self.demand,
                "supply_before": self.supply_before, "supply_after": self.supply_after,
                "unmet_slices_before": self.unmet_before, "unmet_slices_after": self.unmet_after,
                "changes": sum(n.changed for n in self.nodes), "commands": self.commands,
                "notes": self.notes,
                "nodes": [{"node": n.node, "model": n.model, "gpus": n.gpus,
                           "current": n.current, "proposed": n.proposed, "changed": n.changed,
                           "geometry": n.geometry, "covered": n.covered,
                           "stranded_slices": n.stranded, "drain": n.drain,
                           "custom_yaml": n.custom_yaml or None} for n in self.nodes]}


# ---- inputs --------------------------------------------------------------------------------
def node_states(nodes: Iterable[Any], pods: Iterable[Any]) -> list[NodeState]:
    """MIG nodes (NodeInfo with `.mig`) with the pods bound to them; MigError naming a node
    whose GPU model has no known geometry."""
    on_node: dict[str, list[str]] = {}
    for p in pods:
        if p.node and not p.terminal and (p.mig_count or p.gpus):
            on_node.setdefault(p.node, []).append(p.key)
    out = []
    for info in sorted(nodes, key=lambda i: i.name):
        m = info.mig
        if m is None:
            continue
        model = m.model(info.gpu_mem_mib if m.strategy == "mixed" else 0.0)
        if model is None:
            raise mig.MigError(f"node {info.name}: GPU model {m.product or '(unlabelled)'!r} "
                               "has no known MIG geometry")
        gpus = m.physical_gpus(model)
        named = mig.configs_for(model).get(m.config)
        per = _per_gpu(m.caps, gpus)
        current = m.config if named is not None and named.as_dict == per else \
            f"custom ({mig.geometry_label(per)})" if per else f"custom ({m.config or '?'})"
        out.append(NodeState(info.name, model, gpus, m.strategy, current, Counter(m.caps),
                             sorted(on_node.get(info.name, [])),
                             m.config_state.lower() in BUSY_STATES))
    return out


def _per_gpu(caps: dict[str, int], gpus: int) -> mig.Geometry:
    return {p: n // gpus for p, n in caps.items() if gpus and n % gpus == 0 and n} \
        if gpus and all(n % gpus == 0 for n in caps.values()) else {}


#: Most instances of one profile a forecast may ask: a million is beyond any cluster's MIG
#: slices; more is a forecast in other units (or 1e300), planned as a 300-digit count.
MAX_INSTANCES = 1e6


def demand_from_forecast(rows: Iterable[dict], quantile: str = "p90") -> dict[str, float]:
    """Instances per profile from forecast rows (`unique_id`, `p10|p50|p90`, optional
    `origin`): series whose last `|` part is `mig:<profile>`, latest origin each, summed.
    Rows are named 1-based (a CSV's data row, the n-th item of a JSON list)."""
    if quantile not in QUANTILES:
        raise ValueError(f"quantile {quantile!r}: choose one of {', '.join(QUANTILES)}")
    latest: dict[str, tuple[str, float]] = {}
    for i, r in enumerate(rows, 1):
        uid = str(r.get("unique_id", ""))
        shape = uid.rsplit("|", 1)[-1]
        if not shape.startswith("mig:"):
            continue
        if not 1 <= mig.profile_compute(shape[4:]) <= mig.COMPUTE_SLICES:
            raise ValueError(f"forecast row {i}: {uid!r}: not a MIG profile like 1g.10gb")
        if quantile not in r:  # a renamed column is missing, not "not a number"
            raise ValueError(f"forecast row {i}: no column {quantile} (a forecast has "
                             f"unique_id and {', '.join(QUANTILES)})")
        raw = r[quantile]
        try:
            v = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"forecast row {i}: {quantile} is empty" if raw in (None, "") else
                             f"forecast row {i}: {quantile}: {raw!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"forecast row {i}: {quantile}: not finite")
        if v < 0:
            raise ValueError(f"forecast row {i}: {quantile}: {v:g} is negative: a count of "
                             "MIG instances is never negative")
        if v > MAX_INSTANCES:
            raise ValueError(f"forecast row {i}: {quantile}: {v:g} is above {MAX_INSTANCES:g} "
                             "instances, beyond any cluster (a forecast in other units?)")
        origin = str(r.get("origin", ""))
        if uid not in latest or origin >= latest[uid][0]:
            latest[uid] = (origin, v)
    out: dict[str, float] = {}
    for uid, (_, v) in latest.items():
        prof = uid.rsplit("|", 1)[-1][4:]
        out[prof] = out.get(prof, 0.0) + v
    return out


def demand_from_pods(pods: Iterable[Any]) -> dict[str, float]:
    """Instances per profile asked by the live (running or pending) MIG pods."""
    out: dict[str, float] = {}
    for p in pods:
        if p.mig_count and not p.terminal:
            out[p.mig_profile] = out.get(p.mig_profile, 0.0) + p.mig_count
    return out


# ---- search --------------------------------------------------------------------------------
def candidates(node: NodeState, custom: bool) -> list[Candidate]:
    out = [Candidate(c.name, c.as_dict) for c in mig.configs_for(node.model).values()
           if c.mig_enabled and c.geometry and mig.is_valid(c.as_dict, node.model)]
    if custom:
        known = {tuple(sorted(c.geometry.items())) for c in out}
        for g in mig.maximal_geometries(node.model):
            if tuple(sorted(g.items())) not in known:
                out.append(Candidate("foresight-" + mig.geometry_label(g).replace("+", "-"),
                                     g, named=False))
    if node.strategy == "single":  # every device of a single-strategy node is one profile
        out = [c for c in out if len(c.geometry) == 1]
    return out


def _offer(c: Candidate, gpus: int) -> Counter[str]:
    return Counter({p: n * gpus for p, n in c.geometry.items()})


def unmet(demand: dict[str, float], supply: Counter[str],
          weights: dict[str, float] | None = None, burst: Burst | None = None
          ) -> float:
    """Compute slices of demand without an instance, each profile's times its weight (1 when
    not given); plus, each at its weight, those of the ``burst`` levels (see `protect_small`,
    `burst_levels`)."""
    w = weights or {}
    out = sum(w.get(p, 1.0) * mig.profile_compute(p) *
              max(0.0, math.ceil(d - 1e-9) - supply.get(p, 0)) for p, d in demand.items())
    return out + sum(bw * mig.profile_compute(p) *
                     max(0.0, math.ceil(d - 1e-9) - supply.get(p, 0))
                     for p, d, bw in burst_rows(burst))


def plan(states: list[NodeState], demand: dict[str, float], *, custom: bool = False,
         source: str = "", quantile: str = "p90", exact: bool = True,
         weights: dict[str, float] | None = None, burst: Burst | None = None
         ) -> Plan:
    """Propose a configuration per node (see module docstring). ``weights``: per profile,
    how much an unmet compute slice of it counts (e.g. `protect_small`); 1 when not given.
    ``burst``: per profile, instances wanted beyond its demand, each slice at `BURST_WEIGHT`
    (`protect_small`)."""
    supply = _supply(states, {})
    cands: dict[str, list[Candidate]] = {}
    by_kind: dict[tuple[str, str], list[Candidate]] = {}  # per GPU model and strategy
    for s in states:
        kind = (s.model.name, s.strategy)
        if kind not in by_kind:
            by_kind[kind] = candidates(s, custom)
        cands[s.name] = by_kind[kind]
    chosen = _greedy(states, cands, demand, weights, burst)
    if exact:
        from scheduler_hook.mig_solve import solve

        best = solve(states, cands, demand, DRAIN_COST, weights=weights,
                     burst=burst_rows(burst))
        if best is not None and _cost(states, best, demand, weights, burst) < \
                _cost(states, chosen, demand, weights, burst):
            chosen = best
    return _render(states, chosen, demand, supply, _supply(states, chosen), source, quantile)


def _supply(states: list[NodeState], chosen: dict[str, Candidate]) -> Counter[str]:
    out: Counter[str] = Counter()
    for s in states:
        c = chosen.get(s.name)
        out.update(_offer(c, s.gpus) if c else s.offer)
    return out


def _cost(states: list[NodeState], chosen: dict[str, Candidate], demand: dict[str, float],
          weights: dict[str, float] | None = None, burst: Burst | None = None
          ) -> tuple[float, float, int]:
    """(unmet slices, re-split cost, stranded slices of the changed nodes): lower is better."""
    changed = [s for s in states if s.name in chosen]
    return (unmet(demand, _supply(states, chosen), weights, burst),
            sum(1 + DRAIN_COST * len(s.pods) for s in changed),
            sum(s.gpus * mig.stranded_compute(chosen[s.name].geometry, s.model)
                for s in changed))


def _greedy(states: list[NodeState], cands: dict[str, list[Candidate]],
            demand: dict[str, float], weights: dict[str, float] | None = None,
            burst: Burst | None = None) -> dict[str, Candidate]:
    """One node at a time, the change removing most unmet slices per unit of cost; then the
    changes the coverage does not need are reverted. Fast, and the fallback without scipy."""
    supply = _supply(states, {})
    chosen: dict[str, Candidate] = {}
    while unmet(demand, supply, weights, burst) > 0:
        base, best = unmet(demand, supply, weights, burst), None
        alike: set[tuple] = set()  # nodes of one model, size, geometry and pod count score alike
        for s in states:
            if s.name in chosen or s.busy:
                continue
            kind = (s.model.name, s.gpus, s.strategy, tuple(sorted(s.offer.items())),
                    len(s.pods))
            if kind in alike:
                continue
            alike.add(kind)
            rest = supply - s.offer
            for c in cands[s.name]:
                gain = base - unmet(demand, rest + _offer(c, s.gpus), weights, burst)
                if gain <= 0:
                    continue
                key = (gain / (1 + DRAIN_COST * len(s.pods)), c.named,
                       -mig.stranded_compute(c.geometry, s.model), -len(s.pods))
                if best is None or key > best[0]:
                    best = (key, s, c)
        if best is None:
            break
        _, s, c = best
        chosen[s.name] = c
        supply = supply - s.offer + _offer(c, s.gpus)
    for s in reversed(states):  # a change the coverage does not need is not proposed
        c = chosen.get(s.name)
        if c is not None:
            back = supply - _offer(c, s.gpus) + s.offer
            if unmet(demand, back, weights, burst) <= unmet(demand, supply, weights, burst):
                del chosen[s.name]
                supply = back
    return chosen


def _render(states: list[NodeState], chosen: dict[str, Candidate], demand: dict[str, float],
            before: Counter[str], after: Counter[str], source: str, quantile: str) -> Plan:
    left = {p: math.ceil(d - 1e-9) for p, d in demand.items()}
    covers: dict[str, dict[str, int]] = {}
    # demand goes to the nodes that stay as they are first: a changed node covers the rest,
    # which is why it changes
    for s in sorted(states, key=lambda s: (s.name in chosen, s.name)):
        c = chosen.get(s.name)
        covers[s.name] = {}
        for p, n in sorted((_offer(c, s.gpus) if c else s.offer).items()):
            take = min(n, left.get(p, 0))
            if take:
                covers[s.name][p] = take
                left[p] -= take
    rows = []
    for s in sorted(states, key=lambda s: (s.name not in chosen, s.name)):  # changed first
        c = chosen.get(s.name)
        offer = _offer(c, s.gpus) if c else s.offer
        per = c.geometry if c else _per_gpu(dict(s.offer), s.gpus)
        covered = covers[s.name]
        used = sum(mig.profile_compute(p) * n for p, n in offer.items())
        idle = sum(mig.profile_compute(p) * n for p, n in offer.items() if not demand.get(p))
        stranded = s.gpus * mig.COMPUTE_SLICES - used + idle
        yaml_entry = "" if c is None or c.named else (
            f"{c.name}:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n" +
            "".join(f'      "{p}": {n}\n' for p, n in sorted(c.geometry.items())))
        rows.append(NodePlan(s.name, s.model.name, s.gpus, s.current,
                             c.name if c else s.current, c is not None,
                             mig.geometry_label(per) if per else "?", covered, stranded,
                             list(s.pods) if c else [], yaml_entry))
    out = Plan(rows, dict(demand), dict(sorted(before.items())), dict(sorted(after.items())),
               source, quantile, unmet(demand, before), unmet(demand, after))
    out.notes += [f"{s.name}: MIG re-split in progress, left as it is" for s in states if s.busy]
    if out.unmet_after > 0:
        out.notes.append(f"{out.unmet_after:.0f} compute slices of demand stay uncovered: "
                         "the MIG nodes cannot offer them in any valid geometry")
    return out


# ---- entry points (CLI and REST) ------------------------------------------------------------
def plan_objects(nodes: list[dict], pods: list[dict], forecast: list[dict] | None = None,
                 quantile: str = "p90", custom: bool = False) -> Plan:
    """Plan from v1 Node and Pod dicts (a snapshot's items) and optional forecast rows.

    MigError (a node's GPU model) and ValueError (a malformed object or row, message naming
    it) are the caller's to turn into exit 2 / HTTP 422."""
    from scheduler_hook.podspec import PodSpecError, parse_pod
    from scheduler_hook.state import parse_node

    infos, reqs = [], []
    for i, n in enumerate(nodes):
        try:
            infos.append(parse_node(n))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"node {i}: {exc}") from None
    for i, p in enumerate(pods):
        try:
            reqs.append(parse_pod(p))
        except (PodSpecError, ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"pod {i}: {exc}") from None
    states = node_states(infos, reqs)
    if not states:
        raise mig.MigError("no MIG node in the snapshot (no nvidia.com/mig-* allocatable and "
                           "no -MIG- product label)")
    if quantile not in QUANTILES:
        raise ValueError(f"quantile {quantile!r}: choose one of {', '.join(QUANTILES)}")
    demand = demand_from_forecast(forecast, quantile) if forecast is not None else {}
    if demand:
        source = f"forecast of {len(demand)} MIG profiles at {quantile}"
    else:
        demand = demand_from_pods(reqs)
        source = "MIG requests of the pods running or pending (no MIG forecast)"
    return plan(states, demand, custom=custom, source=source, quantile=quantile)
