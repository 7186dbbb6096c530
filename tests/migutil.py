"""Upstream-shaped MIG Node and Pod objects (NVIDIA device plugin + GPU feature discovery)."""
from __future__ import annotations

# MiB GFD reports for one MIG device (nvidia-smi's sizes, a little under the profile name)
SLICE_MIB = {"1g.5gb": 4864, "1g.10gb": 9856, "2g.10gb": 9856, "3g.20gb": 19968,
             "4g.20gb": 19968, "7g.40gb": 40192, "1g.20gb": 19968, "2g.20gb": 19968,
             "3g.40gb": 40192, "4g.40gb": 40192, "7g.80gb": 80896}


def mixed_node(name: str, per_gpu: dict[str, int], gpus: int = 8,
               product: str = "NVIDIA-A100-SXM4-40GB", memory_mib: int = 40960,
               config: str = "all-balanced") -> dict:
    """A mixed-strategy node: one `nvidia.com/mig-<profile>` resource per profile."""
    labels = {"kubernetes.io/hostname": name, "nvidia.com/mig.strategy": "mixed",
              "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory_mib),
              "nvidia.com/gpu.count": str(gpus), "nvidia.com/mig.config": config,
              "nvidia.com/mig.config.state": "success"}
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "0"}
    for prof, n in per_gpu.items():
        labels[f"nvidia.com/mig-{prof}.count"] = str(n * gpus)
        labels[f"nvidia.com/mig-{prof}.memory"] = str(SLICE_MIB.get(prof, 0))
        alloc[f"nvidia.com/mig-{prof}"] = str(n * gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def single_node(name: str, profile: str, per_gpu: int, gpus: int = 8,
                base: str = "A100-SXM4-40GB", config: str | None = None) -> dict:
    """A single-strategy node: `nvidia.com/gpu` = MIG devices, product suffixed -MIG-<p>."""
    n = per_gpu * gpus
    labels = {"kubernetes.io/hostname": name, "nvidia.com/mig.strategy": "single",
              "nvidia.com/gpu.product": f"{base}-MIG-{profile}",
              "nvidia.com/gpu.memory": str(SLICE_MIB.get(profile, 0)),
              "nvidia.com/gpu.count": str(n),
              "nvidia.com/mig.config": config or f"all-{profile}",
              "nvidia.com/mig.config.state": "success"}
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(n)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def mig_pod(name: str, profile: str, count: int = 1, node: str = "", phase: str = "Pending",
            single_product: str | None = None, namespace: str = "default",
            annotations: dict | None = None) -> dict:
    """A pod asking `nvidia.com/mig-<profile>: count`, or, with `single_product`,
    `nvidia.com/gpu: count` pinned by nodeSelector to that -MIG- product."""
    res_name = "nvidia.com/gpu" if single_product else f"nvidia.com/mig-{profile}"
    spec: dict = {"containers": [{"name": "main", "image": "triton:24.05",
                                  "resources": {"limits": {res_name: str(count)}}}],
                  "nodeName": node or None, "schedulerName": "foresight-scheduler"}
    if single_product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": single_product}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "labels": {"foresight.io/workload": "infer"},
                         "annotations": dict(annotations or {}),
                         "creationTimestamp": "2026-11-24T10:00:00Z"},
            "spec": spec, "status": {"phase": phase}}
