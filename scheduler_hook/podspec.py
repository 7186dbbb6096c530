"""What the hook needs to know about a pod, read from a v1.Pod dict (wire or snapshot).

GPU demand is expressed per GPU in milli-GPUs (0-1000) times a GPU count, as in the openb
trace: a whole-GPU pod asks `gpus` GPUs at 1000 each; a KAI fractional pod (`gpu-fraction` or
`gpu-memory` annotation) asks one GPU at `milli` < 1000.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import math
from typing import Any

from scheduler_hook.mig_k8s import pod_request as mig_request, single_profile
from scheduler_hook.quantity import device_count
from scheduler_hook.topology import (GANG_MIN_ANNOTATION, GANG_SIZE_ANNOTATION, gang_min,
                                     pod_topology)
from scheduler_hook.waiting import queue_and_gang, timestamp

GPU_RESOURCES = ("nvidia.com/gpu",)
FRACTION_ANNOTATION = "gpu-fraction"
MEMORY_ANNOTATION = "gpu-memory"  # MiB of one GPU, KAI convention
GPU_INDEX_ANNOTATION = "foresight.io/gpu-index"  # our bind choice, "0" or "0,1"
DEFERRABLE_ANNOTATION = "foresight.io/deferrable"
# A pod's minimum co-located speed (e.g. "0.8" for latency-sensitive inference): placements
# whose predicted p10 speed falls under it are refused. The older name is still read.
MIN_SPEED_ANNOTATION = "foresight.io/min-speed"
SLO_ANNOTATION = "foresight.io/slo-min-speed"
WORKLOAD_LABELS = ("foresight.io/workload", "app.kubernetes.io/name", "job-name")
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery: the node's GPU model
# One nodeSelectorTerm's condition on PRODUCT_LABEL: (models allowed or None = any, excluded)
ModelTerm = tuple[frozenset[str] | None, frozenset[str]]


# KAI's gpu-memory (MiB per GPU): the largest GPUs hold 192 GiB; 1 TiB leaves room for the next
MAX_GPU_MEMORY_MIB = 1 << 20


class PodSpecError(ValueError):
    """The pod object is malformed (its message becomes the HTTP 400 reason)."""


@dataclass(frozen=True)
class PodRequest:
    namespace: str
    name: str
    uid: str = ""
    node: str = ""
    phase: str = "Pending"
    gpus: int = 0            # GPUs touched (1 for a fractional pod)
    milli: int = 0           # milli-GPU per touched GPU (1000 for whole GPUs)
    gpu_memory_mib: float = 0.0  # declared framebuffer per GPU, 0 when not declared
    workload: str = ""
    priority: int = 0
    deferrable: bool = False
    slo_min_speed: float = 0.0
    gpu_index: tuple[int, ...] = field(default=())
    # GPU-model requirement (the openb `gpu_spec`): terms ORed, as in required node affinity;
    # () = any model
    gpu_models: tuple[ModelTerm, ...] = field(default=())
    queue: str = ""          # Kueue / Volcano queue, else the namespace (scheduler_hook.waiting)
    created: float = 0.0     # metadata.creationTimestamp, Unix seconds (0: unknown)
    started: float = 0.0     # status.startTime, Unix seconds (0: not started or unknown); the
                             # drain plan reads a resident's predicted end from it
    gang: str = ""           # "namespace/pod-group", "" when not in a gang
    # MIG: a shape of its own, (profile, count); gpus stays 0 (slices are not whole GPUs).
    # mig_single: asked as nvidia.com/gpu on a single-strategy product (-MIG-<profile>)
    mig_profile: str = ""
    mig_count: int = 0
    mig_single: bool = False
    # topology (scheduler_hook.topology): gang size if declared, required / preferred level
    gang_size: int = 0
    topology_required: str = ""
    topology_preferred: str = ""
    gang_min: int = 0        # elastic gang: fewest pods it may start with (foresight.io/gang-min)
    scheduler: str = ""      # spec.schedulerName ("" when unset)

    def allows_model(self, model: str) -> bool:
        """May the pod run on a node whose `nvidia.com/gpu.product` is ``model``?"""
        return terms_allow(self.gpu_models, model)


    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fractional(self) -> bool:
        return self.gpus == 1 and 0 < self.milli < 1000

    @property
    def shares_gpu(self) -> bool:
        """Takes part of one GPU: a fraction, or a size in GPU memory (KAI's `gpu-memory`,
        milli -1 until a node's GPU memory resolves it)."""
        return self.fractional or (self.gpus == 1 and self.milli < 0)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.gpus, self.milli)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def terms_allow(terms: tuple[ModelTerm, ...], model: str) -> bool:
    """Does a GPU-model requirement (() = none) admit ``model``?"""
    return not terms or any((ok is None or model in ok) and model not in no for ok, no in terms)


def allowed_models(terms: tuple[ModelTerm, ...], models: Any) -> frozenset[str] | None:
    """The subset of ``models`` a requirement admits; None when there is no requirement."""
    return frozenset(m for m in models if terms_allow(terms, m)) if terms else None


def _count(value: Any, what: str) -> int:
    try:
        return device_count(value, what)
    except ValueError as exc:
        raise PodSpecError(str(exc)) from None


def _float(value: Any, what: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite number in [lo, hi]; PodSpecError naming ``what`` otherwise."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit JSON integer
        raise PodSpecError(f"{what}: not a number: {str(value)[:40]!r}") from None
    if not math.isfinite(x):
        raise PodSpecError(f"{what}: must be a finite number, got {str(value)[:40]!r}")
    if not lo <= x <= hi:
        def show(b: float) -> str:
            return str(int(b)) if math.isfinite(b) and b == int(b) else f"{b:g}"
        raise PodSpecError(f"{what}: must be a number from {show(lo)} to {show(hi)}, "
                           f"got {str(value)[:40]!r}")
    return x


def _container_gpus(spec: dict) -> int:
    total = 0
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise PodSpecError("spec.containers must be a list")
    for c in containers:
        if not isinstance(c, dict):
            raise PodSpecError("spec.containers: items must be objects")
        res = c.get("resources") or {}
        if not isinstance(res, dict):
            raise PodSpecError("container resources must be an object")
        for kind in ("limits", "requests"):
            q = res.get(kind) or {}
            if not isinstance(q, dict):
                raise PodSpecError(f"resources.{kind} must be an object")
            if any(r in q for r in GPU_RESOURCES):
                total += sum(_count(q[r], f"resources.{kind}[{r}]")
                             for r in GPU_RESOURCES if r in q)
                break  # limits win; requests only when limits absent
    return total


def _obj(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodSpecError(f"{what} must be an object")
    return value


def _model_terms(spec: dict) -> tuple[ModelTerm, ...]:
    """The pod's requirement on PRODUCT_LABEL from nodeSelector and required node affinity.

    nodeSelector is ANDed with the affinity; nodeSelectorTerms are ORed and the expressions of
    one term ANDed (the v1 semantics). A term that says nothing of the label allows any model,
    so then the pod has no requirement. In and NotIn are read; the other operators (Exists,
    Gt, Lt, DoesNotExist) pick no model and leave the term unconstrained on it.
    """
    sel = spec.get("nodeSelector") or {}
    if not isinstance(sel, dict):
        raise PodSpecError("spec.nodeSelector must be an object")
    base: frozenset[str] | None = frozenset([str(sel[PRODUCT_LABEL])]) \
        if PRODUCT_LABEL in sel else None
    aff = _obj(_obj(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    req = _obj(aff.get("requiredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.required")
    terms_raw = req.get("nodeSelectorTerms") or []
    if not isinstance(terms_raw, list):
        raise PodSpecError("nodeSelectorTerms must be a list")
    terms: list[ModelTerm] = []
    if not all(isinstance(t, dict) for t in terms_raw):
        raise PodSpecError("nodeSelectorTerms: items must be objects")
    for term in terms_raw or [{}]:
        ok, no = base, frozenset[str]()
        exprs = term.get("matchExpressions") or []
        for ex in exprs if isinstance(exprs, list) else []:
            if not isinstance(ex, dict) or ex.get("key") != PRODUCT_LABEL:
                continue
            values = ex.get("values") or []
            if not isinstance(values, list):
                raise PodSpecError(f"matchExpressions[key={PRODUCT_LABEL}].values must be a list")
            vals = frozenset(str(v) for v in values)
            if ex.get("operator") == "In":
                ok = vals if ok is None else ok & vals
            elif ex.get("operator") == "NotIn":
                no = no | vals
        if ok is None and not no:
            return ()  # this term allows every model, so the OR of the terms does too
        terms.append((ok, no))
    return tuple(sorted(set(terms), key=repr))


def parse_pod(pod: Any, workload_labels: tuple[str, ...] = WORKLOAD_LABELS) -> PodRequest:
    """Read a v1.Pod dict; raise PodSpecError for anything that is not a pod."""
    if not isinstance(pod, dict):
        raise PodSpecError("Pod must be an object")
    meta = pod.get("metadata")
    spec = pod.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise PodSpecError("Pod.metadata and Pod.spec must be objects")
    name, ns = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not name or len(name) > 253:
        raise PodSpecError("Pod.metadata.name must be a non-empty string of at most 253 "
                           "characters")
    if not isinstance(ns, str) or len(ns) > 63:
        raise PodSpecError("Pod.metadata.namespace must be a string of at most 63 characters")
    for key in ("uid", "resourceVersion"):  # strings on every apiserver object
        if not isinstance(meta.get(key, ""), (str, type(None))):
            raise PodSpecError(f"Pod.metadata.{key} must be a string")
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if not isinstance(ann, dict) or not isinstance(labels, dict):
        raise PodSpecError("Pod annotations and labels must be objects")

    gpus, milli, mem = _container_gpus(spec), 0, 0.0
    if gpus:
        milli = 1000
    if MEMORY_ANNOTATION in ann:
        mem = _float(ann[MEMORY_ANNOTATION], MEMORY_ANNOTATION, 0, MAX_GPU_MEMORY_MIB)
    terms = _model_terms(spec)
    try:
        mig_profile, mig_count = mig_request(spec, _count)
    except ValueError as exc:
        raise PodSpecError(str(exc)) from None
    mig_single = False
    if gpus and not mig_count and FRACTION_ANNOTATION not in ann and single_profile(terms):
        mig_profile, mig_count, mig_single = single_profile(terms), gpus, True
    if mig_count:
        gpus, milli = 0, 0  # the slice's own memory applies; gpu-memory only sizes within it
    elif FRACTION_ANNOTATION in ann:
        frac = _float(ann[FRACTION_ANNOTATION], FRACTION_ANNOTATION)
        # demand is counted in milli-GPUs: a share that rounds to 0 would take nothing
        if not 0.001 <= frac <= 1:
            raise PodSpecError(f"{FRACTION_ANNOTATION} must be in [0.001, 1], got {frac}")
        gpus, milli = 1, int(round(frac * 1000))
    elif mem > 0 and not gpus:
        gpus, milli = 1, -1  # size known only against a node's GPU memory; resolved per node

    index: tuple[int, ...] = ()
    if GPU_INDEX_ANNOTATION in ann:
        try:
            index = tuple(int(x) for x in str(ann[GPU_INDEX_ANNOTATION]).split(",") if x != "")
        except ValueError:
            index = (-1,)
        if any(i < 0 for i in index):
            raise PodSpecError(f"{GPU_INDEX_ANNOTATION}: not a list of GPU indices "
                               f"(integers >= 0): {ann[GPU_INDEX_ANNOTATION]!r}")

    workload = next((str(labels[k]) for k in workload_labels if labels.get(k)), "")
    if not workload:
        containers = spec.get("containers") or [{}]
        workload = str((containers[0] or {}).get("image", "")) if containers else ""
    prio = spec.get("priority") or 0
    status = pod.get("status") or {}
    queue, gang = queue_and_gang(ns, labels, ann)
    gang_size, topo_req, topo_pref = pod_topology(labels, ann)
    for key in (GANG_SIZE_ANNOTATION, GANG_MIN_ANNOTATION):  # ours: read strictly
        raw = str(ann.get(key, "0")).strip()
        if not (raw.isdigit() and len(raw) <= 6):
            raise PodSpecError(f"{key}: a whole number of pods, got {str(ann[key])[:40]!r}")
    low = gang_min(ann)
    if gang_size and low > gang_size:
        raise PodSpecError(f"{GANG_MIN_ANNOTATION} {low} is above the gang's size {gang_size}")
    return PodRequest(
        namespace=ns, name=name, uid=meta.get("uid") or "",
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase", "Pending")) if isinstance(status, dict) else "Pending",
        gpus=gpus, milli=milli, gpu_memory_mib=mem, workload=workload,
        priority=int(_float(prio, "spec.priority", -2**31, 2**31 - 1)),
        deferrable=str(ann.get(DEFERRABLE_ANNOTATION, "")).lower() in ("true", "1", "yes"),
        # a speed relative to running alone: a floor above 1 can never hold (0: none)
        slo_min_speed=_float(ann.get(MIN_SPEED_ANNOTATION, ann.get(SLO_ANNOTATION, 0)),
                             MIN_SPEED_ANNOTATION if MIN_SPEED_ANNOTATION in ann
                             else SLO_ANNOTATION, 0, 1),
        gpu_index=index, gpu_models=terms, queue=queue,
        created=timestamp(meta["creationTimestamp"]) if meta.get("creationTimestamp") else 0.0,
        started=timestamp(status["startTime"]) if isinstance(status, dict) and
        status.get("startTime") else 0.0,
        gang=gang, mig_profile=mig_profile, mig_count=mig_count, mig_single=mig_single,
        gang_size=gang_size, topology_required=topo_req, topology_preferred=topo_pref,
        gang_min=low, scheduler=str(spec.get("schedulerName") or ""),
    )
