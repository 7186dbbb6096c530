"""openb trace loading and the published workload protocol (shuffle, then tune to 1.3x).

Protocol (../shared/traces/README.md, openb-2023): the cluster is the GPU nodes; pods are
shuffled with the seed, then pods sampled uniformly with replacement are appended until the total
GPU request reaches ``tune`` x cluster GPU capacity (a trace already above it is cut there).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from features.schema import check_gpus_per_node
from ground.errors import ForesightError
from ground.paths import input_file
from simulator.replay.constrain import generated_trace

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def read_table(path: Path | str, required: tuple[str, ...], what: str) -> pd.DataFrame:
    path = input_file(path, f"{what} file", "the CSV file")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises many types for a bad CSV
        raise ForesightError(f"cannot read {what} CSV {path}: {type(exc).__name__}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ForesightError(f"{what} CSV {path} lacks columns: {', '.join(missing)}")
    return df


def _ints(df: pd.DataFrame, col: str, path: Path | str, empty_is_zero: bool = True
          ) -> np.ndarray:
    """A count column as int64; a value that is not a number (or an empty cell, unless it
    reads as 0), or not a whole number from 0 to 2^53, is a one-line error naming it, not a
    traceback or a node silently dropped."""
    num = pd.to_numeric(df[col], errors="coerce")
    bad = num.isna() & (df[col].notna() if empty_is_zero else True)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        v = df[col].iloc[i]
        what = "an empty cell" if pd.isna(v) else f"a non-numeric value {v!r}"
        raise ForesightError(f"{path}: column {col} has {what} (data row {i + 1})")
    vals = num.fillna(0).to_numpy(float)
    bad = ~((vals >= 0) & (vals <= 2.0 ** 53) & (vals == np.floor(vals)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ForesightError(f"{path}: column {col} has {df[col].iloc[i]} (data row {i + 1}): "
                             "counts are whole numbers >= 0")
    return vals.astype(np.int64)


@dataclass(frozen=True)
class Nodes:
    """Node capacities as arrays (N nodes, G = most GPUs on a node)."""

    name: np.ndarray
    cpu: np.ndarray  # milli
    mem: np.ndarray  # MiB
    gpus: np.ndarray  # GPU count
    model: np.ndarray  # str

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpus.sum()) * 1000

    def __len__(self) -> int:
        return len(self.name)


@dataclass(frozen=True)
class Pods:
    """Pod requests in arrival order."""

    cpu: np.ndarray
    mem: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray  # per GPU; 1000 for pods of whole GPUs, 0 for CPU-only pods
    spec: np.ndarray  # '' or 'A|B' allowed GPU models

    @property
    def gpu_request(self) -> np.ndarray:
        """Total milli-GPUs each pod asks for."""
        return self.num_gpu * self.gpu_milli

    def __len__(self) -> int:
        return len(self.cpu)

    def take(self, idx: np.ndarray) -> Pods:
        return Pods(self.cpu[idx], self.mem[idx], self.num_gpu[idx], self.gpu_milli[idx],
                    self.spec[idx])


def load_nodes(path: Path | str) -> Nodes:
    df = read_table(path, NODE_COLUMNS, "nodes")
    gpu = _ints(df, "gpu", path)
    check_gpus_per_node(df["gpu"], str(path), "gpu")  # the cluster arrays are nodes x GPUs
    cpu, mem = (_ints(df, c, path, empty_is_zero=False) for c in ("cpu_milli", "memory_mib"))
    keep = gpu > 0  # the published cluster is the GPU nodes
    df = df[keep]
    if df.empty:
        raise ForesightError(f"nodes CSV {path} has no GPU node")
    return Nodes(df["sn"].astype(str).to_numpy(), cpu[keep], mem[keep], gpu[keep],
                 df["model"].fillna("").astype(str).to_numpy())


def load_pods(path: Path | str) -> Pods:
    return pods_from_frame(read_table(path, POD_COLUMNS, "pods"), str(path))


def pods_from_frame(df: pd.DataFrame, path: str = "table") -> Pods:
    """Pods from an openb pod table already in memory (e.g. a generated constrained variant)."""
    missing = [c for c in POD_COLUMNS if c not in df.columns]
    if missing:
        raise ForesightError(f"pods {path} lacks columns: {', '.join(missing)}")
    num = _ints(df, "num_gpu", path)
    milli = _ints(df, "gpu_milli", path)
    if (num < 0).any() or ((num == 1) & ((milli <= 0) | (milli > 1000))).any():
        raise ForesightError(f"pods CSV {path}: num_gpu must be >= 0 and gpu_milli in 1..1000")
    # num_gpu > 1 means whole GPUs whatever gpu_milli says
    milli = np.where(num > 1, 1000, np.where(num == 0, 0, milli))
    spec = (df["gpu_spec"].fillna("").astype(str).to_numpy() if "gpu_spec" in df
            else np.full(len(df), "", dtype=object))
    return Pods(_ints(df, "cpu_milli", path), _ints(df, "memory_mib", path), num, milli, spec)


def unplaceable(pods: Pods, nodes: Nodes) -> np.ndarray:
    """Indexes of pods asking more GPUs than the largest node has: they fit nowhere, ever."""
    return np.flatnonzero(pods.num_gpu > int(nodes.gpus.max()))


def load_trace(csv_dir: Path | str, name: str) -> Pods:
    """An openb pod list by name: a shared CSV, or a generated variant like ``default-spec25``."""
    df = generated_trace(name, csv_dir)
    if df is not None:
        return pods_from_frame(df, name)
    return load_pods(Path(csv_dir) / f"openb_pod_list_{name}.csv")


def build_workload(pods: Pods, capacity_milli: int, tune: float, seed: int) -> Pods:
    """Shuffle with ``seed``; append sampled pods (or cut) until GPU request >= tune x capacity."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pods))
    if tune <= 0:
        return pods.take(order)
    target = tune * capacity_milli
    req = pods.gpu_request
    total = req.sum()
    if total >= target:
        cut = int(np.searchsorted(np.cumsum(req[order]), target)) + 1
        return pods.take(order[:cut])
    if total <= 0:
        raise ForesightError("the pod trace asks for no GPU; cannot tune it to a GPU load")
    extra: list[np.ndarray] = []
    while total < target:  # draw in batches; trim to the pod that crosses the target
        draw = rng.integers(0, len(pods), size=max(64, int((target - total) / req.mean()) + 64))
        cum = total + np.cumsum(req[draw])
        stop = int(np.searchsorted(cum, target))
        if stop < len(draw):
            extra.append(draw[: stop + 1])
            break
        extra.append(draw)
        total = cum[-1]
    return pods.take(np.concatenate([order, *extra]))
