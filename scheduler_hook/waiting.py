"""Pending GPU pods per queue and gang membership: what the cluster state knows of who waits.

Kept beside ClusterState (which holds bound pods per node for scoring) and updated on the same
pod events, whatever the pods' `schedulerName`: the indicators count every GPU pod that waits.
Queue: Kueue's `kueue.x-k8s.io/queue-name` label, Volcano's `scheduling.volcano.sh/queue-name`
annotation, else the namespace. Gang: scheduler-plugins' `scheduling.x-k8s.io/pod-group` label,
Volcano's `scheduling.k8s.io/group-name` annotation, Kueue's `kueue.x-k8s.io/pod-group-name`
label or KAI's `pod-group-name` annotation; its size is the PodGroup's `minMember`
when the state has the PodGroup, else the number of pods that carry the group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"  # Kueue plain pod groups
KAI_GROUP_ANNOTATION = "pod-group-name"  # KAI's pod grouper
POD_GROUP_KINDS = {"PodGroup"}  # scheduling.x-k8s.io/v1alpha1 and scheduling.volcano.sh/v1beta1


@dataclass(frozen=True)
class WaitInfo:
    """What the indicators need of one pod."""

    key: str
    queue: str
    created: float          # Unix seconds from metadata.creationTimestamp (0 if absent)
    gang: str               # "namespace/group", "" when not in a gang
    gpus: float             # whole-GPU equivalents asked
    bound: bool
    pending: bool           # Pending phase, no node yet, asks for a GPU


def timestamp(text: Any) -> float:
    """Unix seconds of an RFC 3339 time (metadata.creationTimestamp); 0 when unreadable (not
    NaN: pods are compared for equality, and NaN is never equal to itself)."""
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def queue_and_gang(ns: str, labels: dict, ann: dict) -> tuple[str, str]:
    """A pod's queue and gang ("namespace/group", "" for none) from its labels/annotations."""
    queue = str(labels.get(KUEUE_QUEUE_LABEL) or ann.get(VOLCANO_QUEUE_ANNOTATION) or ns)
    group = labels.get(POD_GROUP_LABEL) or ann.get(VOLCANO_GROUP_ANNOTATION) or \
        labels.get(KUEUE_GROUP_LABEL) or ann.get(KAI_GROUP_ANNOTATION) or ""
    return queue, f"{ns}/{group}" if group else ""


def wait_info(pod: Any) -> WaitInfo:
    """WaitInfo of a parsed pod (scheduler_hook.podspec.PodRequest)."""
    gpus = pod.gpus * (pod.milli / 1000 if pod.milli > 0 else 1.0)
    return WaitInfo(key=pod.key, queue=pod.queue or pod.namespace, created=pod.created,
                    gang=pod.gang, gpus=gpus, bound=bool(pod.node) and not pod.terminal,
                    pending=not pod.node and pod.phase == "Pending" and pod.gpus > 0)


@dataclass
class WaitBook:
    """Pending GPU pods and gang members, by pod key; PodGroup sizes by gang."""

    pods: dict[str, WaitInfo] = field(default_factory=dict)
    gang_min: dict[str, int] = field(default_factory=dict)

    def update(self, info: WaitInfo) -> None:
        if info.pending or (info.gang and info.bound):
            self.pods[info.key] = info
        else:
            self.pods.pop(info.key, None)

    def remove(self, key: str) -> None:
        self.pods.pop(key, None)

    def keep_only(self, keys: set[str]) -> None:
        for k in [k for k in self.pods if k not in keys]:
            del self.pods[k]

    def set_pod_groups(self, groups: list[dict]) -> None:
        """PodGroup objects (a snapshot may list them): minMember per gang."""
        for g in groups:
            meta, spec = g.get("metadata") or {}, g.get("spec") or {}
            try:
                self.gang_min[f"{meta.get('namespace') or 'default'}/{meta['name']}"] = \
                    int(spec.get("minMember") or 0)
            except (KeyError, TypeError, ValueError):
                continue  # not a usable PodGroup: the gang's size falls back to its pods

    def pending(self) -> list[WaitInfo]:
        return [p for p in self.pods.values() if p.pending]

    def partial_gangs(self) -> dict[str, list[WaitInfo]]:
        """Gangs with some members bound and the rest waiting (pending, or not yet created
        when the PodGroup says more are needed)."""
        by: dict[str, list[WaitInfo]] = {}
        for p in self.pods.values():
            if p.gang:
                by.setdefault(p.gang, []).append(p)
        out = {}
        for gang, members in by.items():
            bound = sum(m.bound for m in members)
            waiting = sum(m.pending for m in members)
            size = max(self.gang_min.get(gang, 0), len(members))
            if bound and (waiting or bound < size):
                out[gang] = members
        return out
