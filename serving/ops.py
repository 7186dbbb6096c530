"""`/healthz`, `/readyz`, `/metrics`: the probes and the Prometheus exposition."""
from __future__ import annotations

import time
from typing import Any

from fastapi import Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from serving import metrics
from serving.deps import Context, get_context, router as _router
from serving.security import ORJSONResponse
from serving.store import KINDS

router = _router(tags=["ops"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=dict[str, Any],
            responses={503: {"model": dict[str, Any], "description": "not ready: why"}})
async def readyz(ctx: Context = Depends(get_context)) -> ORJSONResponse:
    models = ctx.store.readiness()
    hook = ctx.hook
    # The extender's fields stay at top level (its probes and tests read them there).
    body: dict[str, Any] = {**(hook.readiness() if hook is not None else {}), "models": models}
    # With the extender mounted, cluster state is what readiness means (scoring degrades
    # to packing without models); the API alone is ready once any model serves.
    if not (ctx.settings.extender and hook is not None):
        body["ready"] = any(m["loaded"] for m in models.values())
    return ORJSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics", response_class=Response)
async def prom(ctx: Context = Depends(get_context)) -> Response:
    now = time.time()
    for kind in KINDS:
        m = ctx.store.get(kind)
        metrics.MODEL_AGE.labels(kind).set(now - m.loaded_at if m else -1)
        metrics.REFUSED.labels(kind).set(1 if ctx.store.status[kind].refused_version else 0)
    if ctx.hook is not None:
        ctx.hook.readiness()
        from scheduler_hook import indicators

        indicators.refresh(ctx.hook.state)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
