"""Combine the score components into filter and prioritize decisions for one pod.

Weights come from the config (`weights`, or `fallback_weights` while a model is missing or
stale). Hard violations come only from components that are sure: predicted OOM and SLO breaks
need a fresh model; drained/failed GPUs and a fractional pod with no GPU share left come from
cluster state. A component that raises scores neutral and never rejects a node.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from scheduler_hook import metrics
from scheduler_hook.decision import Decision
from scheduler_hook.podspec import PodRequest
from scheduler_hook.providers import ProviderSet
from scheduler_hook.scores import ALL
from scheduler_hook.scores.base import ComponentResult, Context, constant
from scheduler_hook.scores.fragmentation import forecast_mix, model_ok, values_from_increase
from scheduler_hook.scores.mig import mig_capacity
from scheduler_hook.state import ClusterState

log = logging.getLogger("foresight.extender")
ALWAYS_RUN = {"memory_fit", "colocation", "health", "topology"}  # they can veto: filter needs them


LOCAL = ("memory_fit", "colocation", "fragmentation", "health", "packing")  # row-local values
# What fragmentation derives from the shape mix alone (scores/fragmentation.py's ctx.cache
# keys): the ShapeMix with its compiled groups, and the terminal-waste table (a DP). Rebuilt
# per call they cost more than rescoring the one or two rows a binding changed.
MIX_DERIVED = ("shape_mix", "terminal_waste")
CAPACITY = "capacity"  # pseudo-component: a GPU share no GPU of the node can take


class _RowCache:
    """Per pod class: component values for every state row, valid while the row is unchanged.

    The scheduler asks about the same thousands of nodes pod after pod, while a binding
    changes one node: rows whose `row_version` moved are rescored, the rest are gathered.
    """

    def __init__(self, n_rows: int) -> None:
        self.computed = np.full(n_rows, -1, np.int64)
        # fragmentation alone reads the shape mix: a refrozen mix rescoring only it keeps the
        # other components' rows (a refreeze comes every ~1% of new pods)
        self.frag_computed = np.full(n_rows, -1, np.int64)
        self.mix_version = -1
        # fragmentation's raw increase by row key (Scorer._frag_keys), for the mix-derived
        # objects of `frag_dkey`: a row a binding changed usually takes a key seen before
        self.frag_by_key: dict[tuple, float] = {}
        self.frag_dkey: tuple = ()
        self.gen = 0  # bumped by every store: `memo` is valid while it is unchanged
        self.memo: tuple[Any, ...] | None = None  # (rows, gen, values, informative, failed, unres)
        self.values: dict[str, np.ndarray] = {}
        self.violated: dict[str, np.ndarray] = {}
        self.messages: dict[str, np.ndarray] = {}  # (N,) object: reason where violated
        self.unresolvable: dict[str, bool] = {}
        self.informative: dict[str, bool] = {}

    def store(self, name: str, rows: np.ndarray, res: ComponentResult, n_rows: int) -> None:
        if name not in self.values:
            self.values[name] = np.zeros(n_rows)
            self.violated[name] = np.zeros(n_rows, bool)
            self.messages[name] = np.full(n_rows, None, dtype=object)
            self.informative[name] = False
        self.gen += 1
        self.values[name][rows] = res.raw if res.raw is not None else res.value
        self.informative[name] |= res.informative
        self.unresolvable[name] = res.unresolvable
        viol = res.violation if res.violation is not None and res.violation_reason else None
        self.violated[name][rows] = False if viol is None else viol
        if viol is not None:
            for j in np.flatnonzero(viol).tolist():
                self.messages[name][rows[j]] = res.violation_reason(j)  # type: ignore[misc]


def _capacity(ctx: Context) -> tuple[np.ndarray | None, Callable[[int], str]]:
    """Nodes that cannot take the pod for want of a GPU it may use, and why: a GPU share no
    GPU can hold (kube-scheduler cannot see shares), or a GPU model outside the pod's
    nodeSelector / required affinity on `nvidia.com/gpu.product` (kube-scheduler filters that
    too; the extender must not count such GPUs for the pod either)."""
    cap = None
    if ctx.pod.shares_gpu:
        cap = ~ctx.fits.any(axis=1)
    wrong = ~model_ok(ctx) if ctx.pod.gpus and ctx.pod.gpu_models else None
    if wrong is not None:
        cap = wrong if cap is None else cap | wrong
    need, models = ctx.need, ctx.state.row_models(ctx.rows)
    mig_cap, mig_reason = mig_capacity(ctx)  # MIG profile not free / single-strategy slices
    if mig_cap is not None:
        cap = mig_cap if cap is None else cap | mig_cap

    def reason(j: int) -> str:
        if mig_cap is not None and mig_cap[j]:
            return mig_reason(j)
        if wrong is not None and wrong[j]:
            return f"GPU model {models[j] or '(unlabelled)'} not allowed by the pod's " \
                   "nvidia.com/gpu.product requirement"
        return f"no GPU with {need[j]:.0f} milli-GPU free"
    return cap, reason


class Scorer:
    def __init__(self, state: ClusterState, providers: ProviderSet, cfg: dict[str, Any]) -> None:
        self.state, self.providers, self.cfg = state, providers, cfg
        self.components = [c() for c in ALL]
        self.use_row_cache = bool(cfg.get("row_cache", True))
        self._last: tuple[Any, ...] | None = None  # filter then prioritize of one pod: one pass
        self._caches: OrderedDict[tuple, _RowCache] = OrderedDict()
        self._mix: dict[tuple, float] = {}
        self._mix_version = 0
        self._derived: tuple[tuple, dict[str, Any]] = ((), {})  # (key, MIX_DERIVED objects)

    def _frozen_mix(self) -> dict[tuple, float]:
        """The seen-shape mix, refrozen when it drifts by 1% or gains a shape, so cached
        fragmentation values stay valid between refreezes."""
        seen = self.state.mix_counts()
        total, old = sum(seen.values()), sum(self._mix.values())
        if seen.keys() != self._mix.keys() or abs(total - old) > 0.01 * max(old, 1):
            self._mix = dict(seen)
            self._mix_version += 1
        return self._mix

    def _safe(self, comp: Any, ctx: Context) -> ComponentResult:
        try:
            return comp.score(ctx)
        except Exception as exc:  # noqa: BLE001 - a model crash must not block scheduling
            metrics.COMPONENT_ERRORS.labels(comp.name).inc()
            log.warning("score component %s failed: %s", comp.name, exc)
            return constant(ctx, 0.5, f"component error ({type(exc).__name__}): scored neutral")

    def _active(self, weights: dict[str, float]) -> list[Any]:
        return [c for c in self.components
                if weights.get(c.name, 0.0) > 0 or c.name in ALWAYS_RUN]

    def decide(self, pod: PodRequest, names: list[str]) -> Decision:
        fallback = self.providers.fallback
        metrics.FALLBACK.set(1 if fallback else 0)
        weights = dict(self.cfg["fallback_weights" if fallback else "weights"])
        with self.state.lock:
            self.state.observe_shape(pod)
            mix = self._frozen_mix()
            rows, known = self.state.rows(names)
            key = (pod, self.state.version, self.providers.version, fallback, self._mix_version)
            last = self._last
            if last is not None and last[0] == key and last[1] is known:
                return last[2]  # same pod, same nodes, nothing changed since: same decision
            ctx = Context(self.state, rows, pod, self.providers, self.cfg, mix_counts=mix)
            active = self._active(weights)
            if self.use_row_cache:
                values, informative, failed, unres = self._cached(ctx, pod, fallback, active, known)
                results: dict[str, ComponentResult] = {}
            else:
                results = {c.name: self._safe(c, ctx) for c in active}
                values = {n: r.value for n, r in results.items()}
                informative = {n: r.informative for n, r in results.items()}
                failed, unres = self._violations(ctx, results, known)
            total = np.zeros(len(rows))
            wsum = 0.0
            for name, value in values.items():
                w = float(weights.get(name, 0.0))
                if w > 0 and informative[name]:  # constants would only squeeze the 0-10 range
                    total += w * value
                    wsum += w
            total = total / wsum if wsum > 0 else np.full(len(rows), 0.5)
            if pod.gpus and pod.gpu_models:  # GPUs of another model are not for this pod
                total = np.where(model_ok(ctx), total, 0.0)
        scores = np.clip(np.rint(10.0 * total), 0, 10).astype(int)
        src = "forecast mix" if forecast_mix(self.providers) else \
            f"mix of {int(sum(mix.values()))} pods seen"
        d = Decision(pod, known, rows, fallback, weights, results, total, scores, failed, unres,
                     len(names) - len(known), src, values=values,
                     rescore=lambda: self._rescore(pod, rows, mix, active))
        self._last = (key, known, d)
        return d

    def _derived_key(self) -> tuple:
        """Everything shape_mix() and terminal_waste() read: the frozen seen mix, the demand
        provider (its forecast mix while fresh), and the set of live GPU models (rows change
        owner: index_version; a model label changes in place: models_version)."""
        st, prov = self.state, self.providers
        return (self._mix_version, prov.version, prov.fresh("demand") is not None,
                st.index_version, st.models_version)

    def _rescore(self, pod: PodRequest, rows: np.ndarray, mix: dict, active: list[Any]
                 ) -> dict[str, ComponentResult]:
        """Reasons for an explanation, computed when asked (current state, same nodes)."""
        with self.state.lock:
            ctx = Context(self.state, rows, pod, self.providers, self.cfg, mix_counts=mix)
            return {c.name: self._safe(c, ctx) for c in active}

    def warm(self, pod: PodRequest) -> None:
        """Bring the row cache of `pod`'s class up to date on every live row, ahead of the
        pod's filter (ExtenderHook.warm_next): the rows changed since its class was last
        asked about are then only gathered. The values are those the filter would compute."""
        if not self.use_row_cache:
            return
        fallback = self.providers.fallback
        weights = self.cfg["fallback_weights" if fallback else "weights"]
        with self.state.lock:
            self.state.observe_shape(pod)  # as decide does (once per pod: seen by the watch)
            mix = self._frozen_mix()
            ctx = Context(self.state, np.flatnonzero(self.state.live), pod, self.providers,
                          self.cfg, mix_counts=mix)
            self._refresh(ctx, pod, fallback, self._active(weights))

    def _refresh(self, ctx: Context, pod: PodRequest, fallback: bool, active: list[Any]
                 ) -> _RowCache:
        """The class cache of `pod`, its row-local values fresh on ctx.rows."""
        st, rows = self.state, ctx.rows
        modelled = self.providers.fresh("interference") is not None or \
            self.providers.fresh("fingerprint") is not None
        klass = (pod.gpus, pod.milli, pod.gpu_memory_mib, pod.workload if modelled else "",
                 pod.slo_min_speed if modelled else 0.0, pod.gpu_models, fallback,
                 pod.mig_profile, pod.mig_count, pod.mig_single,
                 self.providers.version,
                 bool(forecast_mix(self.providers)),  # a stale forecast mix: the seen one
                 len(st.gpu_count), tuple(c.name for c in active))
        cache = self._caches.get(klass)
        if cache is None:
            cache = self._caches[klass] = _RowCache(len(st.gpu_count))
            while len(self._caches) > 64:
                self._caches.popitem(last=False)
        self._caches.move_to_end(klass)
        if cache.mix_version != self._mix_version:
            cache.frag_computed[:] = -1
            cache.mix_version = self._mix_version
        version = st.row_version[rows]
        dkey = self._derived_key()
        derived = self._derived[1] if self._derived[0] == dkey else {}
        local = [c for c in active if c.name in LOCAL and c.name != "fragmentation"]
        frag = [c for c in active if c.name == "fragmentation"]
        for comps, computed, capacity in ((local, cache.computed, True),
                                          (frag, cache.frag_computed, False)):
            stale = version != computed[rows]
            if not (comps or capacity) or not stale.any():
                continue
            drows = todo = np.unique(rows[stale])
            keyed = bool(comps) and not capacity and pod.gpus > 0
            if keyed:
                todo = self._frag_known(cache, drows, pod, dkey)
            if len(todo):
                sub = Context(st, todo, pod, self.providers, self.cfg,
                              cache={**ctx.cache, **derived}, mix_counts=ctx.mix_counts)
                for comp in comps:
                    res = self._safe(comp, sub)
                    cache.store(comp.name, todo, res, len(st.gpu_count))
                    if keyed and res.raw is not None:
                        cache.frag_by_key.update(zip(self._frag_keys(todo, pod),
                                                     res.raw.tolist()))
                derived = {k: sub.cache[k] for k in MIX_DERIVED if k in sub.cache} or derived
                self._derived = (dkey, derived)
                if capacity:
                    cap, reason = _capacity(sub)
                    cache.store(CAPACITY, todo, ComponentResult(
                        np.ones(len(todo)), lambda j: "", cap, reason, informative=False),
                        len(st.gpu_count))
            computed[drows] = st.row_version[drows]
        return cache

    def _cached(self, ctx: Context, pod: PodRequest, fallback: bool, active: list[Any],
                known: list[str]) -> tuple[dict, dict, dict[str, str], dict[str, str]]:
        rows = ctx.rows
        cache = self._refresh(ctx, pod, fallback, active)
        memo = cache.memo
        if memo is None or memo[0] is not rows or memo[1] != cache.gen:
            in_order = [c for c in active if c.name in LOCAL]  # explanations list them so
            memo = cache.memo = (rows, cache.gen, *self._gather(cache, rows, pod, known,
                                                                 in_order))
        values, informative = dict(memo[2]), dict(memo[3])
        failed, unres = dict(memo[4]), dict(memo[5])
        for comp in active:
            if comp.name not in LOCAL:  # depend on the whole cluster or on time: always fresh
                res = self._safe(comp, ctx)
                values[comp.name], informative[comp.name] = res.value, res.informative
                if res.violation is not None and res.violation_reason is not None:  # topology
                    idx = np.flatnonzero(res.violation).tolist()
                    why = res.violation_reason
                    msgs = res.violation_messages(idx) if res.violation_messages else \
                        [why(j) for j in idx]
                    new = dict(zip([known[j] for j in idx], msgs))
                    if res.unresolvable:
                        unres = {**new, **unres}
                    else:
                        failed = {**new, **failed}
        for n in [n for n in failed if n in unres] if unres else ():
            del failed[n]
        return values, informative, failed, unres

    def _frag_keys(self, rows: np.ndarray, pod: PodRequest) -> list[tuple]:
        """What a row's fragmentation increase depends on besides the pod's class and the
        mix: its usable free milli as a multiset (free_key), its GPU model (model
        requirements, shapes' access) and, for a pod sized by gpu-memory, its GPU memory.
        scores.fragmentation.best_increase already scores one row per distinct key."""
        st = self.state
        mem = st.gpu_mem[rows].tolist() if pod.milli < 0 else [0.0] * len(rows)
        return list(zip(st.free_key[rows].tolist(), st.gpu_model[rows].tolist(), mem))

    def _frag_known(self, cache: _RowCache, rows: np.ndarray, pod: PodRequest,
                    dkey: tuple) -> np.ndarray:
        """Store the fragmentation of `rows` whose key was scored before under the same mix;
        return the others, which need scoring."""
        if cache.frag_dkey != dkey:
            cache.frag_by_key, cache.frag_dkey = {}, dkey
        if "fragmentation" not in cache.values or not cache.frag_by_key:
            return rows
        got = [cache.frag_by_key.get(k) for k in self._frag_keys(rows, pod)]
        hit = np.array([g is not None for g in got])
        if hit.any():
            cache.values["fragmentation"][rows[hit]] = [g for g in got if g is not None]
            cache.gen += 1  # the memo of gathered values is stale
        return rows[~hit]

    @staticmethod
    def _gather(cache: _RowCache, rows: np.ndarray, pod: PodRequest, known: list[str],
                local: list[Any]) -> tuple[dict, dict, dict[str, str], dict[str, str]]:
        """Row-local values and violations of `rows`, read from the class cache."""
        if not len(rows):  # no node the state knows: a new class's cache holds nothing yet
            return {c.name: np.zeros(0) for c in local}, {c.name: False for c in local}, {}, {}
        values = {c.name: cache.values[c.name][rows] for c in local}
        informative = {c.name: cache.informative[c.name] for c in local}
        if "fragmentation" in values and pod.gpus:
            values["fragmentation"] = values_from_increase(values["fragmentation"])
        failed: dict[str, str] = {}
        unres: dict[str, str] = {}
        for name in [c.name for c in local] + [CAPACITY]:
            viol = cache.violated[name][rows]
            if viol.any():
                target = unres if cache.unresolvable[name] else failed
                # the violating names only: an object array of every name costs more
                for n, m in zip([known[j] for j in np.flatnonzero(viol).tolist()],
                                cache.messages[name][rows[viol]].tolist()):
                    target.setdefault(n, m)
        for n in [n for n in failed if n in unres] if unres else ():
            del failed[n]
        return values, informative, failed, unres

    @staticmethod
    def _violations(ctx: Context, results: dict[str, ComponentResult],
                    known: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        failed: dict[str, str] = {}
        unres: dict[str, str] = {}
        for res in results.values():
            if res.violation is None or res.violation_reason is None:
                continue
            target = unres if res.unresolvable else failed
            for j in np.flatnonzero(res.violation):
                target.setdefault(known[j], res.violation_reason(int(j)))
        cap, reason = _capacity(ctx)
        for j in np.flatnonzero(cap) if cap is not None else ():
            if known[j] not in unres:
                failed.setdefault(known[j], reason(int(j)))
        return failed, unres

    def choose_gpus(self, pod: PodRequest, node: str) -> list[int]:
        """GPU indices for `pod` on `node`: for a GPU share the slot whose use raises expected
        fragmentation least among those where its predicted peak fits and the co-location
        gate's floors hold (the filter has refused the node already where none does); for
        whole GPUs the first fully free healthy ones. [] = no room."""
        from scheduler_hook.scores.colocation import ColocationSafety
        from scheduler_hook.scores.memory_fit import MemoryFit
        from scheduler_hook.scores.fragmentation import slot_increase

        with self.state.lock:
            rows, known = self.state.rows([node])
            if not known or pod.gpus == 0:
                return []
            ctx = Context(self.state, rows, pod, self.providers, self.cfg)
            if pod.shares_gpu:
                inc = slot_increase(ctx)[0]
                # GPUs where the predicted peak fits and the floors hold first, then where the
                # memory fits (an OOM costs more than a slowdown), then where the floors hold
                free_fb, need_fb, predicted = MemoryFit().gpu_room(ctx)
                room = free_fb[0] >= need_fb[0] if predicted else np.ones(len(inc), bool)
                view = ColocationSafety().gpu_view(ctx)
                safe = view.safe[0] if view is not None else np.ones(len(inc), bool)
                for ok in (room & safe, room, safe):
                    if (ok & np.isfinite(inc)).any():
                        inc = np.where(ok, inc, np.inf)
                        break
                g = int(np.argmin(inc))
                return [g] if np.isfinite(inc[g]) else []
            whole = np.flatnonzero(ctx.usable[0] & (ctx.free[0] >= 1000))
            return [int(x) for x in whole[:pod.gpus]] if len(whole) >= pod.gpus else []
