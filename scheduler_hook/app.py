"""HTTP face of the extender: an APIRouter the serve command (and later the REST API) mounts.

Every request body is parsed by hand from bytes: a malformed body is a 400 with the reason,
any other failure degrades inside ExtenderHook, so the scheduler never sees a 500 from us.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import orjson
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler_hook import indicators, metrics
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import PodSpecError
from scheduler_hook.wire import ArgsParser, WireError, best_json, filter_json, parse_binding


log = logging.getLogger(__name__)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


Handler = Callable[[bytes], "tuple[int, bytes]"]


def verb_handlers(hook: ExtenderHook) -> dict[str, Handler]:
    """Path -> body bytes -> (HTTP status, JSON bytes), shared by the router and the fast path.

    A malformed body is a 400 with the reason; any other failure degrades inside ExtenderHook.
    """
    parser = ArgsParser()
    last: list[Any] = [None, None]  # kube-scheduler sends filter and prioritize the same body

    def args_of(body: bytes) -> Any:
        if body != last[0]:  # bytes compare: a length check, then memcmp
            last[0], last[1] = body, parser(body)
        return last[1]

    def make(verb: str, fn: Callable[[Any], Any], parse: Callable[[bytes], Any],
             dump: Callable[[Any, Any], bytes] = lambda _args, out: orjson.dumps(out)
             ) -> Handler:
        latency, ok = metrics.LATENCY.labels(verb), metrics.REQUESTS.labels(verb, "200")
        bad = metrics.REQUESTS.labels(verb, "400")
        failed = metrics.REQUESTS.labels(verb, "500")

        def handle(body: bytes) -> tuple[int, bytes]:
            t0 = time.perf_counter()
            try:
                args = parse(body)
                out = fn(args)
            except (WireError, PodSpecError) as exc:
                bad.inc()
                return 400, orjson.dumps({"error": str(exc)})
            except Exception as exc:  # a bug, not the caller's: said as one, in both servers
                log.exception("extender %s failed", verb)
                failed.inc()
                return 500, orjson.dumps({"error": f"extender {verb} failed: "
                                                   f"{type(exc).__name__}"})
            latency.observe(time.perf_counter() - t0)
            ok.inc()
            if verb == "filter":
                _count_filter(out)
            return 200, out if isinstance(out, bytes) else dump(args, out)

        return handle

    filter_ = make("filter", hook.filter, args_of, filter_json)
    # the same latency series: a kube-scheduler config uses one filter verb or the other;
    # the node counts are the decision's (the answer leaves out reasons once a node passes)
    filter_best = make("filter", hook.filter_best, args_of, best_json)
    prioritize = make("prioritize", hook.prioritize_json, args_of)
    # run once answered: kube-scheduler skips prioritize when one node is left
    filter_.after = filter_best.after = prioritize.after = \
        hook.warm_next  # type: ignore[attr-defined]
    return {"/scheduler/filter": filter_,
            "/scheduler/filter-best": filter_best,
            "/scheduler/prioritize": prioritize,
            "/scheduler/bind": make("bind", hook.bind, parse_binding)}


_OUTCOMES = (("passed", "NodeNames", "Nodes"), ("failed", "FailedNodes", None),
             ("unresolvable", "FailedAndUnresolvableNodes", None))


def _count_filter(out: Any) -> None:
    """Extender decisions for dashboards: nodes kept, failed and failed for good."""
    if not isinstance(out, dict):
        return
    for outcome, key, alt in _OUTCOMES:
        got = out.get(key)
        if got is None and alt is not None:
            got = (out.get(alt) or {}).get("items")
        if got:
            metrics.FILTER_NODES.labels(outcome).inc(len(got))


async def _answer(handle: Handler, receive: Callable, send: Callable,
                  max_body: int = 16 * 1024 * 1024) -> None:
    """One verb as raw ASGI: read the body (past `max_body` bytes: read, dropped, a 413),
    answer with the handler's bytes."""
    chunks, more, size = [], True, 0
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
        size += len(msg.get("body", b""))
        if size <= max_body:
            chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    if size > max_body:
        status, payload = 413, orjson.dumps({"error": f"request body over {max_body} bytes"})
        handle = None  # type: ignore[assignment]  # nothing to run after
    else:
        status, payload = handle(chunks[0] if len(chunks) == 1 else b"".join(chunks))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
    after = getattr(handle, "after", None)
    if after is not None:  # as scheduler_hook.fastproto: once the answer is sent
        after()


class ExtenderApp(FastAPI):
    """FastAPI, except that the extender verbs are answered before its telemetry, middleware,
    routing and dependency machinery, which together cost about as much per request as
    scoring 5,000 nodes. The router keeps the same routes (same handlers) for the OpenAPI
    document and for apps that mount it."""

    verb_handlers: dict[str, Handler] = {}
    max_body: int = 16 * 1024 * 1024  # `serve --max-body-mb`, as on the fast path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handle = self.verb_handlers.get(scope["path"])
            if handle is not None:
                return await _answer(handle, receive, send, self.max_body)
        await super().__call__(scope, receive, send)


def build_router(hook: ExtenderHook, handlers: dict[str, Handler] | None = None) -> APIRouter:
    router = APIRouter()
    handlers = handlers or verb_handlers(hook)

    async def _verb(request: Request, path: str) -> Response:
        try:
            body = await request.body()
        except ClientDisconnect:  # the caller left: nobody to answer, nothing to log
            return Response(status_code=400)
        status, payload = handlers[path](body)
        return Response(payload, status_code=status, media_type="application/json")

    @router.post("/scheduler/filter", tags=["extender"])
    async def filter_(request: Request) -> Response:
        """ExtenderArgs -> ExtenderFilterResult; rejects only hard violations."""
        return await _verb(request, "/scheduler/filter")

    @router.post("/scheduler/filter-best", tags=["extender"])
    async def filter_best(request: Request) -> Response:
        """ExtenderArgs -> ExtenderFilterResult keeping only the best-scored passing nodes:
        filter and prioritize in one call (the shipped config's filterVerb)."""
        return await _verb(request, "/scheduler/filter-best")

    @router.post("/scheduler/prioritize", tags=["extender"])
    async def prioritize(request: Request) -> Response:
        """ExtenderArgs -> HostPriorityList, integer scores 0-10."""
        return await _verb(request, "/scheduler/prioritize")

    @router.post("/scheduler/bind", tags=["extender"])
    async def bind(request: Request) -> Response:
        """ExtenderBindingArgs -> ExtenderBindingResult; chooses GPUs for fractional pods."""
        return await _verb(request, "/scheduler/bind")

    @router.get("/v1/explain/{namespace}/{pod}", tags=["extender"])
    async def explain(namespace: str, pod: str,
                      limit: int | None = Query(None, ge=1)) -> Response:
        """Per-node component values and reasons of the last filter/prioritize decision."""
        found = hook.explanations.get(namespace, pod, limit)
        if found is None:
            return _json({"error": f"no decision recorded for {namespace}/{pod}"}, 404)
        return _json(found)

    return router


def create_app(hook: ExtenderHook) -> FastAPI:
    """The extender alone: its router plus /healthz, /readyz and /metrics."""
    app = ExtenderApp(title="Foresight scheduler extender", version="1")
    app.verb_handlers = verb_handlers(hook)
    app.include_router(build_router(hook, app.verb_handlers))

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
        indicators.refresh(hook.state)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
