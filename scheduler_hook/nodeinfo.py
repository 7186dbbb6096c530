"""A node as the extender reads it: GPU capacity and model from allocatable and GPU feature
discovery's labels, drained and unhealthy GPUs, power cap, rack/region, MIG devices and the
GPU sharing strategy (split from scheduler_hook/state.py, which re-exports these names)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any


from scheduler_hook import mig_k8s
from scheduler_hook.podspec import GPU_RESOURCES, PRODUCT_LABEL
from scheduler_hook.quantity import device_count

log = logging.getLogger("foresight.extender")

MEMORY_LABEL = "nvidia.com/gpu.memory"
DRAINED_ANNOTATION = "foresight.io/gpu-drained"     # "0,3" or "all"
HEALTH_ANNOTATION = "foresight.io/gpu-health"       # {"0": {"xid": 79, "ecc_dbe": 1, ...}}
POWER_CAP_KEY = "foresight.io/power-cap-watts"
RACK_LABELS = ("foresight.io/rack", "topology.kubernetes.io/rack")
REGION_LABEL = "topology.kubernetes.io/region"
# GPU feature discovery's sharing label (device plugin >= 0.15): how pods share one GPU here
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
#: GFD's replica count under time-slicing or MPS: the device plugin then advertises each GPU
#: this many times as `nvidia.com/gpu`
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
_SHARING = {"mps": "mps", "time-slicing": "timeslice", "timeslicing": "timeslice"}
SBE_PENALTY, THROTTLE_PENALTY = 0.4, 0.3  # health lost to volatile SBEs / HW throttling
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})  # DBE, row-remap, fell off bus


@dataclass
class NodeInfo:
    name: str
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_mem_mib: float = 0.0
    schedulable: bool = True
    drained: frozenset[int] = frozenset()
    drained_all: bool = False
    health: dict[int, dict[str, float]] = field(default_factory=dict)
    power_cap_w: float = float("nan")
    rack: str = ""
    region: str = ""
    mig: mig_k8s.MigNode | None = None  # MIG devices (scheduler_hook.mig_k8s), None: no MIG
    sharing: str = "timeslice"  # how fractional pods share a GPU: "timeslice" | "mps"
    labels: dict = field(default_factory=dict)  # topology levels read them (scheduler_hook.topology)


def parse_node(obj: Any) -> NodeInfo:
    """Read a v1.Node dict; GPU capacity from allocatable, model/memory from GFD labels."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ValueError("Node must be an object with metadata")
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("Node.metadata.name must be a non-empty string")
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    for what, part in (("metadata.labels", labels), ("metadata.annotations", ann),
                       ("spec", spec), ("status", status)):
        if not isinstance(part, dict):
            raise ValueError(f"Node {name}: {what} must be an object")
    alloc = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(alloc, dict):
        raise ValueError("Node.status.allocatable must be an object")
    gpus = sum(device_count(alloc[r], f"allocatable[{r}]") for r in GPU_RESOURCES if r in alloc)
    mig = mig_k8s.read_node(labels, alloc, device_count)
    if mig is not None and mig.strategy == "single":
        gpus = 0  # its nvidia.com/gpu are MIG slices: never scored as whole GPUs
    replicas = str(labels.get(REPLICAS_LABEL, "1"))
    if replicas.isdigit() and int(replicas) > 1 and gpus:
        # time-slicing / MPS replicas: the physical GPUs are what pods share
        gpus = max(1, gpus // int(replicas))
    ready = all(c.get("status") == "True" for c in status.get("conditions") or []
                if isinstance(c, dict) and c.get("type") == "Ready")
    drained_raw = str(ann.get(DRAINED_ANNOTATION, labels.get(DRAINED_ANNOTATION, ""))).strip()
    drained = frozenset(int(x) for x in drained_raw.split(",") if x.strip().isdigit())
    health: dict[int, dict[str, float]] = {}
    if HEALTH_ANNOTATION in ann:
        try:
            health = {int(k): {m: float(v) for m, v in d.items()}
                      for k, d in json.loads(ann[HEALTH_ANNOTATION]).items()}
        except (ValueError, TypeError, AttributeError):
            health = {}  # unreadable health annotation: treat as no news, never as unhealthy
    cap = ann.get(POWER_CAP_KEY, labels.get(POWER_CAP_KEY))
    try:
        cap = float(cap) if cap is not None else float("nan")
    except (TypeError, ValueError):  # as health: no news; raising would stop the node watch
        log.warning("node %s: %s %r is not a number of watts; no cap read", name,
                    POWER_CAP_KEY, str(cap)[:40])
        cap = float("nan")
    mem = labels.get(MEMORY_LABEL)
    return NodeInfo(
        name=name, gpu_count=gpus, gpu_model=str(labels.get(PRODUCT_LABEL, "")),
        gpu_mem_mib=float(mem) if mem and str(mem).replace(".", "", 1).isdigit() else 0.0,
        schedulable=ready and not spec.get("unschedulable", False),
        drained=drained, drained_all=drained_raw.lower() == "all", health=health,
        power_cap_w=cap,
        rack=next((str(labels[k]) for k in RACK_LABELS if labels.get(k)), ""),
        region=str(labels.get(REGION_LABEL, "")), mig=mig,
        sharing=_SHARING.get(str(labels.get(SHARING_LABEL, "")).lower(), "timeslice"),
        labels=labels,
    )
