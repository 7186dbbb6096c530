"""A synthetic 5,000-node GPU cluster for the extender benchmarks (deterministic by seed).

Node GPU counts/models and pod shapes follow the openb trace's broad mix (mostly 8-GPU nodes,
many fractional and 1-GPU pods, some 2/4/8-GPU pods); about 60% of GPU milli is allocated.
"""
from __future__ import annotations

import gc

import numpy as np

from scheduler_hook.config import load_config
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.providers import ProviderSet
from scheduler_hook.state import ClusterState

MODELS = [("NVIDIA-A100-SXM4-80GB", 81920), ("NVIDIA-V100-SXM2-32GB", 32768),
          ("NVIDIA-T4", 15360), ("NVIDIA-H100-80GB-HBM3", 81920)]
#: (gpus, fraction or None, weight)
SHAPES = [(1, 0.25, 0.15), (1, 0.5, 0.2), (1, None, 0.4), (2, None, 0.1), (4, None, 0.1),
          (8, None, 0.05)]


def shape_pod(rng: np.random.Generator, name: str, node: str = "", phase: str = "Pending"
              ) -> dict:
    w = np.array([s[2] for s in SHAPES])
    gpus, frac, _ = SHAPES[rng.choice(len(SHAPES), p=w / w.sum())]
    wl = f"job-{rng.integers(0, 40)}"
    if frac is not None:
        return make_pod(name, fraction=frac, node=node, workload=wl, phase=phase)
    return make_pod(name, gpus=gpus, node=node, workload=wl, phase=phase)


def synthetic_cluster(n_nodes: int = 5000, fill: float = 0.6, seed: int = 0
                      ) -> tuple[list[dict], list[dict]]:
    """Nodes and bound pods: each node is filled to about `fill` of its GPU milli."""
    rng = np.random.default_rng(seed)
    nodes, pods = [], []
    for i in range(n_nodes):
        gpus = int(rng.choice([8, 8, 8, 4, 2, 1]))
        model, mem = MODELS[int(rng.integers(0, len(MODELS)))]
        name = f"gpu-{i:05d}"
        nodes.append(make_node(name, gpus=gpus, gpu_mem_mib=mem, product=model))
        free = [1000] * gpus
        budget = fill * 1000 * gpus
        for k in range(64):
            pod = shape_pod(rng, f"{name}-p{k}", node=name, phase="Running")
            ann = pod["metadata"]["annotations"]
            need = int(round(float(ann["gpu-fraction"]) * 1000)) if "gpu-fraction" in ann else 1000
            n = 1 if "gpu-fraction" in ann else int(
                pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            slots = [g for g in range(gpus) if free[g] >= need][:n]
            if len(slots) < n or sum(1000 - f for f in free) + need * n > budget:
                continue  # this shape does not fit any more: try another
            for g in slots:
                free[g] -= need
            ann["foresight.io/gpu-index"] = ",".join(map(str, slots))
            pods.append(pod)
    return nodes, pods


def served_hook(nodes: list[dict], pods: list[dict]) -> tuple[ClusterState, ExtenderHook]:
    """The cluster loaded into a ready state, collections frozen as `foresight serve` does
    once the state is loaded, and an extender over it (shipped config, no models)."""
    st = ClusterState()
    st.replace_all(nodes, pods)
    st.ready = True
    gc.collect()
    gc.freeze()
    return st, ExtenderHook(st, ProviderSet(), load_config())
