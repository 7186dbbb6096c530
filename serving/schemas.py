"""Request and response bodies of the prediction API (pydantic v2; they make the OpenAPI doc).

Unknown fields are rejected (`extra="forbid"`) so a misspelt column is a 422 that names it
rather than a silently ignored feature. Ranges follow the pair-table contract of DESIGN.md.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_PAIRS = 10_000

Frac = Optional[float]  # annotated per field below with ranges


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _side(prefix: str) -> dict[str, Any]:
    return {
        f"{prefix}_workload": (Optional[str], Field(None, max_length=253)),
        f"{prefix}_gpu_util": (Optional[float], Field(None, ge=0, le=100)),
        f"{prefix}_sm_active": (Optional[float], Field(None, ge=0, le=1)),
        f"{prefix}_sm_occupancy": (Optional[float], Field(None, ge=0, le=1)),
        f"{prefix}_tensor_active": (Optional[float], Field(None, ge=0, le=1)),
        f"{prefix}_dram_active": (Optional[float], Field(None, ge=0, le=1)),
        f"{prefix}_mem_copy_util": (Optional[float], Field(None, ge=0, le=100)),
        f"{prefix}_fb_used_mib": (Optional[float], Field(None, ge=0, le=1e7)),
        f"{prefix}_pcie_tx_mbps": (Optional[float], Field(None, ge=0, le=1e7)),
        f"{prefix}_pcie_rx_mbps": (Optional[float], Field(None, ge=0, le=1e7)),
        f"{prefix}_power_w": (Optional[float], Field(None, ge=0, le=1e5)),
        f"{prefix}_batch_size": (Optional[float], Field(None, ge=0, le=1e9)),
        f"{prefix}_amp": (Optional[float], Field(None, ge=0, le=1)),
        f"{prefix}_gpu_count": (Optional[float], Field(None, ge=0, le=1e4)),
    }


class _PairBase(_Strict):
    gpu_model: Optional[str] = Field(None, max_length=128)
    sharing: Optional[Literal["timeslice", "mps", "mig", "node"]] = None

    @model_validator(mode="after")
    def _both_sides(self) -> "_PairBase":
        for side in ("a", "b"):
            if all(v is None for k, v in self.__dict__.items() if k.startswith(f"{side}_")):
                raise ValueError(f"side {side!r} is not described: give {side}_workload or "
                                 f"solo features such as {side}_sm_active")
        return self


from pydantic import create_model  # noqa: E402 - after the helpers it uses

PairRow = create_model("PairRow", __base__=_PairBase, **_side("a"), **_side("b"))
PairRow.__doc__ = ("One co-location of job a with job b: the pair-table row of DESIGN.md "
                   "without the targets; every column optional, each side needs one.")


class InterferenceRequest(_Strict):
    pairs: list[PairRow] = Field(..., min_length=1, max_length=MAX_PAIRS)  # type: ignore[valid-type]


class PairPrediction(BaseModel):
    a_speed_pred: float
    b_speed_pred: float
    a_speed_p10: float
    b_speed_p10: float


class InterferenceResponse(BaseModel):
    model_version: str
    predictions: list[PairPrediction]


class JobMeta(_Strict):
    """What is known of a job before it starts."""
    workload: Optional[str] = Field(None, max_length=253, description="workload key, if known")
    image: Optional[str] = Field(None, max_length=512)
    namespace: Optional[str] = Field(None, max_length=253)
    queue: Optional[str] = Field(None, max_length=253)
    gpu_request: Optional[float] = Field(None, ge=0, le=1e4)
    priority: Optional[float] = Field(None, ge=-1e10, le=1e10)


class FingerprintPrediction(BaseModel):
    model_version: str
    source: str = Field(description="'key': the workload is known; 'model': predicted from "
                                    "metadata")
    workload: str = Field(description="the workload whose fingerprint is returned")
    peak_fb_p50_mib: float
    peak_fb_upper_mib: float = Field(description="conformal upper bound of the peak framebuffer")
    fingerprint: Optional[dict[str, Any]] = None


class Fingerprint(BaseModel):
    model_version: str
    workload: str
    fingerprint: dict[str, Any]


class DemandSeriesRow(_Strict):
    unique_id: str = Field(..., min_length=1, max_length=253)
    ds: str = Field(..., max_length=64, description="bin start, ISO 8601")
    y: float = Field(..., ge=0, le=1e9)


class DemandRequest(_Strict):
    series: list[DemandSeriesRow] = Field(..., min_length=1, max_length=100_000)
    queue: Optional[str] = Field(None, max_length=253)


class QueueForecast(BaseModel):
    queue: str
    origin: str
    p10: float
    p50: float
    p90: float


class ShapeShare(BaseModel):
    gpus: int
    milli: int
    share: float


class DemandResponse(BaseModel):
    model_version: str
    freq: str
    horizon: str
    forecasts: list[QueueForecast]
    shape_mix: Optional[list[ShapeShare]] = None
    shape_mix_source: str


class ScoreRequest(_Strict):
    pod: dict[str, Any] = Field(..., description="a v1 Pod object, as the API server stores it")
    nodes: list[str] = Field(..., min_length=1, max_length=MAX_PAIRS,
                             description="candidate node names (known to the cluster state)")


class Problem(BaseModel):
    error: str
    detail: Optional[Any] = None
