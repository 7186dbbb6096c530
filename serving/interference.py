"""`POST /v1/interference`: predicted speeds of co-located pairs (the interference model)."""
from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Depends
from starlette.concurrency import run_in_threadpool

from ground.errors import ForesightError
from serving import metrics
from serving.batcher import OUT_COLUMNS
from serving.deps import ERRORS, Context, get_context, missing, problem, router as _router
from serving.schemas import InterferenceRequest, InterferenceResponse
from serving.security import ORJSONResponse

router = _router(tags=["predict"])

#: Requests up to this many pairs use the per-version cache (single predictions repeat).
CACHED_MAX_ROWS = 64


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
    for i, r in enumerate(rows):  # each side needs a workload or a solo feature
        sides = {k[0] for k in r}  # keys are a_*, b_*, gpu_model, sharing
        if "a" not in sides or "b" not in sides:
            side = "a_" if "a" not in sides else "b_"
            return problem(422, f"pairs.{i}: side {side[0]!r} is not described: give "
                                f"{side}workload or solo features such as "
                                f"{side}sm_active")
    try:
        if len(rows) > CACHED_MAX_ROWS:
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
