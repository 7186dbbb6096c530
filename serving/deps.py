"""What the API's routers share: the app's objects as FastAPI dependencies, and the error shape.

`create_api` puts one `Context` on `app.state`; a route asks for what it reads
(`store: ModelStore = Depends(get_store)`), so each resource is a module-level `APIRouter`
(FastAPI's convention) instead of a closure over `create_api`'s locals, and a test may swap one
object with `app.dependency_overrides`. The dependencies are `async def`: FastAPI runs them on
the event loop (a plain `def` dependency would cost every request a thread hand-off).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request

from serving import metrics
from serving.batcher import MicroBatcher
from serving.cache import VersionedCaches
from serving.jsonio import OrjsonRoute
from serving.schemas import Problem
from serving.security import ORJSONResponse
from serving.store import ModelStore

ERRORS = {400: {"model": Problem, "description": "body is not JSON"},
          422: {"model": Problem, "description": "bad input: the field is named"},
          503: {"model": Problem, "description": "model missing: the reason is given"}}


@dataclass
class Settings:
    token: str | None = None          # bearer token; None = no authentication
    max_body_bytes: int = 16 * 1024 * 1024
    extender: bool = False            # mount the kube-scheduler extender verbs too


@dataclass
class Context:
    """One app's objects: the model store, the extender hook (None: no cluster state), the
    settings, the demand service, per-version answer caches and the interference batcher."""

    store: ModelStore
    hook: Any = None
    settings: Settings = field(default_factory=Settings)
    demand: Any = None                # serving.demand.DemandService
    caches: VersionedCaches = field(default_factory=VersionedCaches)
    batcher: MicroBatcher = field(default_factory=MicroBatcher)
    #: the last /v1/score Decision and its answer bytes
    explained: list = field(default_factory=lambda: [None])


def router(**kw: Any) -> APIRouter:
    """An APIRouter whose bodies are parsed with orjson (serving.jsonio), as the app's own."""
    return APIRouter(route_class=OrjsonRoute, **kw)


async def get_context(request: Request) -> Context:
    return request.app.state.foresight


async def get_store(request: Request) -> ModelStore:
    return request.app.state.foresight.store


async def get_hook(request: Request) -> Any:
    return request.app.state.foresight.hook


def problem(status: int, error: str, detail: Any = None) -> ORJSONResponse:
    return ORJSONResponse({"error": error, "detail": detail}, status_code=status)


def missing(kind: str, store: ModelStore) -> ORJSONResponse:
    """503 naming why no `kind` model serves (counted as a fallback)."""
    metrics.FALLBACKS.labels(kind).inc()
    reason = store.status[kind].error or f"no {kind} model loaded"
    return problem(503, f"{kind} model unavailable: {reason}")
