"""GPU-type-constrained variants of an openb pod list (`gpu_spec`), built like `gpuspec05`.

`gpuspec05` is `default` with 369 of its 7,064 GPU pods (5.2 %) given a `gpu_spec` (the models
a pod may use, `|`-separated). A variant at share ``s`` keeps every constraint the source
already has and gives more GPU pods one until ``s`` of the GPU pods carry one. Each new pod
draws a spec from the constraint mix of the reference list (`gpuspec05`), conditioned on the
pod's class (a GPU fraction, one whole GPU, or several), as in the reference: fractions there
are only `T4` or `P100`, 8-GPU pods only `G2` or `G3`. Only specs that the cluster has and
that some node of an allowed model can host (GPU count, CPU, memory) are drawn, so no pod
becomes unschedulable by construction. Deterministic in ``seed``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ground.errors import ForesightError

REFERENCE = "gpuspec05"
GENERATED = re.compile(r"^(?P<base>[a-z0-9]+)-spec(?P<pct>\d{1,2})$")  # e.g. default-spec25
GENERATOR_SEED = 2023  # one fixed variant per (base, share): replay seeds only shuffle it


def _pod_class(num_gpu: np.ndarray, milli: np.ndarray) -> np.ndarray:
    """0 = a GPU fraction, 1 = one whole GPU, 2 = several GPUs, -1 = no GPU."""
    return np.where(num_gpu == 0, -1, np.where(num_gpu > 1, 2, np.where(milli < 1000, 0, 1)))


def _hostable(pods: pd.DataFrame, nodes: pd.DataFrame, spec: str) -> np.ndarray:
    """(P,) bool: a node of a model in ``spec`` has the GPUs, CPU and memory for the pod."""
    allowed = {s for s in spec.split("|") if s}
    nd = nodes[nodes["model"].isin(allowed) & (nodes["gpu"] > 0)]
    if nd.empty:
        return np.zeros(len(pods), dtype=bool)
    ok = ((pods["num_gpu"].to_numpy()[:, None] <= nd["gpu"].to_numpy()[None, :])
          & (pods["cpu_milli"].to_numpy()[:, None] <= nd["cpu_milli"].to_numpy()[None, :])
          & (pods["memory_mib"].to_numpy()[:, None] <= nd["memory_mib"].to_numpy()[None, :]))
    return ok.any(axis=1)


def constrain(pods: pd.DataFrame, share: float, reference: pd.DataFrame, nodes: pd.DataFrame,
              seed: int = GENERATOR_SEED) -> pd.DataFrame:
    """A copy of ``pods`` where ``share`` of the GPU pods carry a `gpu_spec` (see module doc)."""
    if not 0 <= share <= 1:
        raise ForesightError("constraint share must be in [0, 1]")
    out = pods.copy()
    if "gpu_spec" not in out:
        out["gpu_spec"] = np.nan
    spec = out["gpu_spec"].fillna("").astype(str).to_numpy(dtype=object)
    num = out["num_gpu"].fillna(0).to_numpy(np.int64)
    cls = _pod_class(num, out["gpu_milli"].fillna(0).to_numpy(np.int64))
    gpu_pods = np.flatnonzero(num > 0)
    want = int(round(share * len(gpu_pods))) - int((spec[gpu_pods] != "").sum())
    if want <= 0:
        return out
    ref = reference[reference["gpu_spec"].notna() & (reference["num_gpu"] > 0)]
    if ref.empty:
        raise ForesightError("the reference pod list carries no gpu_spec to draw from")
    ref_cls = _pod_class(ref["num_gpu"].to_numpy(np.int64), ref["gpu_milli"].to_numpy(np.int64))
    ref_spec = ref["gpu_spec"].astype(str).to_numpy()
    names = sorted(set(ref_spec))
    host = np.stack([_hostable(out, nodes, s) for s in names], axis=1)  # (P, S)
    # frequency of each spec per class in the reference (class-free mix as the fallback)
    freq = np.array([[np.sum((ref_spec == s) & (ref_cls == c)) for s in names]
                     for c in (0, 1, 2)], dtype=float)
    overall = np.array([np.sum(ref_spec == s) for s in names], dtype=float)
    rng = np.random.default_rng(seed)
    for i in rng.permutation(gpu_pods[spec[gpu_pods] == ""]):
        if want == 0:
            break
        w = freq[cls[i]] * host[i]
        if w.sum() == 0:
            w = overall * host[i]
        if w.sum() == 0:
            continue  # no spec of the reference can host this pod: leave it free
        spec[i] = names[int(rng.choice(len(names), p=w / w.sum()))]
        want -= 1
    out["gpu_spec"] = np.where(spec == "", np.nan, spec)
    return out


def generated_trace(name: str, csv_dir: Path | str) -> pd.DataFrame | None:
    """The pod table of a generated name like ``default-spec25``, or None for other names."""
    m = GENERATED.match(name)
    if not m:
        return None
    csv_dir = Path(csv_dir)
    paths = {k: csv_dir / f"openb_pod_list_{k}.csv" for k in (m["base"], REFERENCE)}
    paths["nodes"] = csv_dir / "openb_node_list_gpu_node.csv"
    for p in paths.values():
        if not p.is_file():
            raise ForesightError(f"{name}: needs {p}")
    base = m["base"] if m["base"] != "default" else REFERENCE  # keep gpuspec05's real ones
    return constrain(pd.read_csv(paths[base]), int(m["pct"]) / 100,
                     pd.read_csv(paths[REFERENCE]), pd.read_csv(paths["nodes"]))
