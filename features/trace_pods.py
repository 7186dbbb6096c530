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

from ground.errors import ForesightError


def _read(path: str | Path, what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ForesightError(f"{what} not found: {p}")
    return pd.read_csv(p)


def openb_pods(path: str | Path) -> pd.DataFrame:
    raw = _read(path, "openb pod list")
    tmpl = (raw["cpu_milli"].astype(str) + "-" + raw["memory_mib"].astype(str) + "-"
            + raw["num_gpu"].astype(str) + "x" + raw["gpu_milli"].astype(str) + "-"
            + raw["gpu_spec"].fillna("").astype(str) + "-" + raw["qos"].astype(str))
    return pd.DataFrame({
        "namespace": "openb", "pod": raw["name"].astype(str), "node": "",
        "queue": raw["qos"].astype(str), "priority": raw["qos"].astype(str),
        "workload": tmpl, "gpu_request": raw["num_gpu"] * raw["gpu_milli"] / 1000.0,
        "created": raw["creation_time"].astype(float),
        "started": raw["scheduled_time"].astype(float),
        "finished": raw["deletion_time"].astype(float)})


def dlrm_pods(path: str | Path) -> pd.DataFrame:
    raw = _read(path, "DLRM trace")
    return pd.DataFrame({
        "namespace": "dlrm", "pod": raw["instance_sn"].astype(str), "node": "",
        "queue": raw["role"].astype(str), "priority": 0,
        "workload": raw["app_name"].astype(str), "gpu_request": raw["gpu_request"].astype(float),
        "created": raw["creation_time"].astype(float),
        "started": raw["scheduled_time"].astype(float),
        "finished": raw["deletion_time"].astype(float)})
