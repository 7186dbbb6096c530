"""Pods tables (features.schema.POD_COLUMNS) from the public traces: openb and DLRM.

Times stay in the traces' relative seconds (floats): the run-time predictor needs differences
and order only. A row without `scheduled_time` never started; openb's `deletion_time` is set
for every pod (the pods still `Running` at the snapshot included: their run time is cut there).
- openb (`openb_pod_list_*.csv`): the trace names no job or image, so the workload key is the
  pod's template (CPU, memory, GPU count and share, GPU model constraint, QoS); queue and
  priority are the QoS class (LS, BE, ...).
- DLRM (`disaggregated_DLRM_trace.csv`): workload = `app_name`, queue = `role` (CN/HN).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from features.schema import to_numbers
from ground.errors import ForesightError


def _read(path: str | Path, what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ForesightError(f"{what} not found: {p}")
    return pd.read_csv(p)


def _num(raw: pd.DataFrame, col: str, path: str | Path) -> pd.Series:
    """`col` as floats (empty: NaN); text is named by column and data row, not pandas'
    "could not convert string to float"."""
    if col not in raw:
        raise KeyError(col)  # the CLI's "missing column" line
    return to_numbers(raw[col], f"{path}: column {col}")


def _times(raw: pd.DataFrame, path: str | Path) -> dict[str, pd.Series]:
    return {"created": _num(raw, "creation_time", path),
            "started": _num(raw, "scheduled_time", path),
            "finished": _num(raw, "deletion_time", path)}


def _checked(df: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Rows a run time cannot come from are named, not learned from or dropped unsaid: a
    negative GPU request, a time past any trace's clock, a deletion before the creation."""
    bad = {"gpu_request is negative": df["gpu_request"] < 0,
           "a time is beyond 1e12 s": (df[["created", "started", "finished"]].abs() > 1e12)
           .any(axis=1),
           "it was deleted before it was created": df["finished"] < df["created"]}
    for why, mask in bad.items():
        if mask.any():
            i = int(mask.to_numpy().nonzero()[0][0])
            raise ForesightError(f"{path}: data row {i + 1} (pod {df['pod'].iloc[i]}): {why}")
    return df


def openb_pods(path: str | Path) -> pd.DataFrame:
    raw = _read(path, "openb pod list")
    gpus, milli = _num(raw, "num_gpu", path), _num(raw, "gpu_milli", path)
    neg = (gpus < 0) | (milli < 0)  # -4 x 0 milli would read as 0 GPUs
    if neg.any():
        i = int(neg.to_numpy().nonzero()[0][0])
        raise ForesightError(f"{path}: data row {i + 1}: num_gpu and gpu_milli are counts >= 0")
    tmpl = (raw["cpu_milli"].astype(str) + "-" + raw["memory_mib"].astype(str) + "-"
            + raw["num_gpu"].astype(str) + "x" + raw["gpu_milli"].astype(str) + "-"
            + raw["gpu_spec"].fillna("").astype(str) + "-" + raw["qos"].astype(str))
    return _checked(pd.DataFrame({
        "namespace": "openb", "pod": raw["name"].astype(str), "node": "",
        "queue": raw["qos"].astype(str), "priority": raw["qos"].astype(str),
        "workload": tmpl, "gpu_request": gpus * milli / 1000.0, **_times(raw, path)}), path)


def dlrm_pods(path: str | Path) -> pd.DataFrame:
    raw = _read(path, "DLRM trace")
    return _checked(pd.DataFrame({
        "namespace": "dlrm", "pod": raw["instance_sn"].astype(str), "node": "",
        "queue": raw["role"].astype(str), "priority": 0,
        "workload": raw["app_name"].astype(str), "gpu_request": _num(raw, "gpu_request", path),
        **_times(raw, path)}), path)
