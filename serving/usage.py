"""`POST /v1/usage`: the next horizon's mean usage of running pods (the usage model in service).

The body carries each pod's recent bins (long format, the model's metric and bin width); the
answer is p10/p50/p90 from the end of each series and, per pod, the predictor behind p50: the
model, or the baseline served there because the model did not beat it (`model` field), never
silently. With no two bins of one pod (no bin width) the answer is a 422 naming `series`.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
from fastapi import Depends
from starlette.concurrency import run_in_threadpool

from features.demand_series import parse_times
from ground.errors import ForesightError
from serving import metrics
from serving.deps import ERRORS, get_store, missing, problem, router as _router
from serving.schemas import UsageRequest, UsageResponse
from serving.security import ORJSONResponse
from serving.store import ModelStore

router = _router(tags=["predict"])
_ERRORS = {k: v for k, v in ERRORS.items() if k != 400}


def forecast(model: Any, version: str, series: pd.DataFrame) -> dict:
    """The response body for `series` (unique_id, ds, y); ValueError names the bad field."""
    dup = series.duplicated(["unique_id", "ds"])
    if dup.any():
        r = series[dup].iloc[0]
        raise ValueError(f"series: two rows for {r['unique_id']!r} at {r['ds']}")
    pred = model.predict_latest(series)
    rows = [{"unique_id": str(r.unique_id), "origin": pd.Timestamp(r.origin).isoformat(),
             "p10": float(r.p10), "p50": float(r.p50), "p90": float(r.p90),
             "model": str(r.model)} for r in pred.itertuples(index=False)]
    return {"model_version": version, "horizon_bins": int(model.horizon), "forecasts": rows}


@router.post("/v1/usage", response_model=UsageResponse, responses=_ERRORS)
async def usage(req: UsageRequest, store: ModelStore = Depends(get_store)) -> ORJSONResponse:
    """Mean usage over the model's horizon from the end of each pod's series, with p10/p90
    and the predictor served per pod."""
    m = store.get("usage")
    if m is None:
        return missing("usage", store)
    s = pd.DataFrame.from_records([r.__dict__ for r in req.series])
    try:
        s["ds"] = parse_times(s["ds"], "series.ds")  # naive is UTC; a mix of both refused
    except ForesightError as exc:
        return problem(422, str(exc))
    if s["ds"].isna().any():
        return problem(422, f"series.ds, data row {int(s['ds'].isna().argmax()) + 1}: empty")
    try:
        body = await run_in_threadpool(forecast, m.model, m.version, s)
    except ValueError as exc:
        return problem(422, str(exc))
    metrics.PREDICTIONS.labels("usage").inc(len(body["forecasts"]))
    return ORJSONResponse(body)
