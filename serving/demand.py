"""Demand forecasts for the API: the DemandForecaster in service over a recent demand series,
and its routes (`GET /v1/demand` from the server's series, `POST /v1/demand` from the body's).

The model holds no data, so a forecast needs the recent bins of each queue: either the series
the operator points the server at (`--demand-series`, a CSV or Parquet file in Nixtla long
format, re-read when it changes) or one sent in a POST body. Forecasts from the server's series
are cached per (model version, file change): the answer only moves when either does.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
from fastapi import Depends, Query

from features.demand_series import parse_times
from ground.errors import ForesightError
from serving import metrics
from serving.deps import ERRORS, Context, get_context, missing, problem, router as _router
from serving.schemas import DemandRequest, DemandResponse
from serving.security import ORJSONResponse


def read_series(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    try:
        df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except FileNotFoundError:
        raise ForesightError(f"demand series not found: {p}") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a user error
        raise ForesightError(f"demand series {p} unreadable: {exc}") from None
    missing = {"unique_id", "ds", "y"} - set(df.columns)
    if missing:
        raise ForesightError(f"demand series {p} lacks columns {sorted(missing)}")
    df = df[["unique_id", "ds", "y"]].copy()
    df["unique_id"] = df["unique_id"].astype(str)
    df["ds"] = pd.to_datetime(df["ds"], utc=True).dt.tz_localize(None)
    return df


class DemandService:
    def __init__(self, series_path: str | Path | None) -> None:
        self.path = Path(series_path) if series_path else None
        self._last: tuple[tuple, list[dict]] | None = None  # ((version, mtime), rows)
        self._lock = threading.Lock()

    def _mtime(self) -> float:
        if self.path is None:
            raise LookupError("no recent demand series: start the server with --demand-series "
                              "or POST the series to /v1/demand")
        try:
            return self.path.stat().st_mtime
        except OSError:
            raise LookupError(f"demand series {self.path} is not readable now") from None

    def forecast(self, loaded: Any, queue: str | None, horizon: str | None,
                 series: pd.DataFrame | None, hook: Any = None) -> dict:
        model = loaded.model
        span = pd.Timedelta(model.freq) * int(model.horizon)
        if horizon is not None:
            try:
                asked = pd.Timedelta(horizon)
            except ValueError:
                raise ValueError(f"horizon: {horizon!r} is not a duration such as "
                                 f"'{_fmt(span)}'") from None
            if asked != span:
                raise ValueError(f"horizon: model version {loaded.version} forecasts "
                                 f"{_fmt(span)} ahead only (asked {horizon})")
        if series is None:
            with self._lock:
                key = (loaded.version, self._mtime())
                if self._last is None or self._last[0] != key:
                    self._last = (key, _rows(model, read_series(self.path)))
                rows = self._last[1]
        else:
            rows = _rows(model, series)
        if queue is not None:
            rows = [r for r in rows if r["queue"] == queue]
            if not rows:
                raise ValueError(f"queue: {queue!r} is not in the demand series")
        mix, src = _published_mix(loaded, queue)
        if mix is None:
            mix, src = _shape_mix(hook)
        return {"model_version": loaded.version, "freq": str(model.freq), "horizon": _fmt(span),
                "forecasts": rows, "shape_mix": mix, "shape_mix_source": src}


def _rows(model: Any, s: pd.DataFrame) -> list[dict]:
    try:
        out = model.predict(s)
    except (KeyError, ValueError, TypeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]  # statsforecast: several
        raise ValueError(f"series: cannot forecast from it ({first[:160]})") from None
    # a version published before per-series fallback has no `model` column: the model served
    who = out["model"] if "model" in out else pd.Series("model", index=out.index)
    out = out.drop(columns=[c for c in ("model",) if c in out]).fillna(0.0)
    return [{"queue": str(q), "origin": pd.Timestamp(o).isoformat(), "p10": float(a),
             "p50": float(b), "p90": float(c), "model": str(m)}
            for q, o, a, b, c, m in zip(out["unique_id"], out["origin"], out["p10"], out["p50"],
                                        out["p90"], who)]


def _published_mix(loaded: Any, queue: str | None) -> tuple[list[dict] | None, str]:
    """The shape mix published with the demand model (training/kinds/demand.py): the queue's
    own mix when one is asked for and published, else the mix of all queues."""
    pub = getattr(loaded.model, "shape_mix_", None)
    if not pub or not pub.get("shapes"):
        return None, ""
    mix, scope = pub["shapes"], "all queues"
    if queue is not None and pub.get("by_queue", {}).get(queue):
        mix, scope = pub["by_queue"][queue], f"queue {queue}"
    return mix, (f"forecast published with demand model version {loaded.version}: {scope}, "
                 f"from {pub.get('arrivals', 0)} arrivals before {pub.get('as_of', '?')}")


def _shape_mix(hook: Any) -> tuple[list[dict] | None, str]:
    """Without a published mix (a demand version from before it was published): the shapes
    the extender has seen."""
    if hook is None:
        return None, "none: no cluster state (start with --snapshot or in a cluster)"
    with hook.state.lock:
        counts = dict(hook.state.shape_counts)
    total = float(sum(counts.values()))
    if total <= 0:
        return [], "no pods seen yet"
    mix = [{"gpus": int(g), "milli": int(m), "share": round(c / total, 6)}
           for (g, m), c in sorted(counts.items(), key=lambda kv: -kv[1])]
    return mix, f"mix of {int(total)} pods seen by the extender"


def _fmt(td: pd.Timedelta) -> str:
    s = int(td.total_seconds())
    return f"{s // 3600}h" if s % 3600 == 0 else f"{s // 60}min" if s % 60 == 0 else f"{s}s"


# -- routes: GET /v1/demand (the server's series), POST /v1/demand (a series in the body) --
router = _router(tags=["predict"])


def _answer(ctx: Context, queue: str | None, horizon: str | None,
            series: pd.DataFrame | None) -> ORJSONResponse:
    m = ctx.store.get("demand")
    if m is None:
        return missing("demand", ctx.store)
    try:
        body = ctx.demand.forecast(m, queue, horizon, series, ctx.hook)
    except LookupError as exc:  # no series to forecast from
        metrics.FALLBACKS.labels("demand").inc()
        return problem(503, str(exc))
    except ValueError as exc:  # the argument named in the message
        return problem(422, str(exc))
    metrics.PREDICTIONS.labels("demand").inc(len(body["forecasts"]))
    return ORJSONResponse(body)


@router.get("/v1/demand", response_model=DemandResponse, responses=ERRORS)
def demand_get(queue: str | None = Query(None, max_length=253),
               horizon: str | None = Query(None, max_length=32),
               ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """Quantile forecasts (p10/p50/p90 GPUs requested over the horizon) per queue, from the
    server's recent demand series, and the forecast mix of pod shapes."""
    return _answer(ctx, queue, horizon, None)


@router.post("/v1/demand", response_model=DemandResponse, responses=ERRORS)
def demand_post(req: DemandRequest, horizon: str | None = Query(None, max_length=32),
                ctx: Context = Depends(get_context)) -> ORJSONResponse:
    """The same forecast from a demand series sent in the body (Nixtla long format)."""
    s = pd.DataFrame.from_records([r.__dict__ for r in req.series])
    try:  # naive is UTC; a mix of both refused
        s["ds"] = parse_times(s["ds"], "series.ds").dt.tz_localize(None)
    except ForesightError as exc:
        return problem(422, str(exc))
    if s["ds"].isna().any():
        return problem(422, f"series.ds, data row {int(s['ds'].isna().argmax()) + 1}: empty")
    return _answer(ctx, req.queue, horizon, s)
