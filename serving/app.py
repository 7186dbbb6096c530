"""The prediction REST API: FastAPI app factory, versioned routes, orjson answers.

`create_api(store, hook=None, settings)` builds the app; nothing is loaded at import time (the
store loads models in `refresh()`, started by the caller). Every route reads the model it
needs once (`store.get`), so a hot swap in the middle of a request cannot mix two versions.
A missing model is a 503 with the reason; bad input is a 422 naming the field.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ground.errors import ForesightError
from serving import metrics
from serving.batcher import OUT_COLUMNS, MicroBatcher
from serving.cache import VersionedCaches
from serving.demand import DemandService
from serving.schemas import (DemandRequest, DemandResponse, Fingerprint, FingerprintPrediction,
                             InterferenceRequest, InterferenceResponse, JobMeta, Problem,
                             ScoreRequest, ScoreResponse)
from serving.jsonio import OrjsonRoute
from serving.security import Guard, ORJSONResponse
from serving.store import KINDS, ModelStore

log = logging.getLogger("foresight.serving")
_ERRORS = {400: {"model": Problem, "description": "body is not JSON"},
           422: {"model": Problem, "description": "bad input: the field is named"},
           503: {"model": Problem, "description": "model missing: the reason is given"}}


@dataclass
class Settings:
    token: str | None = None          # bearer token; None = no authentication
    max_body_bytes: int = 16 * 1024 * 1024
    extender: bool = False            # mount the kube-scheduler extender verbs too


def _problem(status: int, error: str, detail: Any = None) -> ORJSONResponse:
    return ORJSONResponse({"error": error, "detail": detail}, status_code=status)


def _missing(kind: str, store: ModelStore) -> ORJSONResponse:
    metrics.FALLBACKS.labels(kind).inc()
    reason = store.status[kind].error or f"no {kind} model loaded"
    return _problem(503, f"{kind} model unavailable: {reason}")


#: Requests up to this many pairs use the per-version cache (single predictions repeat).
CACHED_MAX_ROWS = 64


def _floats(a: Any) -> list[float]:
    """Finite floats for JSON (a model never answers NaN to a client; 0 marks none)."""
    a = np.asarray(a, float)
    if not np.isfinite(a).all():  # rare: nan_to_num costs ~20 us even on one value
        a = np.where(np.isfinite(a), a, 0.0)
    return a.tolist()


def _fp_summary(fp: dict) -> dict:
    return {k: v for k, v in fp.items() if k != "example_run"}


def create_api(store: ModelStore, hook: Any = None, settings: Settings | None = None,
               demand: DemandService | None = None) -> FastAPI:
    settings = settings or Settings()
    demand = demand or DemandService(None)
    caches = VersionedCaches()
    batcher = MicroBatcher()
    app = FastAPI(title="Foresight prediction API", version="1",
                  default_response_class=ORJSONResponse,
                  description="Fingerprints, interference, demand forecasts and node scores "
                              "from the models in the Foresight registry.")
    app.router.route_class = OrjsonRoute  # bodies parsed with orjson, validated as declared

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> ORJSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        if first.get("type") == "json_invalid":  # its loc is a character offset, not a field
            pos = (first.get("loc") or ("body", "?"))[-1]
            return _problem(422, f"body: not JSON (at character {pos}: "
                                 f"{(first.get('ctx') or {}).get('error', 'decode error')})")
        field = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        detail = [{"field": ".".join(str(p) for p in e.get("loc", ())),
                   "message": e.get("msg", "")} for e in errs[:20]]
        return _problem(422, f"{field or 'body'}: {first.get('msg', 'invalid')}", detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> ORJSONResponse:
        # FastAPI's own errors (unparsable JSON, unknown route) in the same shape as ours
        return _problem(exc.status_code, str(exc.detail))

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], response_model=dict[str, Any],
             responses={503: {"model": dict[str, Any], "description": "not ready: why"}})
    async def readyz() -> ORJSONResponse:
        models = store.readiness()
        # The extender's fields stay at top level (its probes and tests read them there).
        body: dict[str, Any] = {**(hook.readiness() if hook is not None else {}),
                                "models": models}
        # With the extender mounted, cluster state is what readiness means (scoring degrades
        # to packing without models); the API alone is ready once any model serves.
        if not (settings.extender and hook is not None):
            body["ready"] = any(m["loaded"] for m in models.values())
        return ORJSONResponse(body, status_code=200 if body["ready"] else 503)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def prom() -> Response:
        now = time.time()
        for kind in KINDS:
            m = store.get(kind)
            metrics.MODEL_AGE.labels(kind).set(now - m.loaded_at if m else -1)
            metrics.REFUSED.labels(kind).set(1 if store.status[kind].refused_version else 0)
        if hook is not None:
            hook.readiness()
            from scheduler_hook import indicators

            indicators.refresh(hook.state)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    def _speeds(m: Any, rows: list[dict]) -> list[list[float]]:
        """The model's four speed columns for `rows` (in a pool thread: it blocks)."""
        out = batcher.predict(m.model, rows)  # merged with concurrent requests' rows
        metrics.PREDICTIONS.labels("interference").inc(len(rows))
        return [_floats(out[c]) for c in OUT_COLUMNS]

    def _batch(m: Any, rows: list[dict]) -> list[dict]:
        return [dict(zip(OUT_COLUMNS, v)) for v in zip(*_speeds(m, rows))]

    @app.post("/v1/interference", tags=["predict"], response_model=InterferenceResponse,
              responses=_ERRORS)
    async def interference(req: InterferenceRequest) -> ORJSONResponse:
        """Predicted co-located/solo speed of each side of each pair, and its p10 bound.
        Up to 10,000 pairs a call, predicted in one vectorized call."""
        # async: cache hits answer on the event loop, with no thread hand-off; the model runs
        # in the thread pool, so the loop keeps reading requests while it predicts.
        m = store.get("interference")
        if m is None:
            return _missing("interference", store)
        rows = req.pairs
        for i, r in enumerate(rows):  # each side needs a workload or a solo feature
            sides = {k[0] for k in r}  # keys are a_*, b_*, gpu_model, sharing
            if "a" not in sides or "b" not in sides:
                side = "a_" if "a" not in sides else "b_"
                return _problem(422, f"pairs.{i}: side {side[0]!r} is not described: give "
                                     f"{side}workload or solo features such as "
                                     f"{side}sm_active")
        try:
            if len(rows) > CACHED_MAX_ROWS:
                # A batch goes straight to the model: its rows rarely repeat, and keying and
                # looking up 1,000 rows costs more than predicting them.
                preds = await run_in_threadpool(_batch, m, rows)
            else:
                # pydantic gives the keys in schema order, so the items are a canonical key
                keys = [tuple(r.items()) for r in rows]
                cache = caches.for_model("interference", m.version)
                vals, miss = cache.lookup(keys)
                if miss:
                    got = await run_in_threadpool(_speeds, m, [rows[i] for i in miss])
                    cache.fill(keys, vals, miss, list(zip(*got)))
                preds = [dict(zip(OUT_COLUMNS, v)) for v in vals]
        except ForesightError as exc:
            return _problem(422, f"pairs: {exc}")
        return ORJSONResponse({"model_version": m.version, "predictions": preds})

    @app.post("/v1/fingerprint", tags=["predict"], response_model=FingerprintPrediction,
              responses=_ERRORS)
    async def fingerprint(job: JobMeta) -> ORJSONResponse:
        """A job's predicted fingerprint and peak-framebuffer bound, before it starts: its
        workload's own when the key is known, else the most similar known workload's."""
        m = store.get("fingerprint")  # async for the same reason as /v1/interference
        if m is None:
            return _missing("fingerprint", store)
        row = {k: v for k, v in job.model_dump().items() if v is not None}

        def compute() -> tuple:
            p = m.model.predictor.predict(pd.DataFrame([row]) if row
                                          else pd.DataFrame(index=[0]))
            metrics.PREDICTIONS.labels("fingerprint").inc()
            return (str(p["source"].iloc[0]), str(p["workload"].iloc[0]),
                    _floats(p["peak_fb_p50_mib"])[0], _floats(p["peak_fb_upper_mib"])[0])

        keys = [tuple(sorted(row.items()))]
        cache = caches.for_model("fingerprint", m.version)
        vals, miss = cache.lookup(keys)
        if miss:
            cache.fill(keys, vals, miss, [await run_in_threadpool(compute)])
        source, used, p50, upper = vals[0]
        fps = getattr(m.model.fingerprints, "fingerprints_", {}) or {}
        return ORJSONResponse({
            "model_version": m.version, "source": source, "workload": used,
            "peak_fb_p50_mib": p50, "peak_fb_upper_mib": upper,
            "fingerprint": _fp_summary(fps[used]) if used in fps else None})

    @app.get("/v1/fingerprints/{workload:path}", tags=["predict"], response_model=Fingerprint,
             responses={**_ERRORS, 404: {"model": Problem, "description": "unknown workload"}})
    def fingerprint_of(workload: str) -> ORJSONResponse:
        """The fingerprint learned for one workload key (phases, transitions, peak memory)."""
        m = store.get("fingerprint")
        if m is None:
            return _missing("fingerprint", store)
        fps = getattr(m.model.fingerprints, "fingerprints_", {}) or {}
        if workload not in fps:
            return _problem(404, f"workload {workload!r} has no fingerprint in version "
                                 f"{m.version}", {"known": sorted(fps)[:100]})
        return ORJSONResponse({"model_version": m.version, "workload": workload,
                               "fingerprint": _fp_summary(fps[workload])})

    def _demand(queue: str | None, horizon: str | None, series: pd.DataFrame | None,
                ) -> ORJSONResponse:
        m = store.get("demand")
        if m is None:
            return _missing("demand", store)
        try:
            body = demand.forecast(m, queue, horizon, series, hook)
        except LookupError as exc:  # no series to forecast from
            metrics.FALLBACKS.labels("demand").inc()
            return _problem(503, str(exc))
        except ValueError as exc:  # the argument named in the message
            return _problem(422, str(exc))
        metrics.PREDICTIONS.labels("demand").inc(len(body["forecasts"]))
        return ORJSONResponse(body)

    @app.get("/v1/demand", tags=["predict"], response_model=DemandResponse, responses=_ERRORS)
    def demand_get(queue: str | None = Query(None, max_length=253),
                   horizon: str | None = Query(None, max_length=32)) -> ORJSONResponse:
        """Quantile forecasts (p10/p50/p90 GPUs requested over the horizon) per queue, from the
        server's recent demand series, and the forecast mix of pod shapes."""
        return _demand(queue, horizon, None)

    @app.post("/v1/demand", tags=["predict"], response_model=DemandResponse, responses=_ERRORS)
    def demand_post(req: DemandRequest, horizon: str | None = Query(None, max_length=32)
                    ) -> ORJSONResponse:
        """The same forecast from a demand series sent in the body (Nixtla long format)."""
        try:
            s = pd.DataFrame.from_records([r.__dict__ for r in req.series])
            s["ds"] = pd.to_datetime(s["ds"], utc=True, format="ISO8601").dt.tz_localize(None)
        except (ValueError, TypeError, OverflowError) as exc:
            return _problem(422, f"series.ds: not a timestamp ({str(exc)[:120]})")
        return _demand(req.queue, horizon, s)

    explained: list[tuple[Any, bytes] | None] = [None]  # the last Decision and its answer

    @app.post("/v1/score", tags=["score"], response_model=ScoreResponse, responses=_ERRORS)
    def score(req: ScoreRequest) -> Response:
        """Per-node component scores and reasons for a pod: the extender's own scoring, for
        Volcano, KAI or Koordinator to call."""
        if hook is None:
            metrics.FALLBACKS.labels("score").inc()
            return _problem(503, "scoring unavailable: the API runs without cluster state "
                                 "(start it with --snapshot or in a cluster)")
        from scheduler_hook.podspec import PodSpecError

        try:
            pod = hook.pod(req.pod)
        except (PodSpecError, ValueError, TypeError, KeyError, AttributeError) as exc:
            return _problem(422, f"pod: {exc}")
        try:
            d = hook.scorer.decide(pod, list(req.nodes))
        except Exception as exc:  # noqa: BLE001 - same policy as the extender verbs: a scoring
            # bug degrades (here: 503 with the reason, logged), it never surfaces as a 500
            log.exception("score failed for %s", pod.key)
            metrics.FALLBACKS.labels("score").inc()
            return _problem(503, f"scoring failed: {type(exc).__name__}: {str(exc)[:200]}")
        if d.fallback:
            metrics.FALLBACKS.labels("score").inc()
        last = explained[0]
        if last is not None and last[0] is d:
            body = last[1]
        else:
            # The scorer hands back the very same Decision while the pod, the nodes, the
            # cluster state and the models are unchanged (a pod asked about again); its
            # explanation (reasons for every node, ~2 ms for 16 nodes) is then the same bytes.
            out = d.explain()
            out["scoring"] = "fallback: allocation-based packing" if d.fallback else "model-based"
            body = orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)
            explained[0] = (d, body)
        return Response(body, media_type="application/json")

    if settings.extender and hook is not None:
        from scheduler_hook.app import build_router

        # Hidden from the OpenAPI doc: a wire protocol for kube-scheduler (raw bodies, parsed
        # by hand), documented by DESIGN.md rather than by a schema.
        app.include_router(build_router(hook), include_in_schema=False)
    from serving.mig import add_mig_routes

    add_mig_routes(app, hook)  # POST/GET /v1/mig/plan: MIG geometry proposals
    from serving.usage import add_usage_routes

    add_usage_routes(app, store)  # POST /v1/usage: next-horizon usage of running pods
    from serving.runtime import add_runtime_routes

    add_runtime_routes(app, store)  # POST /v1/runtime: run time of pending pods
    app.add_middleware(Guard, token=settings.token, max_body_bytes=settings.max_body_bytes)
    return app
