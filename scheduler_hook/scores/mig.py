"""MIG pods in the extender: which nodes can take them (filter), memory fit against the slice,
and a placement score against the MIG demand mix.

A MIG pod asks for (profile, count) and runs only where that many devices of that profile are
free under the node's strategy (a `nvidia.com/mig-<p>` pod needs a mixed-strategy node; a
single-strategy pod's `nvidia.com/gpu` must land on a `-MIG-<p>` node). Whole-GPU and
fractional pods are kept off single-strategy nodes: their `nvidia.com/gpu` are slices.

Interference: instances are isolated in compute, L2 and DRAM (each owns its memory slices and
their memory controllers), so there is no GPU co-location slowdown across MIG boundaries of the
time-slicing or MPS kind, and those kinds are never asked for. What still interferes is shared
beyond the slice: PCIe/host bandwidth and host DRAM bandwidth (data loading, checkpoints), and
the GPU's power budget and clocks (one busy instance can pull the others' clocks down under a
power cap). Beside other MIG slices the colocation score therefore asks the interference model
for its `sharing="mig"` pairs (a kind of the pair-table contract: what it learns there is that
coupling); beside non-MIG pods of the node, the node-level kind.

Score (value in [0, 1], higher = better): MIG fragmentation in FGD's spirit - free compute
slices a demanded (profile, count) cannot use, weighted by the demand mix (the mix of MIG pods
seen so far) - and how much it grows by placing the pod here, plus a packing term that fills
nodes already in use so that others stay empty and can be re-split by the geometry planner.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np

from scheduler_hook import mig
from scheduler_hook.podspec import PodRequest
from scheduler_hook.scores.base import ComponentResult, Context, constant

FRAG_WEIGHT = 0.7  # the rest is packing: 0.3


def _row_nodes(ctx: Context) -> list:
    names = ctx.state.names
    return [ctx.state.nodes.get(names[r]) for r in ctx.rows.tolist()]


def request_text(pod: PodRequest) -> str:
    """The resource the pod asks for, as the device plugin names it."""
    if pod.mig_single:
        return f"{pod.mig_count} x nvidia.com/gpu on a -MIG-{pod.mig_profile} node"
    return f"nvidia.com/mig-{pod.mig_profile}: {pod.mig_count}"


def mig_capacity(ctx: Context) -> tuple[np.ndarray | None, Callable[[int], str]]:
    """(n,) nodes the pod cannot run on for MIG reasons, and why; None when MIG is moot."""
    pod = ctx.pod
    if not pod.mig_count and (not pod.gpus or not ctx.state.mig_free):
        return None, lambda j: ""  # no MIG pod, and no MIG node to keep it off
    infos = _row_nodes(ctx)
    why: list[str] = []
    for info in infos:
        m = info.mig if info is not None else None
        if not pod.mig_count:  # a whole-GPU or fractional pod
            why.append(f"node's nvidia.com/gpu are MIG {m.caps and next(iter(m.caps))} slices "
                       "(single strategy), not whole GPUs" if m is not None and
                       m.strategy == "single" else "")
            continue
        why.append(_mig_reason(ctx, info, m))
    bad = np.array([bool(w) for w in why], dtype=bool)
    return (bad if bad.any() else None), (lambda j: why[j])


def _fits(ctx: Context, info) -> bool:
    """Can the node take the MIG pod? (`_mig_reason` == '', without building strings)"""
    pod, m = ctx.pod, info.mig if info is not None else None
    if m is None or m.strategy != ("single" if pod.mig_single else "mixed"):
        return False
    if pod.gpu_models and not pod.allows_model(info.gpu_model):
        return False
    return ctx.state.mig_free.get(info.name, {}).get(pod.mig_profile, 0) >= pod.mig_count


def _mig_reason(ctx: Context, info, m) -> str:
    """'' when the node can take the MIG pod, else why not."""
    pod = ctx.pod
    if m is None:
        return f"no MIG devices on the node (pod asks {request_text(pod)})"
    want = "single" if pod.mig_single else "mixed"
    if m.strategy != want:
        return (f"node runs MIG {m.strategy} strategy; {request_text(pod)} needs {want} "
                "strategy")
    if pod.gpu_models and not pod.allows_model(info.gpu_model):
        return f"GPU product {info.gpu_model} not allowed by the pod's nvidia.com/gpu.product " \
               "requirement"
    caps = m.caps
    if pod.mig_profile not in caps:
        have = ", ".join(f"{p} x{n}" for p, n in m.capacity) or "none"
        return f"no {pod.mig_profile} devices in the node's geometry ({have})"
    free = ctx.state.mig_free.get(info.name, {}).get(pod.mig_profile, 0)
    if free < pod.mig_count:
        return f"{pod.mig_profile}: {max(free, 0)} of {caps[pod.mig_profile]} free, " \
               f"pod needs {pod.mig_count}"
    return ""


def mig_memory_fit(ctx: Context) -> ComponentResult:
    """Memory fit of a MIG pod: its predicted (fresh fingerprint) or declared (`gpu-memory`)
    peak against one device of its profile. Only a prediction makes an OOM a violation."""
    pod = ctx.pod
    infos = _row_nodes(ctx)
    slice_mib = np.array([(i.mig.slice_mib(pod.mig_profile) if i is not None and i.mig
                           else 1024.0 * mig.profile_gb(pod.mig_profile)) for i in infos])
    model = ctx.providers.fresh("fingerprint")
    peak = float(np.asarray(model.peak_fb_mib([pod.workload]), float)[0]) \
        if model is not None else np.nan
    predicted = not np.isnan(peak)
    need = peak if predicted else pod.gpu_memory_mib
    if not need:
        return constant(ctx, 1.0, f"no declared or predicted peak: the {pod.mig_profile} "
                                  "slice's memory is the pod's limit")
    # a pod spread over several devices is assumed to split its peak evenly (one per process)
    need_each = need / max(pod.mig_count, 1)
    slack = slice_mib - need_each
    head = ctx.cfg.get("memory_headroom", 0.1) * slice_mib
    value = np.clip(slack / head, 0.0, 1.0)
    src = "predicted" if predicted else "declared"
    violation = (slack < 0) if predicted else None

    def reason(j: int) -> str:
        return (f"{src} peak {need_each:.0f} MiB vs {slice_mib[j]:.0f} MiB of a "
                f"{pod.mig_profile} slice (slack {slack[j]:.0f} MiB)")

    def why(j: int) -> str:
        return f"predicted OOM: peak {need_each:.0f} MiB > {pod.mig_profile} slice " \
               f"{slice_mib[j]:.0f} MiB"

    return ComponentResult(value, reason, violation, why if predicted else None)


def mig_pair_speeds(ctx: Context, model, codes: np.ndarray, s_in: np.ndarray,
                    s_res: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Speeds of a MIG pod beside the MIG residents of each node (res_milli 0: they hold MIG
    devices, not GPU shares) from the interference model's `sharing="mig"` pairs: isolated
    compute and DRAM, so what it learned there is the PCIe, host and power coupling. The
    other residents keep the node-level speeds already in `s_in`/`s_res`."""
    mig_res = (ctx.state.res_milli[ctx.rows] == 0) & (codes >= 0)
    if not mig_res.any():
        return s_in, s_res
    present = np.unique(codes[mig_res])
    names = ctx.workload_names()
    a, b = model.speeds(ctx.pod.workload, [names[c] for c in present], "mig")
    ta, tb = np.full(len(names), np.nan), np.full(len(names), np.nan)
    ta[present], tb[present] = a, b
    return (np.where(mig_res, ctx.lookup(ta, codes, np.nan), s_in),
            np.where(mig_res, ctx.lookup(tb, codes, np.nan), s_res))


def demand_mix(ctx: Context) -> dict[tuple[str, int], float]:
    """MIG (profile, count) shares to score against: the pods seen so far, plus this one."""
    counts = {k: float(v) for k, v in ctx.state.mig_counts.items()}
    key = (ctx.pod.mig_profile, ctx.pod.mig_count)
    counts[key] = counts.get(key, 0.0) or 1.0
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}


def unusable_slices(free: dict[str, int], mix: dict[tuple[str, int], float]) -> float:
    """Expected free compute slices a demanded (profile, count) cannot use on one node."""
    total = sum(mig.profile_compute(p) * max(n, 0) for p, n in free.items())
    out = 0.0
    for (prof, count), share in mix.items():
        usable = mig.profile_compute(prof) * free.get(prof, 0) \
            if free.get(prof, 0) >= count else 0
        out += share * (total - usable)
    return out


class MigPlacement:
    """See the module docstring. Values are kept per state row while the row is unchanged
    (a binding changes one node), per pod shape and frozen demand mix, as the engine's row
    cache does for the row-local components: a MIG pod over 5,000 nodes rescoring them all
    would cost ~10 ms of Python."""

    name = "mig"

    def __init__(self) -> None:
        self._mix: dict[tuple[str, int], float] = {}
        self._mix_version = 0
        self._rows: OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = \
            OrderedDict()

    def _frozen_mix(self, ctx: Context) -> dict[tuple[str, int], float]:
        """The demand mix, refrozen when it gains a shape or drifts by 1 %."""
        mix = demand_mix(ctx)
        old = self._mix
        if mix.keys() != old.keys() or any(abs(v - old[k]) > 0.01 for k, v in mix.items()):
            self._mix, self._mix_version = mix, self._mix_version + 1
        return self._mix

    def _per_row(self, ctx: Context, mix: dict) -> tuple[np.ndarray, np.ndarray]:
        st, pod = ctx.state, ctx.pod
        n_rows = len(st.row_version)
        key = (pod.mig_profile, pod.mig_count, pod.mig_single, pod.gpu_models,
               self._mix_version, n_rows)
        hit = self._rows.get(key)
        if hit is None:
            hit = self._rows[key] = (np.full(n_rows, -1, np.int64), np.full(n_rows, np.inf),
                                     np.zeros(n_rows))
            while len(self._rows) > 32:
                self._rows.popitem(last=False)
        self._rows.move_to_end(key)
        seen, inc, left = hit
        stale = ctx.rows[seen[ctx.rows] != st.row_version[ctx.rows]]
        memo: dict[tuple, tuple[float, float]] = {}  # nodes with the same free devices score alike
        prof, count = pod.mig_profile, pod.mig_count
        for r in np.unique(stale).tolist():
            name = st.names[r]
            free = st.mig_free.get(name)  # only MIG nodes have an entry: the rest are skipped
            inc[r], left[r] = np.inf, 0.0
            if free is not None and free.get(prof, 0) >= count and _fits(ctx, st.nodes.get(name)):
                fkey = tuple(free.items())
                got = memo.get(fkey)
                if got is None:
                    after = dict(free)
                    after[prof] = after.get(prof, 0) - count
                    got = memo[fkey] = (
                        unusable_slices(after, mix) - unusable_slices(free, mix),
                        sum(mig.profile_compute(p) * max(n, 0) for p, n in after.items()))
                inc[r], left[r] = got
            seen[r] = st.row_version[r]
        return inc[ctx.rows], left[ctx.rows]

    def score(self, ctx: Context) -> ComponentResult:
        pod = ctx.pod
        if not pod.mig_count:
            return constant(ctx, 1.0, "no MIG device requested")
        mix = self._frozen_mix(ctx)
        inc, left = self._per_row(ctx, mix)
        all_free, prof = ctx.state.mig_free, pod.mig_profile
        ok = np.isfinite(inc)
        if not ok.any():
            return ComponentResult(np.zeros(ctx.n), lambda j: "no room for the pod's MIG "
                                   "request", informative=False)
        lo, hi = inc[ok].min(), inc[ok].max()
        frag = np.where(ok, 1.0 - (inc - lo) / (hi - lo) if hi > lo else 1.0, 0.0)
        lmax = left[ok].max()
        pack = np.where(ok, 1.0 - left / lmax if lmax > 0 else 1.0, 0.0)
        value = np.clip(FRAG_WEIGHT * frag + (1 - FRAG_WEIGHT) * pack, 0.0, 1.0)

        def reason(j: int) -> str:
            if not ok[j]:
                return "cannot take the pod's MIG request"
            free = all_free.get(ctx.state.names[ctx.rows[j]], {}).get(prof, 0)
            return (f"{pod.mig_profile} x{pod.mig_count}: {free} free, {free - pod.mig_count} "
                    f"after; MIG fragmentation {inc[j]:+.2f} slices (best {lo:+.2f}) against "
                    f"the mix of {len(mix)} MIG shapes seen; {left[j]:.0f} free compute "
                    "slices left")

        return ComponentResult(value, reason)
