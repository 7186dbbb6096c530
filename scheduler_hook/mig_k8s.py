"""How MIG shows up in Kubernetes: read it from Node and Pod objects (NVIDIA device plugin and
GPU feature discovery, upstream names).

- `mig.strategy=single`: the node advertises `nvidia.com/gpu` = number of MIG devices, and
  `nvidia.com/gpu.product` ends in `-MIG-<profile>`; `nvidia.com/gpu.memory` is one device's.
  Those `nvidia.com/gpu` are slices, never whole GPUs.
- `mig.strategy=mixed`: one resource per profile, `nvidia.com/mig-<profile>: N`, with labels
  `nvidia.com/mig-<profile>.count` / `.memory`. `nvidia.com/gpu` then counts only the GPUs
  that are not split.
- `nvidia.com/mig.config` names the mig-parted configuration applied (`all-balanced`, ...).

A pod's MIG request is a shape of its own: (profile, count) from `nvidia.com/mig-<profile>`,
or, for single strategy, `nvidia.com/gpu: N` with a product requirement naming `-MIG-<profile>`.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from scheduler_hook import mig

MIG_PREFIX = "nvidia.com/mig-"
STRATEGY_LABEL = "nvidia.com/mig.strategy"
CONFIG_LABEL = "nvidia.com/mig.config"
CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
_SINGLE = re.compile(r"^(.*)-MIG-(\d+g\.\d+gb(?:\+me)?)$")


@dataclass(frozen=True)
class MigNode:
    """The MIG side of one node (None on NodeInfo when the node has no MIG devices)."""

    strategy: str                          # "single" | "mixed"
    capacity: tuple[tuple[str, int], ...]  # profile -> MIG devices allocatable
    memory_mib: tuple[tuple[str, float], ...]  # profile -> MiB of one device
    product: str                           # GPU product without the -MIG- suffix
    config: str = ""                       # nvidia.com/mig.config, "" when unlabelled
    config_state: str = ""                 # pending | rebooting | success | failed
    whole_gpus: int = 0                    # GPUs of the node left unsplit (mixed strategy)
    gpu_count_label: int = 0               # nvidia.com/gpu.count as labelled (0: absent)

    @property
    def caps(self) -> dict[str, int]:
        return dict(self.capacity)

    def slice_mib(self, profile: str) -> float:
        """Memory of one `profile` device: the GFD label, else the profile's name."""
        return dict(self.memory_mib).get(profile) or 1024.0 * mig.profile_gb(profile)

    def model(self, memory_mib: float = 0.0) -> mig.GpuModel | None:
        return mig.model_of(self.product, memory_mib)

    def physical_gpus(self, model: mig.GpuModel | None) -> int:
        """GPUs behind the MIG devices: from the applied named config where it divides the
        devices evenly, else the compute slices in use over 7 (at least 1)."""
        caps = self.caps
        if model is not None and self.config:
            named = mig.configs_for(model).get(self.config)
            per = named.as_dict if named is not None else {}
            if per and set(per) == set(caps) and all(caps[p] % per[p] == 0 for p in per):
                counts = {caps[p] // per[p] for p in per}
                if len(counts) == 1:
                    return counts.pop()
        slices = sum(mig.profile_compute(p) * n for p, n in caps.items())
        return max(1, math.ceil(slices / mig.COMPUTE_SLICES)) if slices else 0


def read_node(labels: dict[str, Any], alloc: dict[str, Any],
              quantity: Callable[[Any, str], int]) -> MigNode | None:
    """The MIG view of a node from its labels and allocatable; None when it has no MIG."""
    product = str(labels.get(PRODUCT_LABEL, ""))
    strategy = str(labels.get(STRATEGY_LABEL, "")).lower()
    common = dict(config=str(labels.get(CONFIG_LABEL, "")),
                  config_state=str(labels.get(CONFIG_STATE_LABEL, "")),
                  gpu_count_label=_int(labels.get(COUNT_LABEL)))
    single = _SINGLE.match(product)
    if single and strategy in ("", "single"):
        n = quantity(alloc.get("nvidia.com/gpu", 0), "allocatable[nvidia.com/gpu]")
        prof = single.group(2)
        mem = _float(labels.get(MEMORY_LABEL)) or 1024.0 * mig.profile_gb(prof)
        return MigNode("single", ((prof, n),), ((prof, mem),), single.group(1), **common)
    caps = {k[len(MIG_PREFIX):]: quantity(v, f"allocatable[{k}]") for k, v in alloc.items()
            if isinstance(k, str) and k.startswith(MIG_PREFIX)}
    if not caps:
        return None
    mem = {p: _float(labels.get(f"{MIG_PREFIX}{p}.memory")) or 1024.0 * mig.profile_gb(p)
           for p in caps}
    whole = quantity(alloc.get("nvidia.com/gpu", 0), "allocatable[nvidia.com/gpu]")
    return MigNode("mixed", tuple(sorted(caps.items())), tuple(sorted(mem.items())), product,
                   whole_gpus=whole, **common)


def _int(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def _float(v: Any) -> float:
    try:
        return float(str(v))
    except (TypeError, ValueError):
        return 0.0


def pod_request(spec: dict, quantity: Callable[[Any, str], int]) -> tuple[str, int]:
    """(profile, count) of `nvidia.com/mig-<profile>` over the containers ('', 0: none).

    Limits win over requests, as for `nvidia.com/gpu`. Two profiles in one pod (the device
    plugin allows one per container) are summed per profile; the first profile is returned
    and the others raise ValueError: the hook models one slice shape per pod.
    """
    found: Counter[str] = Counter()
    for c in spec.get("containers") or []:
        res = (c or {}).get("resources") or {} if isinstance(c, dict) else {}
        for kind in ("limits", "requests"):
            q = res.get(kind) or {} if isinstance(res, dict) else {}
            got = {k[len(MIG_PREFIX):]: v for k, v in q.items()
                   if isinstance(k, str) and k.startswith(MIG_PREFIX)} if isinstance(q, dict) \
                else {}
            if got:
                for prof, v in got.items():
                    found[prof] += quantity(v, f"resources.{kind}[{MIG_PREFIX}{prof}]")
                break
    found = Counter({p: n for p, n in found.items() if n > 0})
    if len(found) > 1:
        raise ValueError(f"pod asks for several MIG profiles ({', '.join(sorted(found))}); "
                         "the hook models one profile per pod")
    return next(iter(found.items()), ("", 0))


def single_profile(terms: Iterable[tuple[frozenset[str] | None, frozenset[str]]]) -> str:
    """The MIG profile a pod's product requirement pins (every allowed product ends in the
    same `-MIG-<profile>`), '' otherwise: such a pod's `nvidia.com/gpu` are slices."""
    profiles = set()
    for ok, _no in terms:
        if ok is None:
            return ""
        for product in ok:
            hit = _SINGLE.match(product)
            if not hit:
                return ""
            profiles.add(hit.group(2))
    return profiles.pop() if len(profiles) == 1 else ""


def used_by(pods: Iterable[Any]) -> Counter[str]:
    """MIG devices held per profile by the given (bound, live) PodRequests."""
    used: Counter[str] = Counter()
    for p in pods:
        if getattr(p, "mig_count", 0):
            used[p.mig_profile] += p.mig_count
    return used


def cluster_mig(nodes: Iterable[Any], mig_free: dict[str, dict[str, int]],
                seen: Iterable[tuple[str, int]]) -> tuple[dict[str, int], int]:
    """Free MIG devices per profile on schedulable nodes, and stranded compute slices: those in
    no instance of the geometry (e.g. the 7th of 3g+3g) plus those in free instances of a
    profile no MIG pod seen asks for (MIG's own fragmentation)."""
    wanted = {p for p, _ in seen}
    free_by: Counter[str] = Counter()
    stranded = 0
    for info in nodes:
        m = info.mig
        if m is None or not info.schedulable:
            continue
        free = mig_free.get(info.name, {})
        for p, n in free.items():
            free_by[p] += max(n, 0)
            if p not in wanted:
                stranded += mig.profile_compute(p) * max(n, 0)
        gpus = m.physical_gpus(m.model(info.gpu_mem_mib))
        used = sum(mig.profile_compute(p) * n for p, n in m.capacity)
        stranded += max(gpus * mig.COMPUTE_SLICES - used, 0)
    return dict(free_by), stranded
