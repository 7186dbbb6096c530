"""`/v1/mig/plan`: the MIG geometry planner (scheduler_hook.mig_plan) over the REST API.

POST plans a snapshot sent in the body (a `kubectl get nodes,pods -A -o json` List) or, without
one, the API's own cluster state; GET plans the cluster state. Both propose and never apply.
Bad input is a 422 naming the field; the planner's refusals (a node's GPU model with no known
geometry, a malformed node or pod) are 422 with its one-line reason.
"""
from __future__ import annotations

import logging
from typing import Any, Literal, Optional

from fastapi import Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from serving.deps import ERRORS, get_hook, problem, router as _router
from serving.security import ORJSONResponse

log = logging.getLogger("foresight.serving")
router = _router(tags=["mig"])
Quantile = Literal["p10", "p50", "p90"]


class MigForecastRow(BaseModel):
    """One row of the forecast-output contract; MIG series are `<queue>|mig:<profile>`.
    Strict, as the schema reads: false is not a number, 0 is not a boolean."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    unique_id: str = Field(..., max_length=253)
    origin: Optional[str] = Field(None, max_length=64)
    y_true: Optional[float] = None
    p10: Optional[float] = None
    p50: Optional[float] = None
    p90: Optional[float] = None
    model: Optional[str] = Field(None, max_length=64)


class MigPlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    snapshot: Optional[dict[str, Any]] = Field(
        None, description="a v1 List of Nodes and Pods; omitted: the API's cluster state")
    forecast: Optional[list[MigForecastRow]] = Field(
        None, max_length=100_000, description="per-shape forecast rows; omitted: the MIG "
        "requests of the pods running or pending")
    quantile: Quantile = "p90"
    custom: bool = Field(False, description="also consider valid geometries mig-parted's "
                                            "file does not name")


def _err(status: int, error: str) -> ORJSONResponse:
    return problem(status, error)


def _run(nodes: Any, pods: Any, forecast: list[dict] | None, quantile: str,
         custom: bool) -> ORJSONResponse:
    from scheduler_hook.mig import MigError
    from scheduler_hook.mig_plan import plan_objects

    try:
        p = plan_objects(nodes, pods, forecast, quantile, custom)
    except MigError as exc:
        return _err(422, f"snapshot: {exc}")
    except ValueError as exc:
        where = "forecast" if str(exc).startswith("forecast") else "snapshot"
        return _err(422, f"{where}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a planner bug is a 503 with the reason
        log.exception("MIG plan failed")
        return _err(503, f"MIG planning failed: {type(exc).__name__}: {str(exc)[:200]}")
    return ORJSONResponse(p.as_dict())


def _from_state(hook: Any, forecast: list[dict] | None, quantile: str,
                custom: bool) -> ORJSONResponse:
    """The plan for the extender's cluster state (hook: None when the API runs without)."""
    if hook is None:
        return _err(503, "no cluster state: send `snapshot` in a POST body, or start the "
                         "API with --snapshot or in a cluster")
    from scheduler_hook.mig import MigError
    from scheduler_hook.mig_plan import (demand_from_forecast, demand_from_pods, node_states,
                                         plan)

    st = hook.state
    with st.lock:
        infos, pods = list(st.nodes.values()), list(st.pods.values())
    try:
        states = node_states(infos, pods)
        demand = demand_from_forecast(forecast, quantile) if forecast else {}
    except (MigError, ValueError) as exc:
        return _err(422, f"{'forecast' if forecast else 'state'}: {exc}")
    src = f"forecast at {quantile}" if demand else "MIG requests of the bound pods"
    return ORJSONResponse(plan(states, demand or demand_from_pods(pods), custom=custom,
                               source=src, quantile=quantile).as_dict())


@router.post("/v1/mig/plan", responses=ERRORS)
def mig_plan_post(req: MigPlanRequest, hook: Any = Depends(get_hook)) -> ORJSONResponse:
    """Propose a mig-parted config per MIG node (never applied)."""
    rows = [r.model_dump() for r in req.forecast] if req.forecast is not None else None
    if req.snapshot is None:
        return _from_state(hook, rows, req.quantile, req.custom)
    from scheduler_hook.snapshot import split_list

    try:
        nodes, pods = split_list(req.snapshot)
    except ValueError as exc:
        return _err(422, f"snapshot: {exc}")
    return _run(nodes, pods, rows, req.quantile, req.custom)


@router.get("/v1/mig/plan", responses=ERRORS)
def mig_plan_get(quantile: Quantile = Query("p90"), custom: bool = Query(False),
                 hook: Any = Depends(get_hook)) -> ORJSONResponse:
    """The plan for the API's cluster state, from the MIG pods bound now."""
    return _from_state(hook, None, quantile, custom)
