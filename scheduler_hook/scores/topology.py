"""Topology-aware gangs: keep a gang's pods inside one domain of the level it asks for.

Args (config `topology`): `levels` (the ordered node-label levels, scheduler_hook.topology),
`default_level` (a level preferred for gangs that name none; null: only gangs that ask),
`remember` (gangs whose last steering is kept, so a gang-mate scored before the first one's
binding is seen goes to the same domain).

The first pod of a gang goes to the smallest domain (the asked level, or a level nested in it)
that can take the whole gang now; later pods go where their gang-mates run or are bound. With a
required level (Kueue `podset-required-topology`, KAI `topology-required-placement`) the other
domains are filtered out, each with its reason; with a preferred one they only score lower.
Pods that are in no gang, or whose level no node carries, score a constant (left out of the mean).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from scheduler_hook import topology as topo
from scheduler_hook.scores.base import ComponentResult, Context, constant


def gang_members(state: Any) -> dict[str, list[tuple[str, str]]]:
    """gang -> [(pod key, node)] of bound gang pods, cached per state version (the wait book
    keeps bound gang members: no pass over every bound pod)."""
    hit = state.__dict__.get("_gang_members")
    if hit is not None and hit[0] == state.version:
        return hit[1]
    out: dict[str, list[tuple[str, str]]] = {}
    for key, w in state.waiting.pods.items():
        p = state.pods.get(key) if w.gang and w.bound else None
        if p is not None and p.node:
            out.setdefault(w.gang, []).append((key, p.node))
    state.__dict__["_gang_members"] = (state.version, out)
    return out


def gang_size(state: Any, pod: Any, placed: int) -> int:
    """Declared size, else the PodGroup's minMember, else the members the state has seen."""
    if pod.gang_size:
        return pod.gang_size
    if state.waiting.gang_min.get(pod.gang):
        return state.waiting.gang_min[pod.gang]
    seen = {k for k, w in state.waiting.pods.items() if w.gang == pod.gang} | {pod.key}
    return max(len(seen), placed + 1)


def _need_all(state: Any, pod: Any) -> np.ndarray:
    if pod.milli >= 0:
        return np.full(len(state.gpu_count), float(pod.milli or 1000))
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.ceil(1000.0 * pod.gpu_memory_mib / state.gpu_mem)
    return np.where(np.isfinite(m), np.minimum(m, 1000.0), 1000.0)


class TopologyGang:
    name = "topology"

    def __init__(self) -> None:
        self._steered: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def score(self, ctx: Context) -> ComponentResult:
        pod, st = ctx.pod, ctx.state
        if not pod.gang or pod.gpus == 0:
            return constant(ctx, 1.0, "not a GPU gang: no topology asked")
        args = ctx.cfg.get("topology") or {}
        level = pod.topology_required or pod.topology_preferred or args.get("default_level") or ""
        if not level:
            return constant(ctx, 1.0, f"gang {pod.gang} asks no topology level")
        required = bool(pod.topology_required)
        dom = topo.state_domains(st, topo.levels_of(ctx.cfg))
        if level not in dom.codes:
            dom = topo.state_domains(st, (*topo.levels_of(ctx.cfg), level))
        if level not in dom.codes:
            return constant(ctx, 1.0, f"no node carries the label {level}")
        mates = [(k, n) for k, n in gang_members(st).get(pod.gang, []) if k != pod.key]
        member_rows = np.array([st.index[n] for _, n in mates if n in st.index], np.int64)
        remaining = max(1, gang_size(st, pod, len(mates)) - len(mates))
        least = max(1, pod.gang_min - len(mates)) if pod.gang_min else None
        ok_rows = st.live & st.schedulable
        if pod.gpu_models:
            ok_rows = ok_rows & np.array([pod.allows_model(m) for m in st.gpu_model])
        slots = topo.slots_per_row(st.free_milli, st.usable, ok_rows, pod.gpus,
                                   _need_all(st, pod))
        sticky = self._steered.get(pod.gang) if not len(member_rows) else None
        plan = topo.plan_gang(dom, level, slots, np.where(ok_rows, st.gpu_count, 0),
                              remaining, member_rows, sticky, least)
        if plan is None:
            return constant(ctx, 1.0, f"no node carries the label {level}")
        elastic = f" (elastic: starts at {plan.remaining} of {remaining})" \
            if plan.remaining < remaining else ""
        remaining = plan.remaining
        if plan.target is not None and plan.anchor < 0:
            self._steered[pod.gang] = plan.target
            self._steered.move_to_end(pod.gang)
            while len(self._steered) > int(args.get("remember", 1024)):
                self._steered.popitem(last=False)
        rows = ctx.rows
        value, allowed = plan.value[rows], plan.allowed[rows]
        codes, row_cap, row_slots = dom.codes[level][rows], plan.domain_cap[rows], slots[rows]
        short = level.rsplit("/", 1)[-1]
        where = lambda j: f"{short} {dom.name(level, int(codes[j]))}"  # noqa: E731

        said: dict[int, str] = {}  # one reason per domain: 5,000 rejected nodes, few domains

        def why_not(j: int) -> str:
            code = int(codes[j])
            if code not in said:
                said[code] = _why_not(j)
            return said[code]

        def messages(idx: list[int]) -> list[str]:
            cs = codes[idx].tolist()
            first = dict(zip(cs, idx))
            table = {c: why_not(j) for c, j in first.items()}
            return [table[c] for c in cs]

        def _why_not(j: int) -> str:
            if codes[j] < 0:
                return f"topology: gang {pod.gang} requires one {level} domain; node has no " \
                       f"{level} label"
            if plan.anchor >= 0:
                return (f"topology: gang {pod.gang} requires one {level} domain; its "
                        f"{plan.anchor_pods} placed pod(s) are in {short} "
                        f"{dom.name(level, plan.anchor)}, this node is in {where(j)}")
            return (f"topology: gang {pod.gang} requires one {level} domain; {where(j)} can "
                    f"take {row_cap[j]} of its {remaining} remaining pod(s) now (most in one "
                    f"{short}: {plan.best_cap})")

        def reason(j: int) -> str:
            if not allowed[j]:
                return why_not(j).removeprefix("topology: ")
            if plan.anchor >= 0:
                inner = ""
                if plan.target is not None and value[j] >= 1.0:
                    lv, code = plan.target
                    inner = f" (in {lv.rsplit('/', 1)[-1]} {dom.name(lv, code)} with them)"
                return f"{where(j)}, where {plan.anchor_pods} pod(s) of gang {pod.gang} are" \
                    + inner
            if value[j] >= 1.0 and plan.target is not None:
                lv, code = plan.target
                return (f"in {lv.rsplit('/', 1)[-1]} {dom.name(lv, code)}: smallest domain "
                        f"that takes the {remaining} pod(s) of gang {pod.gang} now "
                        f"({plan.target_cap} fit){elastic}")
            if row_slots[j] <= 0:
                return f"{where(j)} holds the gang, but this node has no room for a pod of it"
            return f"{where(j)} can take {row_cap[j]} of the gang's {remaining} pod(s)"

        viol = ~allowed if required else None
        if viol is not None and not viol.any():
            viol = None
        return ComponentResult(value, reason, violation=viol,
                               violation_reason=why_not if viol is not None else None,
                               violation_messages=messages if viol is not None else None,
                               unresolvable=plan.anchor >= 0)
