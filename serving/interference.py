"""`POST /v1/interference`: predicted speeds of co-located pairs (the interference model), and,
for a pair that gives a side's minimum speed (`a_min_speed` / `b_min_speed`), the bound the
extender's co-location gate holds it to and the gate's decision, from the same functions.
`POST /v1/interference/gpu`: the same for a pending pod and every pod already on one GPU."""
from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Depends
from starlette.concurrency import run_in_threadpool

from artifacts.adapters import admit_bounds
from ground.errors import ForesightError
from scheduler_hook.scores.colocation_gpu import combined, delay, under_floor
from serving import metrics
from serving.batcher import OUT_COLUMNS
from serving.deps import ERRORS, Context, get_context, missing, problem
from serving.deps import router as _router
from serving.schemas import GpuRequest, GpuResponse, InterferenceRequest, InterferenceResponse
from serving.security import ORJSONResponse

router = _router(tags=["predict"])

#: Requests up to this many pairs use the per-version cache (single predictions repeat).
CACHED_MAX_ROWS = 64
#: Each side's minimum speed: asks for the admission decision, never a model input.
FLOORS = ("a_min_speed", "b_min_speed")


def floats(a: Any) -> list[float]:
    """Finite floats for JSON (a model never answers NaN to a client; 0 marks none)."""
    a = np.asarray(a, float)
    if not np.isfinite(a).all():  # rare: nan_to_num costs ~20 us even on one value
        a = np.where(np.isfinite(a), a, 0.0)
    return a.tolist()


def _speeds(ctx: Context, m: Any, rows: list[dict]) -> list[list[float]]:
    """The model's four speed columns for `rows` (in a pool thread: it blocks)."""
    out = ctx.batcher.predict(m.model, rows)  # merged with concurrent requests' rows
    metrics.PREDICTIONS.labels("interference").inc(len(rows))
    return [floats(out[c]) for c in OUT_COLUMNS]


def _batch(ctx: Context, m: Any, rows: list[dict]) -> list[dict]:
    return [dict(zip(OUT_COLUMNS, v)) for v in zip(*_speeds(ctx, m, rows))]


def _admission(ctx: Context, m: Any, rows: list[dict], feats: list[dict]) -> list[dict]:
    """Predictions of `rows` (`feats`: the same without floors) with, where a pair gives a
    floor, each side's admission bound, the gate's decision and the bound's source."""
    out = ctx.batcher.predict(m.model, feats, admit=True)
    metrics.PREDICTIONS.labels("interference").inc(len(rows))
    nan = float("nan")
    floor = {s: np.array([r.get(f"{s}_min_speed", nan) for r in rows]) for s in "ab"}
    modes = np.array([r.get("sharing", "") for r in rows], dtype=object)
    bound = {s: np.full(len(rows), nan) for s in "ab"}
    table = {s: np.zeros(len(rows), bool) for s in "ab"}
    for mode in np.unique(modes):  # the bound is per sharing mode, as the gate asks it
        i = modes == mode
        for s in "ab":  # a side without a floor: any floor, its bound is not answered
            bound[s][i], table[s][i] = admit_bounds(
                m.model, str(mode), out[f"{s}_speed_pred"][i], out[f"{s}_speed_unit"][i],
                out[f"{s}_speed_p10"][i], np.nan_to_num(floor[s][i], nan=1.0))
    refused = under_floor(bound["a"], np.nan_to_num(floor["a"])) | \
        under_floor(bound["b"], np.nan_to_num(floor["b"]))
    given = {s: ~np.isnan(floor[s]) for s in "ab"}
    # a side unlike every trained workload (forecaster/interference/familiar.py): bound 0
    unfamiliar = np.isposinf(np.asarray(out["a_speed_unit"], float))
    shown = {s: floats(bound[s]) for s in "ab"}
    preds = [dict(zip(OUT_COLUMNS, v)) for v in zip(*(floats(out[c]) for c in OUT_COLUMNS))]
    for j, p in enumerate(preds):
        if given["a"][j] or given["b"][j]:
            p["a_admit_bound"] = shown["a"][j] if given["a"][j] else None
            p["b_admit_bound"] = shown["b"][j] if given["b"][j] else None
            p["admitted"] = not refused[j]
            p["admit_source"] = "unfamiliar" if unfamiliar[j] else "admission" if all(
                table[s][j] for s in "ab" if given[s][j]) else "p10"
    return preds


@router.post("/v1/interference", response_model=InterferenceResponse, responses=ERRORS)
async def interference(req: InterferenceRequest,
                       ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """Predicted co-located/solo speed of each side of each pair, and its p10 bound.
    Up to 10,000 pairs a call, predicted in one vectorized call."""
    # async: cache hits answer on the event loop, with no thread hand-off; the model runs
    # in the thread pool, so the loop keeps reading requests while it predicts.
    m = ctx.store.get("interference")
    if m is None:
        return missing("interference", ctx.store)
    rows = req.pairs
    floored = any("a_min_speed" in r or "b_min_speed" in r for r in rows)
    feats = [{k: v for k, v in r.items() if k not in FLOORS} for r in rows] if floored \
        else rows
    for i, r in enumerate(feats):  # each side needs a workload or a solo feature
        sides = {k[0] for k in r}  # keys are a_*, b_*, gpu_model, sharing
        if "a" not in sides or "b" not in sides:
            side = "a_" if "a" not in sides else "b_"
            return problem(422, f"pairs.{i}: side {side[0]!r} is not described: give "
                                f"{side}workload or solo features such as "
                                f"{side}sm_active")
    try:
        if floored:
            preds = await _floored(ctx, m, rows, feats)
        elif len(rows) > CACHED_MAX_ROWS:
            # A batch goes straight to the model: its rows rarely repeat, and keying and
            # looking up 1,000 rows costs more than predicting them.
            preds = await run_in_threadpool(_batch, ctx, m, rows)
        else:
            # pydantic gives the keys in schema order, so the items are a canonical key
            keys = [tuple(r.items()) for r in rows]
            cache = ctx.caches.for_model("interference", m.version)
            vals, miss = cache.lookup(keys)
            if miss:
                got = await run_in_threadpool(_speeds, ctx, m, [rows[i] for i in miss])
                cache.fill(keys, vals, miss, list(zip(*got)))
            preds = [dict(zip(OUT_COLUMNS, v)) for v in vals]
    except ForesightError as exc:
        return problem(422, f"pairs: {exc}")
    return ORJSONResponse({"model_version": m.version, "predictions": preds})


async def _floored(ctx: Context, m: Any, rows: list[dict], feats: list[dict]) -> list[dict]:
    """A request that gives a floor: as the plain path (cached up to CACHED_MAX_ROWS), in a
    cache of its own whose keys hold the floors (an answer depends on them)."""
    if len(rows) > CACHED_MAX_ROWS:
        return await run_in_threadpool(_admission, ctx, m, rows, feats)
    keys = [tuple(r.items()) for r in rows]
    cache = ctx.caches.for_model("interference-admission", m.version)
    vals, miss = cache.lookup(keys)
    if miss:
        got = await run_in_threadpool(_admission, ctx, m, [rows[i] for i in miss],
                                      [feats[i] for i in miss])
        cache.fill(keys, vals, miss, got)
    return vals


def _pair(a: dict, b: dict, req: GpuRequest) -> dict:
    """The pair-table row of pods `a` and `b` of one GPU, with their floors."""
    row: dict[str, Any] = {"sharing": req.sharing}
    if req.gpu_model is not None:
        row["gpu_model"] = req.gpu_model
    for side, pod in (("a", a), ("b", b)):
        row.update({f"{side}_{k}": v for k, v in pod.items()})  # min_speed -> a_min_speed
    return row


@router.post("/v1/interference/gpu", response_model=GpuResponse, responses=ERRORS)
async def interference_gpu(req: GpuRequest,
                           ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """A pending pod and the pods already on one shared GPU: each one's speed beside all
    the others, and whether the extender's co-location gate admits the pod there. Every pair
    is predicted as `/v1/interference` predicts it; the partners' delays then add, 1 / speed
    = 1 + sum of (1 / pairwise speed - 1), for the points and for each side's bound at its
    own `min_speed` (scheduler_hook/scores/colocation_gpu.py, the gate's own functions)."""
    m = ctx.store.get("interference")
    if m is None:
        return missing("interference", ctx.store)
    pods = [req.pod, *req.residents]
    for i, p in enumerate(pods):
        if not set(p) - {"min_speed"}:
            where = "pod" if i == 0 else f"residents.{i - 1}"
            return problem(422, f"{where}: not described: give workload or solo features "
                                "such as sm_active")
    n = len(pods)
    ii, jj = np.triu_indices(n, 1)
    rows = [_pair(pods[i], pods[j], req) for i, j in zip(ii, jj)]
    feats = [{k: v for k, v in r.items() if k not in FLOORS} for r in rows]
    try:
        preds = await run_in_threadpool(_admission, ctx, m, rows, feats)
    except ForesightError as exc:
        return problem(422, f"pod: {exc}")
    point, bound = np.ones((n, n)), np.ones((n, n))
    for i, j, p in zip(ii, jj, preds):
        point[i, j], point[j, i] = p["a_speed_pred"], p["b_speed_pred"]
        # a side with a floor has its bound at that floor; one without: its p10 (unused)
        bound[i, j] = p["a_admit_bound"] if p.get("a_admit_bound") is not None \
            else p["a_speed_p10"]
        bound[j, i] = p["b_admit_bound"] if p.get("b_admit_bound") is not None \
            else p["b_speed_p10"]
    off = ~np.eye(n, dtype=bool)  # a pod is not its own partner
    speed = combined(np.where(off, delay(point), 0.0).sum(axis=1))
    low = combined(np.where(off, delay(bound), 0.0).sum(axis=1))
    floor = np.array([p.get("min_speed", 0.0) for p in pods], float)
    sides = [{"speed_pred": float(speed[i]),
              "min_speed": float(floor[i]) if floor[i] > 0 else None,
              "bound": float(low[i]) if floor[i] > 0 else None} for i in range(n)]
    return ORJSONResponse({"model_version": m.version, "pod": sides[0],
                           "residents": sides[1:],
                           "admitted": not bool(under_floor(low, floor).any())})
