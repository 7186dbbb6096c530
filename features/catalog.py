"""The metrics Foresight reads, as exported upstream, and the label names that locate them.

Clusters relabel: `LabelConfig` names the labels this cluster actually uses, so no PromQL in
the project hard-codes `Hostname` or `pod`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Metric:
    name: str
    source: str  # "dcgm" | "ksm" | "kueue" | "volcano"
    unit: str
    help: str


def _m(source: str, rows: list[tuple[str, str, str]]) -> dict[str, Metric]:
    return {name: Metric(name, source, unit, help_) for name, unit, help_ in rows}


DCGM = _m("dcgm", [
    ("DCGM_FI_DEV_GPU_UTIL", "percent", "GPU utilization"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "percent", "Memory copy utilization"),
    ("DCGM_FI_DEV_FB_USED", "MiB", "Framebuffer memory used"),
    ("DCGM_FI_DEV_FB_FREE", "MiB", "Framebuffer memory free"),
    ("DCGM_FI_DEV_POWER_USAGE", "W", "Power draw"),
    ("DCGM_FI_DEV_SM_CLOCK", "MHz", "SM clock frequency"),
    ("DCGM_FI_DEV_GPU_TEMP", "C", "GPU temperature"),
    ("DCGM_FI_DEV_XID_ERRORS", "code", "Value of the last XID error"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "count", "Single-bit volatile ECC errors"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "count", "Double-bit volatile ECC errors"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "bitmask", "Clock throttle reasons"),
    ("DCGM_FI_PROF_SM_ACTIVE", "ratio", "Ratio of cycles an SM has at least one warp"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "ratio", "Ratio of resident warps to the maximum"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", "Ratio of cycles the tensor pipe is active"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "ratio", "Ratio of cycles the memory interface is active"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "B/s", "PCIe bytes transmitted"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "B/s", "PCIe bytes received"),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "B/s", "NVLink bytes transmitted"),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "B/s", "NVLink bytes received"),
])

KUBE_STATE = _m("ksm", [
    ("kube_pod_info", "info", "Pod placement and priority class"),
    ("kube_pod_labels", "info", "Pod labels as label_<name>"),
    ("kube_pod_status_phase", "bool", "Pod phase"),
    ("kube_pod_container_resource_requests", "count", "Container resource requests"),
    ("kube_pod_created", "unixtime", "Pod creation time"),
    ("kube_pod_start_time", "unixtime", "Pod start time"),
    ("kube_pod_completion_time", "unixtime", "Pod completion time"),
    ("kube_node_status_allocatable", "count", "Node allocatable resources"),
])

KUEUE = _m("kueue", [
    ("kueue_pending_workloads", "count", "Pending workloads per ClusterQueue"),
    ("kueue_cluster_queue_resource_pending", "count", "Pending resource quantity per ClusterQueue"),
    ("kueue_admission_wait_time_seconds", "s", "Admission wait time histogram"),
])

# Volcano's scheduler (pkg/scheduler/metrics/queue.go), read where Kueue is absent.
VOLCANO = _m("volcano", [
    ("volcano_queue_pod_group_pending_count", "count", "Pending PodGroups per Volcano queue"),
    ("volcano_queue_pod_group_inqueue_count", "count",
     "PodGroups admitted to a Volcano queue and not yet running"),
])

CATALOG: dict[str, Metric] = {**DCGM, **KUBE_STATE, **KUEUE, **VOLCANO}

#: An application's progress counter, exported per pod with dcgm-exporter's GPU labels (the
#: interference model's speed signal; optional: most clusters do not export one).
APP = _m("app", [("foresight_app_iterations_total", "count", "Optimizer steps completed")])

#: A small default set that every dcgm-exporter install exports without profiling enabled,
#: plus the profiling ratios the models use most.
DEFAULT_GPU_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
)


def gpu_metric(name: str) -> Metric:
    """Look up a metric with GPU labels by name (dcgm-exporter's, or the app progress
    counter), with a one-line error for unknown names."""
    from ground.errors import ForesightError

    if name not in DCGM and name not in APP:
        raise ForesightError(f"unknown GPU metric {name!r}: expected a dcgm-exporter name such "
                             f"as DCGM_FI_DEV_GPU_UTIL")
    return DCGM.get(name) or APP[name]


@dataclass(frozen=True)
class LabelConfig:
    """Label names as this cluster exports them (defaults: upstream dcgm-exporter and KSM)."""

    node: str = "Hostname"
    gpu: str = "gpu"
    uuid: str = "UUID"
    model: str = "modelName"
    namespace: str = "namespace"
    pod: str = "pod"
    container: str = "container"
    #: kube_pod_info label with the node a pod runs on.
    pod_node: str = "node"
    #: kube_pod_labels label holding the queue (Kueue's queue-name label, as KSM renames it).
    queue: str = "label_kueue_x_k8s_io_queue_name"
    #: kube_pod_labels labels read, in order, for a pod without `queue` (Volcano's job pods
    #: carry volcano.sh/queue-name).
    queue_fallback: tuple[str, ...] = ("label_volcano_sh_queue_name",)
    #: kube_pod_labels labels whose values, joined by "/", form the workload key.
    workload: tuple[str, ...] = ("label_app_kubernetes_io_name",)
    #: Labels that, where a pod carries one, key it before `workload`; and labels tried, in
    #: order, for a pod without `workload`. The defaults key pods as the extender does
    #: (scheduler_hook's workload_labels: foresight.io/workload, app.kubernetes.io/name,
    #: job-name), so that a pod's history and its scheduling ask by one name.
    workload_first: tuple[str, ...] = ("label_foresight_io_workload",)
    workload_fallback: tuple[str, ...] = ("label_job_name",)
    #: Kueue metrics label naming the queue.
    cluster_queue: str = "cluster_queue"
    #: Volcano queue metrics label naming the queue.
    volcano_queue: str = "queue_name"
    #: GPU resource name as kube-state-metrics sanitizes it.
    gpu_resource: str = "nvidia_com_gpu"
    #: priority class name -> numeric priority; numeric class names are read as numbers.
    priorities: dict[str, int] = field(default_factory=dict)
