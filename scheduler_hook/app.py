"""HTTP face of the extender: an APIRouter the serve command (and later the REST API) mounts.

Every request body is parsed by hand from bytes: a malformed body is a 400 with the reason,
any other failure degrades inside ExtenderHook, so the scheduler never sees a 500 from us.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler_hook import metrics
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PodSpecError
from scheduler_hook.wire import WireError, parse_args, parse_binding


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def _bad(verb: str, reason: str) -> Response:
    metrics.REQUESTS.labels(verb, "400").inc()
    return _json({"error": reason}, 400)


def build_router(hook: ExtenderHook) -> APIRouter:
    router = APIRouter()

    last: list[Any] = [None, None]  # kube-scheduler sends filter and prioritize the same body

    async def _verb(request: Request, verb: str, fn: Callable[[Any], Any],
                    parse: Callable[[bytes], Any]) -> Response:
        t0 = time.perf_counter()
        body = await request.body()
        try:
            if parse is parse_args and body == last[0]:
                args = last[1]
            else:
                args = parse(body)
                if parse is parse_args:
                    last[0], last[1] = body, args
            out = fn(args)
        except (WireError, PodSpecError) as exc:
            return _bad(verb, str(exc))
        metrics.LATENCY.labels(verb).observe(time.perf_counter() - t0)
        metrics.REQUESTS.labels(verb, "200").inc()
        if isinstance(out, bytes):
            return Response(out, media_type="application/json")
        return _json(out)

    @router.post("/scheduler/filter", tags=["extender"])
    async def filter_(request: Request) -> Response:
        """ExtenderArgs -> ExtenderFilterResult; rejects only hard violations."""
        return await _verb(request, "filter", hook.filter, parse_args)

    @router.post("/scheduler/prioritize", tags=["extender"])
    async def prioritize(request: Request) -> Response:
        """ExtenderArgs -> HostPriorityList, integer scores 0-10."""
        return await _verb(request, "prioritize", hook.prioritize_json, parse_args)

    @router.post("/scheduler/bind", tags=["extender"])
    async def bind(request: Request) -> Response:
        """ExtenderBindingArgs -> ExtenderBindingResult; chooses GPUs for fractional pods."""
        return await _verb(request, "bind", hook.bind, parse_binding)

    @router.get("/v1/explain/{namespace}/{pod}", tags=["extender"])
    async def explain(namespace: str, pod: str, limit: int | None = None) -> Response:
        """Per-node component values and reasons of the last filter/prioritize decision."""
        found = hook.explanations.get(namespace, pod, limit)
        if found is None:
            return _json({"error": f"no decision recorded for {namespace}/{pod}"}, 404)
        return _json(found)

    return router


def create_app(hook: ExtenderHook) -> FastAPI:
    """The extender alone: its router plus /healthz, /readyz and /metrics."""
    app = FastAPI(title="Foresight scheduler extender", version="1")
    app.include_router(build_router(hook))

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        details = hook.readiness()
        return _json(details, 200 if details["ready"] else 503)

    @app.get("/metrics")
    async def prom() -> Response:
        hook.readiness()  # refresh gauges
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
