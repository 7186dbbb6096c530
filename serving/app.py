"""The prediction REST API: FastAPI app factory, versioned routes, orjson answers.

`create_api(store, hook=None, settings)` builds the app; nothing is loaded at import time (the
store loads models in `refresh()`, started by the caller). Each resource is an `APIRouter` in
its own module (ops, interference, fingerprint, demand, score, mig, usage, runtime) and reads
the app's objects as FastAPI dependencies (serving.deps). Every route reads the model it needs
once (`store.get`), so a hot swap in the middle of a request cannot mix two versions. A missing
model is a 503 with the reason; bad input is a 422 naming the field.
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serving import demand as demand_api, fingerprint, interference, mig, ops, runtime, score, usage
from serving.demand import DemandService
from serving.deps import Context, Settings, problem
from serving.jsonio import OrjsonRoute
from serving.security import Guard, ORJSONResponse
from serving.store import ModelStore

__all__ = ["Settings", "create_api"]


def create_api(store: ModelStore, hook: Any = None, settings: Settings | None = None,
               demand: DemandService | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(title="Foresight prediction API", version="1",
                  default_response_class=ORJSONResponse,
                  description="Fingerprints, interference, demand forecasts and node scores "
                              "from the models in the Foresight registry.")
    app.router.route_class = OrjsonRoute  # bodies parsed with orjson, validated as declared
    app.state.foresight = Context(store, hook, settings, demand or DemandService(None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> ORJSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        if first.get("type") == "json_invalid":  # its loc is a character offset, not a field
            pos = (first.get("loc") or ("body", "?"))[-1]
            return problem(422, f"body: not JSON (at character {pos}: "
                                f"{(first.get('ctx') or {}).get('error', 'decode error')})")
        field = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        detail = [{"field": ".".join(str(p) for p in e.get("loc", ())),
                   "message": e.get("msg", "")} for e in errs[:20]]
        return problem(422, f"{field or 'body'}: {first.get('msg', 'invalid')}", detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> ORJSONResponse:
        # FastAPI's own errors (unparsable JSON, unknown route) in the same shape as ours
        return problem(exc.status_code, str(exc.detail))

    for r in (ops, interference, fingerprint, demand_api, score):
        app.include_router(r.router)
    if settings.extender and hook is not None:
        from scheduler_hook.app import build_router

        # Hidden from the OpenAPI doc: a wire protocol for kube-scheduler (raw bodies, parsed
        # by hand), documented by DESIGN.md rather than by a schema.
        app.include_router(build_router(hook), include_in_schema=False)
    # /v1/mig/plan: MIG geometry proposals; /v1/usage: next-horizon usage of running pods;
    # /v1/runtime: run time of pending pods
    for r in (mig, usage, runtime):
        app.include_router(r.router)
    app.add_middleware(Guard, token=settings.token, max_body_bytes=settings.max_body_bytes)
    return app
