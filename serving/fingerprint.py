"""`POST /v1/fingerprint` (a job's predicted fingerprint before it starts) and
`GET /v1/fingerprints/{workload}` (the one learned for a workload key)."""
from __future__ import annotations

import pandas as pd
from fastapi import Depends
from starlette.concurrency import run_in_threadpool

from serving import metrics
from serving.deps import ERRORS, Context, get_context, missing, problem, router as _router
from serving.interference import floats
from serving.schemas import Fingerprint, FingerprintPrediction, JobMeta, Problem
from serving.security import ORJSONResponse

router = _router(tags=["predict"])


def _summary(fp: dict) -> dict:
    return {k: v for k, v in fp.items() if k != "example_run"}


@router.post("/v1/fingerprint", response_model=FingerprintPrediction, responses=ERRORS)
async def fingerprint(job: JobMeta, ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """A job's predicted fingerprint and peak-framebuffer bound, before it starts: its
    workload's own when the key is known, else the most similar known workload's."""
    m = ctx.store.get("fingerprint")  # async for the same reason as /v1/interference
    if m is None:
        return missing("fingerprint", ctx.store)
    row = {k: v for k, v in job.model_dump().items() if v is not None}

    def compute() -> tuple:
        p = m.model.predictor.predict(pd.DataFrame([row]) if row else pd.DataFrame(index=[0]))
        metrics.PREDICTIONS.labels("fingerprint").inc()
        return (str(p["source"].iloc[0]), str(p["workload"].iloc[0]),
                floats(p["peak_fb_p50_mib"])[0], floats(p["peak_fb_upper_mib"])[0])

    keys = [tuple(sorted(row.items()))]
    cache = ctx.caches.for_model("fingerprint", m.version)
    vals, miss = cache.lookup(keys)
    if miss:
        cache.fill(keys, vals, miss, [await run_in_threadpool(compute)])
    source, used, p50, upper = vals[0]
    fps = getattr(m.model.fingerprints, "fingerprints_", {}) or {}
    return ORJSONResponse({
        "model_version": m.version, "source": source, "workload": used,
        "peak_fb_p50_mib": p50, "peak_fb_upper_mib": upper,
        "fingerprint": _summary(fps[used]) if used in fps else None})


@router.get("/v1/fingerprints/{workload:path}", response_model=Fingerprint,
            responses={**ERRORS, 404: {"model": Problem, "description": "unknown workload"}})
def fingerprint_of(workload: str, ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """The fingerprint learned for one workload key (phases, transitions, peak memory)."""
    m = ctx.store.get("fingerprint")
    if m is None:
        return missing("fingerprint", ctx.store)
    fps = getattr(m.model.fingerprints, "fingerprints_", {}) or {}
    # a pod's workload name where fingerprints are keyed by its job template (the extender
    # asks the same way: artifacts.adapters.FingerprintAdapter)
    key = workload if workload in fps else \
        (getattr(m.model.fingerprints, "aliases_", {}) or {}).get(workload)
    if key not in fps:
        return problem(404, f"workload {workload!r} has no fingerprint in version "
                            f"{m.version}", {"known": sorted(fps)[:100]})
    return ORJSONResponse({"model_version": m.version, "workload": key,
                           "fingerprint": _summary(fps[key])})
