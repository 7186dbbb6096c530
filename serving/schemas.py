"""Request and response bodies of the prediction API (pydantic v2; they make the OpenAPI doc).

Unknown fields are rejected (`extra="forbid"`) so a misspelt column is a 422 that names it
rather than a silently ignored feature. Ranges follow the pair-table contract of DESIGN.md.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Annotated, TypedDict

MAX_PAIRS = 10_000

class _Strict(BaseModel):
    # strict: `false` is not a number and `1` is not a string (schemathesis checks rejection)
    model_config = ConfigDict(extra="forbid", strict=True)


def _side(prefix: str) -> dict[str, Any]:
    s = Annotated[str, Field(max_length=253)]
    return {
        f"{prefix}_workload": s,
        f"{prefix}_gpu_util": Annotated[float, Field(ge=0, le=100)],
        f"{prefix}_sm_active": Annotated[float, Field(ge=0, le=1)],
        f"{prefix}_sm_occupancy": Annotated[float, Field(ge=0, le=1)],
        f"{prefix}_tensor_active": Annotated[float, Field(ge=0, le=1)],
        f"{prefix}_dram_active": Annotated[float, Field(ge=0, le=1)],
        f"{prefix}_mem_copy_util": Annotated[float, Field(ge=0, le=100)],
        f"{prefix}_fb_used_mib": Annotated[float, Field(ge=0, le=1e7)],
        f"{prefix}_pcie_tx_mbps": Annotated[float, Field(ge=0, le=1e7)],
        f"{prefix}_pcie_rx_mbps": Annotated[float, Field(ge=0, le=1e7)],
        f"{prefix}_power_w": Annotated[float, Field(ge=0, le=1e5)],
        f"{prefix}_batch_size": Annotated[float, Field(ge=0, le=1e9)],
        f"{prefix}_amp": Annotated[float, Field(ge=0, le=1)],
        f"{prefix}_gpu_count": Annotated[float, Field(ge=0, le=1e4)],
        f"{prefix}_step_s": Annotated[float, Field(gt=0, le=1e5)],
    }


# A TypedDict, not a BaseModel: validating 1,000 rows takes 0.5 ms instead of 19 ms (absent
# columns stay absent instead of being filled with None defaults), and the rows go straight
# into a DataFrame. Every column is optional; the route checks that each side is described.
# A side's minimum speed (its pod's `foresight.io/min-speed`): not a model input. Per side, as
# the extender's gate holds each pod of a placement to its own floor (a latency-bound service
# at 0.8 beside a batch job with none).
_Floor = Annotated[float, Field(gt=0, le=1, description=(
    "minimum speed of this side (foresight.io/min-speed): the prediction then carries the "
    "admission bound at that floor and whether the extender's gate admits the pair"))]
PairRow = TypedDict("PairRow", {"gpu_model": Annotated[str, Field(max_length=128)],  # type: ignore[misc]
                                "sharing": Literal["timeslice", "mps", "mig", "node"],
                                **_side("a"), **_side("b"),
                                "a_min_speed": _Floor, "b_min_speed": _Floor}, total=False)
PairRow.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[attr-defined]
PairRow.__doc__ = ("One co-location of job a with job b: the pair-table row of DESIGN.md "
                   "without the targets; every column optional, each side needs one.")

#: Pods of one GPU a `/v1/interference/gpu` request may describe (the pending one included).
MAX_GPU_PODS = 32
# One pod of a shared GPU: a pair side's columns without the a_/b_ prefix, and its floor.
GpuPod = TypedDict("GpuPod", {**{k[2:]: v for k, v in _side("a").items()},  # type: ignore[misc]
                              "min_speed": _Floor}, total=False)
GpuPod.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[attr-defined]


class GpuRequest(_Strict):
    """A pending pod and the pods already on one GPU."""
    sharing: Literal["timeslice", "mps"] = "timeslice"
    gpu_model: Optional[str] = Field(None, max_length=128)
    pod: GpuPod  # type: ignore[valid-type]
    residents: list[GpuPod] = Field(  # type: ignore[valid-type]
        ..., min_length=1, max_length=MAX_GPU_PODS - 1)


class GpuSide(BaseModel):
    speed_pred: float = Field(description="combined speed beside every other pod of the GPU "
                                          "(their delays add)")
    min_speed: Optional[float] = None
    bound: Optional[float] = Field(None, description=(
        "what min_speed is held to: each pair's bound at that floor, combined the same way "
        "(null without min_speed)"))


class GpuResponse(BaseModel):
    model_version: str
    pod: GpuSide
    residents: list[GpuSide]
    admitted: bool = Field(description="every side that gives a min_speed keeps it: the "
                                       "extender's co-location gate on this GPU")


class InterferenceRequest(_Strict):
    pairs: list[PairRow] = Field(..., min_length=1, max_length=MAX_PAIRS)  # type: ignore[valid-type]


class PairPrediction(BaseModel):
    a_speed_pred: float
    b_speed_pred: float
    a_speed_p10: float
    b_speed_p10: float
    # only for a pair that gives a_min_speed or b_min_speed: the others answer the four above
    a_admit_bound: Optional[float] = Field(None, description=(
        "the speed a_min_speed is held to (the admission bound at that floor in the pair's "
        "sharing mode; null: side a gave no floor)"))
    b_admit_bound: Optional[float] = Field(None, description="as a_admit_bound, for side b")
    admitted: Optional[bool] = Field(None, description=(
        "whether the extender's co-location gate admits the pair: each side's bound at or "
        "above its floor"))
    admit_source: Optional[Literal["admission", "p10", "unfamiliar"]] = Field(None, description=(
        "`admission`: the model's calibrated admission bound; `p10`: the p10 serves as the "
        "bound (a model without an admission table: an older artifact, the training-median "
        "baseline, or a sharing mode it has none for); `unfamiliar`: a side's solo "
        "fingerprint is unlike every workload the model was fitted on, so no bound is "
        "calibrated for the pair and both bounds are 0 (refused until its pairs are "
        "measured)"))


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
    batch_size: Optional[float] = Field(
        None, gt=0, le=1e6, description="per-GPU batch size (the pod label "
        "foresight.io/batch-size): sets the peak-framebuffer bound when the workload is known")


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
    model: str = Field("model", description="the predictor behind p50: `model` (the fitted "
                       "forecaster) or the baseline it fell back to for this queue because the "
                       "model did not beat it on validation (`persistence`, `snaive_day`, "
                       "`snaive_week`)")


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


class UsageSeriesRow(_Strict):
    unique_id: str = Field(..., min_length=1, max_length=253)
    ds: str = Field(..., max_length=64, description="bin start, ISO 8601")
    y: float = Field(..., ge=0, le=1e15, allow_inf_nan=False,
                     description="the model's metric in its own unit (bytes for memory)")


class UsageRequest(_Strict):
    series: list[UsageSeriesRow] = Field(..., min_length=2, max_length=200_000,
                                         description="each pod's recent bins (the model's bin "
                                         "width), long format")


class UsageForecast(BaseModel):
    unique_id: str
    origin: str
    p10: float
    p50: float
    p90: float
    model: str = Field(..., description="the predictor behind p50: `model`, or the baseline "
                       "(`last_value`, `mean_last_h`, `ses`) served for this pod at this origin"
                       " because the model did not beat it")


class UsageResponse(BaseModel):
    model_version: str
    horizon_bins: int
    forecasts: list[UsageForecast]


class ScoreRequest(_Strict):
    pod: dict[str, Any] = Field(..., description="a v1 Pod object, as the API server stores it")
    nodes: list[str] = Field(..., min_length=1, max_length=MAX_PAIRS,
                             description="candidate node names (known to the cluster state)")


class NodeScore(BaseModel):
    node: str
    score: int = Field(description="0-10, as the extender's prioritize answers")
    total: float
    rejected: Optional[str] = Field(None, description="why filter would reject the node")
    components: dict[str, dict[str, Any]]


class ScoreResponse(BaseModel):
    pod: str
    uid: str
    time: float
    fallback: bool
    unknown_nodes_ignored: int
    scoring: str
    nodes: list[NodeScore]


class Problem(BaseModel):
    error: str
    detail: Optional[Any] = None
