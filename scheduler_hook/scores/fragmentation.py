"""Fragmentation: the FGD measure (scheduler_hook.fragmentation) against the *forecast* shape
mix from the demand model, or, before one exists, the mix of pods seen so far - never the
future. Value 1 on the node whose expected fragmentation grows least among the candidates.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from scheduler_hook.fragmentation import ShapeMix, fragmentation_increase
from scheduler_hook.podspec import allowed_models
from scheduler_hook.residue import TerminalWaste
from scheduler_hook.scores.base import ComponentResult, Context, constant

_NO_CPU_LIMIT = np.int64(1) << 40  # the hook leaves CPU fit to kube-scheduler


def forecast_mix(providers: Any) -> dict[tuple[int, int], float]:
    """The fresh demand provider's shape mix; {} when there is none or it forecasts none (a
    demand model published without a mix)."""
    model = providers.fresh("demand")
    return {k: float(v) for k, v in model.shape_mix().items()} if model is not None else {}


def shape_mix(ctx: Context) -> tuple[ShapeMix, str]:
    """The mix to score against, and where it came from."""
    if "shape_mix" in ctx.cache:
        return ctx.cache["shape_mix"]
    counts = forecast_mix(ctx.providers)
    if counts:
        src = "forecast mix"
    else:
        seen = ctx.mix_counts if ctx.mix_counts is not None else ctx.state.mix_counts()
        counts = {k: float(v) for k, v in seen.items()}
        src = f"mix of {int(sum(counts.values()))} pods seen"
    keep = int(ctx.cfg.get("fragmentation", {}).get("max_shapes", 32))
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:keep]
    models = set(ctx.state.gpu_model[ctx.state.live].tolist())
    mix_counts: dict[tuple, float] = {}
    for key, c in top:  # (gpus, milli) or (gpus, milli, GPU-model terms)
        g, m = key[0], key[1]
        if g > 0 and m > 0:
            ok = allowed_models(key[2], models) if len(key) > 2 else None
            spec = "" if ok is None else "|".join(sorted(ok)) or "\0"  # \0: no model here
            k = (0, m, g, spec)
            mix_counts[k] = mix_counts.get(k, 0.0) + c
    mix = ShapeMix.from_counts(mix_counts)
    ctx.cache["shape_mix"] = (mix, src)
    return mix, src


def _access(ctx: Context, mix: ShapeMix) -> np.ndarray | None:
    """(n, K) may shape k use the GPU model of candidate n; None when no shape is constrained
    (a constrained shape sees the GPUs of other models as fragments, as FGD's measure does)."""
    if all(m is None for m in mix.models):
        return None
    return mix.access(ctx.state.row_models(ctx.rows).tolist())


def model_ok(ctx: Context) -> np.ndarray:
    """(n,) bool: the candidate's GPU model meets the pod's nodeSelector / required affinity."""
    if not ctx.pod.gpu_models:
        return np.ones(ctx.n, dtype=bool)
    models = ctx.state.row_models(ctx.rows)
    return np.array([ctx.pod.allows_model(m) for m in models.tolist()], dtype=bool)


def slot_increase(ctx: Context) -> np.ndarray:
    """(n, G) fragmentation increase per candidate first GPU (inf = cannot take the pod)."""
    mix, _ = shape_mix(ctx)
    free = np.where(ctx.usable, ctx.free, 0.0).astype(np.int64)
    cpu = np.full(ctx.n, _NO_CPU_LIMIT)
    inc = np.full(free.shape, np.inf)
    access = _access(ctx, mix)
    for need in np.unique(ctx.need):  # one value unless the pod is sized by gpu-memory
        sel = ctx.need == need
        inc[sel] = fragmentation_increase(free[sel], cpu[sel], mix,
                                          None if access is None else access[sel], 0,
                                          int(need), ctx.pod.gpus)
    weight = float(ctx.cfg.get("fragmentation", {}).get("residue_weight", 0.0))
    if weight and ctx.pod.gpus == 1:  # a GPU fraction also pays the terminal waste it adds
        need = ctx.need.astype(np.int64)[:, None]
        frac = (need > 0) & (need < 1000)
        inc = np.where(frac, inc + weight * terminal_waste(ctx, mix).added(free, need), inc)
    inc[~model_ok(ctx)] = np.inf  # only GPUs of a model the pod may use count for it
    return inc


def terminal_waste(ctx: Context, mix: ShapeMix) -> TerminalWaste:
    """What the mix's common GPU-fraction sizes cannot fill of each residue (cached)."""
    if "terminal_waste" not in ctx.cache:
        share = float(ctx.cfg.get("fragmentation", {}).get("residue_share", 0.05))
        ctx.cache["terminal_waste"] = TerminalWaste(share).fit(mix)
    return ctx.cache["terminal_waste"]


def best_increase(ctx: Context) -> np.ndarray:
    """(n,) least fragmentation increase over each node's GPUs (inf = no room).

    The increase depends only on the multiset of free milli per GPU (and the need), and a
    cluster has far fewer distinct multisets than nodes, so FGD runs once per distinct one.
    """
    if "frag_best" in ctx.cache:
        return ctx.cache["frag_best"]
    h = ctx.state.free_key[ctx.rows]  # hash of the sorted usable free milli, kept by the state
    cols = []
    if ctx.pod.milli < 0:  # sized by gpu-memory: the need differs by node, key on it too
        cols.append(np.unique(ctx.need, return_inverse=True)[1].ravel())
    mix, _ = shape_mix(ctx)
    if ctx.pod.gpu_models or any(m is not None for m in mix.models):  # the model matters too
        cols.append(np.unique(ctx.state.row_models(ctx.rows).astype(str),
                              return_inverse=True)[1].ravel())
    if cols:
        h = np.column_stack([h, *cols])
        _, first, inv = np.unique(h, axis=0, return_index=True, return_inverse=True)
        inv = inv.ravel()
    else:
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    sub = Context(ctx.state, ctx.rows[first], ctx.pod, ctx.providers, ctx.cfg, ctx.cache)
    inc = slot_increase(sub)
    best = (inc.min(axis=1) if inc.shape[1] else np.full(len(first), np.inf))[inv]
    ctx.cache["frag_best"] = best
    ctx.cache["frag_distinct"] = len(first)
    return best


def values_from_increase(best: np.ndarray) -> np.ndarray:
    """1 where the increase is least among the candidates, 0 at the most and where no room."""
    ok = np.isfinite(best)
    if not ok.any():
        return np.zeros(len(best))
    lo, hi = best[ok].min(), best[ok].max()
    value = np.where(ok, 1.0 - (best - lo) / (hi - lo) if hi > lo else 1.0, 0.0)
    return np.clip(value, 0.0, 1.0)


class Fragmentation:
    name = "fragmentation"

    def score(self, ctx: Context) -> ComponentResult:
        if ctx.pod.gpus == 0:
            return constant(ctx, 1.0, "no GPU requested")
        mix, src = shape_mix(ctx)
        best = best_increase(ctx)
        ok = np.isfinite(best)
        value = values_from_increase(best)
        lo = best[ok].min() if ok.any() else np.inf

        def reason(j: int) -> str:
            if not ok[j]:
                return "no healthy GPU can take the pod"
            return (f"expected fragmentation +{best[j]:.0f} milli-GPU (best candidate "
                    f"+{lo:.0f}) against the {src}, {len(mix)} shapes")

        return ComponentResult(value, reason, raw=best)
