"""`POST /v1/runtime`: predicted run time of pending pods (the runtime model in service).

The body lists pods by what the pods table keys them on (workload, queue, GPU request,
priority); the answer is p10/p50/p90 in seconds per pod, the level of the hierarchy that
answered (`workload`, its queue's shape, ...) and the predictor behind p50 (`model`, or the
baseline of record when the gate kept it). No model loaded: 503 with the reason.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
from fastapi import Depends
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from serving import metrics
from serving.deps import ERRORS, get_store, missing, router as _router
from serving.schemas import _Strict
from serving.security import ORJSONResponse
from serving.store import ModelStore

router = _router(tags=["predict"])


class RuntimePod(_Strict):
    workload: str = Field("", max_length=512)
    queue: str = Field("", max_length=512)
    gpu_request: float = Field(1.0, ge=0, le=4096)
    priority: int = 0


class RuntimeRequest(_Strict):
    pods: list[RuntimePod] = Field(..., min_length=1, max_length=100_000)


class RuntimePrediction(BaseModel):
    workload: str
    p10: float
    p50: float
    p90: float
    level: str
    model: str


class RuntimeResponse(BaseModel):
    model_version: str
    predictions: list[RuntimePrediction]


_ERRORS = {k: v for k, v in ERRORS.items() if k != 400}


def predict(model: Any, version: str, pods: pd.DataFrame) -> dict:
    out = model.predict(pods)
    rows = [{"workload": str(w), "p10": float(r.p10), "p50": float(r.p50),
             "p90": float(r.p90), "level": str(r.level), "model": str(r.model)}
            for w, r in zip(pods["workload"], out.itertuples(index=False))]
    return {"model_version": version, "predictions": rows}


@router.post("/v1/runtime", response_model=RuntimeResponse, responses=_ERRORS)
async def runtime(req: RuntimeRequest, store: ModelStore = Depends(get_store)) -> ORJSONResponse:
    """p10/p50/p90 run time (s) of each pod, predicted before it starts."""
    m = store.get("runtime")
    if m is None:
        return missing("runtime", store)
    pods = pd.DataFrame.from_records([p.model_dump() for p in req.pods])
    body = await run_in_threadpool(predict, m.model, m.version, pods)
    metrics.PREDICTIONS.labels("runtime").inc(len(body["predictions"]))
    return ORJSONResponse(body)
