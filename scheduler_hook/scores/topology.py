"""Topology-aware gangs: keep a gang's pods inside one domain of the level it asks for.

Args (config `topology`): `levels` (the ordered node-label levels, scheduler_hook.topology),
`default_level` (a level preferred for gangs that name none; null: only gangs that ask),
`remember` (gangs whose last steering is kept, so a gang-mate scored before the first one's
binding is seen goes to the same domain), `spread_slowdown` / `soon_s` (how long a preferred
gang may wait for a domain), `keep_level` (the level whose domains are kept whole-free for
forecast gang demand; null: none kept), `pack` / `pack_gpus` (pods in no gang with fewer GPUs
than `pack_gpus` go first where their predicted end does not prolong how long a node that can
hold a gang pod stays taken; off by default; `keep_level` wins when both are set),
`elastic_wait` (an elastic preferred gang goes whole to a domain predicted departures free soon
rather than smaller to one that holds part of it now; off by default), `pack_level` (with
`pack`: after those rows, taken gang-capable rows whose domain of this level cannot hold a
`pack_gang_pods` gang (4) before the pod's predicted end anyway: long runs gather in domains
already lost to gangs; null by default: rows only).

The first pod of a gang goes to the smallest domain (the asked level, or a level nested in it)
that can take the whole gang now; with a preferred level and no such domain, to the smallest
domain the predicted departures free for it soon (scores.topology_prospect); later pods go where
their gang-mates run or are bound. With a required level (Kueue `podset-required-topology`, KAI
`topology-required-placement`) the other domains are filtered out, each with its reason; with a
preferred one they only score lower.
Pods in no gang score by `keep_level` when it is set and a demand forecast is fresh (the
domains kept free for gangs score 0); otherwise they, and gangs whose level no node carries,
score a constant (left out of the mean).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import numpy as np

from scheduler_hook import topology as topo
from scheduler_hook.scores import topology_prospect as prospect
from scheduler_hook.scores.base import ComponentResult, Context, constant
from scheduler_hook.scores.reservation import MAX_HOLD_S, hold_expired, predicted_runtime


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
        self._kept: tuple | None = None  # per (state, providers, level): the kept domains

    def score(self, ctx: Context) -> ComponentResult:
        pod, st = ctx.pod, ctx.state
        args = ctx.cfg.get("topology") or {}
        if not pod.gang or pod.gpus == 0:
            if pod.gpus and args.get("keep_level"):
                return self._keep(ctx, str(args["keep_level"]))
            if pod.gpus and args.get("pack"):
                return self._pack(ctx, int(args.get("pack_gpus", 8)))
            return constant(ctx, 1.0, "not a GPU gang: no topology asked")
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
        total = np.where(ok_rows, st.gpu_count, 0)
        plan = topo.plan_gang(dom, level, slots, total, remaining, member_rows, sticky, least)
        if plan is None:
            return constant(ctx, 1.0, f"no node carries the label {level}")
        soon = None  # preferred, and no domain holds the gang now: the one departures free soon
        if args.get("elastic_wait") and not required and plan.anchor < 0 and \
                plan.remaining < remaining:  # elastic: whole soon rather than smaller now
            soon = self._soon(ctx, args, dom, level, ok_rows, total, remaining)
            if soon is not None:
                plan = topo.plan_gang(dom, level, slots, total, remaining, member_rows, sticky)
        if not required and plan.anchor < 0 and plan.target is None:
            soon = soon or self._soon(ctx, args, dom, level, ok_rows, total, remaining)
            if soon is not None:
                lv, code = soon[0]
                inside = dom.codes[lv] == code
                plan.value = np.where(inside & (slots > 0), 1.0, plan.value)
                plan.allowed = plan.allowed | inside  # preferred: never a filter, only the reason
                plan.target, plan.target_cap = soon[0], int(slots[inside].sum())
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
            if value[j] >= 1.0 and soon is not None:
                lv, code = plan.target
                return (f"in {lv.rsplit('/', 1)[-1]} {dom.name(lv, code)}: smallest domain "
                        f"that holds the {remaining} pod(s) of gang {pod.gang} within "
                        f"{soon[1] / 60:.0f} min by predicted departures ({plan.target_cap} "
                        f"fit now; none holds them now)")
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

    def _soon(self, ctx: Context, args: dict, dom: topo.Domains, level: str,
              ok_rows: np.ndarray, total: np.ndarray, remaining: int
              ) -> tuple[tuple[str, int], float] | None:
        """(smallest domain that holds the gang within the horizon, horizon s), or None."""
        st, rt = ctx.state, ctx.providers.fresh("runtime")
        if rt is None:
            return None  # no run-time predictions: nothing is known to free soon
        now = time.time()
        horizon = prospect.soon_horizon_s(rt.runtime_s(ctx.pod), args)
        free = prospect.free_soon_milli(st, prospect.row_free_at(st, rt, now), now, horizon)
        slots = topo.slots_per_row(free, st.usable, ok_rows, ctx.pod.gpus, _need_all(st, ctx.pod))
        plan = topo.plan_gang(dom, level, slots, total, remaining, np.zeros(0, np.int64))
        return None if plan is None or plan.target is None else (plan.target, horizon)

    def _keep(self, ctx: Context, level: str) -> ComponentResult:
        """A pod in no gang: away from the domains kept whole-free for forecast gang demand,
        and into the fullest of the others."""
        st, pod = ctx.state, ctx.pod
        model = ctx.providers.fresh("demand")
        if model is None:
            return constant(ctx, 1.0, "no demand forecast: no domain kept for gangs")
        if pod.priority >= int(ctx.cfg.get("high_priority", 1000)):
            return constant(ctx, 1.0, "high-priority pod may use domains kept for gangs")
        out = hold_expired(ctx, "reservation_max_hold_s", MAX_HOLD_S, "domains kept for gangs")
        if out is not None:
            return out
        levels = topo.levels_of(ctx.cfg)  # the configured tuple when it names the level: the
        dom = topo.state_domains(st, levels if level in levels else (*levels, level))  # cache
        if level not in dom.codes:
            return constant(ctx, 1.0, f"no node carries the label {level}")
        key = (st.version, ctx.providers.version, level)
        hit = self._kept
        if hit is None or hit[0] != key:
            ok = st.live & st.schedulable
            whole = np.where(ok, np.count_nonzero(st.usable & (st.free_milli >= 1000), axis=1), 0)
            reserved = float(model.reserved_whole_gpus())
            kept, share, nk = prospect.keep_free(
                dom.codes[level], whole, np.where(ok, np.count_nonzero(st.usable, axis=1), 0),
                reserved)
            hit = self._kept = (key, np.where(kept, 0.0, 1.0 - 0.5 * share), kept, nk, reserved)
        _, value, kept, nk, reserved = hit
        rows, codes = ctx.rows, dom.codes[level][ctx.rows]
        short = level.rsplit("/", 1)[-1]

        def reason(j: int) -> str:
            name = dom.name(level, int(codes[j]))
            if kept[rows[j]]:
                return (f"{short} {name} is one of the {nk} kept whole-free for the "
                        f"{reserved:.0f} GPUs of forecast gang demand")
            return f"{short} {name}: not kept for gangs; fuller domains first"

        return ComponentResult(value[rows], reason)

    def _pack(self, ctx: Context, big: int) -> ComponentResult:
        """A pod in no gang, smaller than a gang pod: first on rows no gang pod fits or that
        stay taken past its predicted end, then on other taken rows, empty gang-capable rows
        last (prospect.pack_tiers): such rows then free up together (the replay's `pack`)."""
        st, pod = ctx.state, ctx.pod
        if pod.gpus >= big:
            return constant(ctx, 1.0, f"{pod.gpus}-GPU pod: not packed (gang pods take "
                            f"{big} GPUs)")
        run = predicted_runtime(ctx)
        if run is None:
            return constant(ctx, 1.0, "no predicted run time: not packed by departures")
        now = time.time()
        free_at = prospect.row_free_at(st, ctx.providers.fresh("runtime"), now)
        empty = ~np.any(st.usable & (st.free_milli < 1000), axis=1)
        gang_node = np.count_nonzero(st.usable, axis=1) >= big
        args = ctx.cfg.get("topology") or {}
        level, codes = args.get("pack_level"), None
        if level:
            levels = topo.levels_of(ctx.cfg)
            dom = topo.state_domains(st, levels if level in levels else (*levels, level))
            codes = dom.codes.get(level)
        if codes is not None:
            first, late, then = prospect.pack_tiers(free_at, empty, gang_node, now + float(run),
                                                    codes, int(args.get("pack_gang_pods", 4)))
        else:
            first, then = prospect.pack_tiers(free_at, empty, gang_node, now + float(run))
            late = first
        rows = ctx.rows
        value = np.where(first, 1.0, np.where(late, 0.75, np.where(then, 0.5, 0.0)))[rows]
        end_min = float(run) / 60

        def reason(j: int) -> str:
            r = rows[j]
            if not gang_node[r]:
                return f"no {big}-GPU gang pod fits this node: packed here first"
            if first[r]:
                return (f"taken until {(free_at[r] - now) / 60:.0f} min from now anyway: the "
                        f"pod's predicted {end_min:.0f} min do not keep it from a gang longer")
            if late[r]:
                return (f"its {str(level).rsplit('/', 1)[-1]} holds no gang before the pod's "
                        f"predicted {end_min:.0f} min end anyway: long runs gather there")
            if then[r]:
                return (f"frees in {(free_at[r] - now) / 60:.0f} min; the pod's predicted "
                        f"{end_min:.0f} min would keep it from a gang longer")
            return "empty node that can hold a gang pod: kept for gangs, last"

        return ComponentResult(value, reason)
