"""PromQL results -> the tidy GPU sample, pod and queue tables of `features.schema`."""
from __future__ import annotations

from datetime import datetime

import pandas as pd

from features import schema
from features.catalog import LabelConfig
from features.prometheus import MetricSource


def gpu_samples_from_frame(df: pd.DataFrame, metric: str, labels: LabelConfig) -> pd.DataFrame:
    """Rename one metric's range-query result to the GPU sample contract."""
    out = pd.DataFrame({
        "ts": df["ts"],
        "node": _col(df, labels.node), "gpu": _col(df, labels.gpu), "uuid": _col(df, labels.uuid),
        "namespace": _col(df, labels.namespace), "pod": _col(df, labels.pod),
        "metric": metric, "value": df["value"],
    })
    return schema.conform(out, schema.GPU_SAMPLE_COLUMNS)


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series("", index=df.index, dtype="string")


def _last(source: MetricSource, expr: str, window_s: int, at: datetime) -> pd.DataFrame:
    # One instant query with last_over_time finds every pod seen in the window, at any size.
    return source.query(f"last_over_time({expr}[{window_s}s])", at)


def pods_from_source(source: MetricSource, start: datetime, end: datetime,
                     labels: LabelConfig) -> pd.DataFrame:
    """Build the pod table from kube-state-metrics series seen in [start, end]."""
    window = max(int(pd.Timestamp(end).timestamp() - pd.Timestamp(start).timestamp()), 1)
    ns, pod = labels.namespace, labels.pod
    key = [ns, pod]
    info = _last(source, "kube_pod_info", window, end)
    if info.empty:
        return schema.empty(schema.POD_COLUMNS)
    pods = info.reindex(columns=key + [labels.pod_node, "priority_class"]).fillna("")
    pods = pods.drop_duplicates(key, keep="last")
    pods = pods.rename(columns={ns: "namespace", pod: "pod", labels.pod_node: "node"})
    pods["priority"] = pods.pop("priority_class").map(lambda c: _priority(c, labels))

    lab = _last(source, "kube_pod_labels", window, end)
    extra = [*labels.queue_fallback, *labels.workload, *labels.workload_first,
             *labels.workload_fallback]
    lab = lab.reindex(columns=list(dict.fromkeys(key + [labels.queue, *extra]))).fillna("")
    for alt in labels.queue_fallback:  # a pod with no Kueue queue: its Volcano queue, if any
        lab[labels.queue] = lab[labels.queue].where(lab[labels.queue] != "", lab[alt])
    wl = lab[list(labels.workload)].astype(str).agg("/".join, axis=1).str.strip("/") \
        if labels.workload else pd.Series("", index=lab.index)
    for alt in labels.workload_fallback:
        wl = wl.where(wl != "", lab[alt].astype(str))
    for first in reversed(labels.workload_first):  # the first listed wins
        wl = lab[first].astype(str).where(lab[first] != "", wl)
    lab["workload"] = wl
    lab = lab.rename(columns={ns: "namespace", pod: "pod", labels.queue: "queue"})
    pods = pods.merge(lab[["namespace", "pod", "queue", "workload"]].drop_duplicates(["namespace", "pod"]),
                      on=["namespace", "pod"], how="left")

    req = source.query(
        f'sum by ({ns}, {pod}) (last_over_time(kube_pod_container_resource_requests'
        f'{{resource="{labels.gpu_resource}"}}[{window}s]))', end)
    pods = pods.merge(_values(req, ns, pod, "gpu_request"), on=["namespace", "pod"], how="left")
    for metric, col in (("kube_pod_created", "created"), ("kube_pod_start_time", "started"),
                        ("kube_pod_completion_time", "finished")):
        times = _values(_last(source, metric, window, end), ns, pod, col)
        times[col] = pd.to_datetime(times[col], unit="s", utc=True)
        pods = pods.merge(times, on=["namespace", "pod"], how="left")
    pods["gpu_request"] = pods["gpu_request"].fillna(0.0)
    # Only pods that asked for GPUs belong in the table.
    pods = pods[pods["gpu_request"] > 0]
    return schema.conform(pods.sort_values(["namespace", "pod"]), schema.POD_COLUMNS)


def _values(df: pd.DataFrame, ns: str, pod: str, col: str) -> pd.DataFrame:
    if df.empty or ns not in df.columns or pod not in df.columns:
        return pd.DataFrame({"namespace": pd.Series(dtype=str), "pod": pd.Series(dtype=str),
                             col: pd.Series(dtype=float)})
    out = df[[ns, pod, "value"]].rename(columns={ns: "namespace", pod: "pod", "value": col})
    return out.drop_duplicates(["namespace", "pod"], keep="last")


def _priority(cls: str, labels: LabelConfig) -> int:
    if cls in labels.priorities:
        return labels.priorities[cls]
    try:
        return int(float(cls))
    except (TypeError, ValueError):
        return 0


def queue_samples_from_source(source: MetricSource, start: datetime, end: datetime, step_s: float,
                              labels: LabelConfig) -> pd.DataFrame:
    """Kueue and Volcano queue gauges as (ts, queue, metric, value); empty when neither is
    installed."""
    frames = []
    for metric, by in (("kueue_pending_workloads", labels.cluster_queue),
                       ("kueue_cluster_queue_resource_pending", labels.cluster_queue),
                       ("volcano_queue_pod_group_pending_count", labels.volcano_queue),
                       ("volcano_queue_pod_group_inqueue_count", labels.volcano_queue)):
        df = source.query_range(f"sum by ({by}) ({metric})", start, end, step_s)
        if df.empty or by not in df.columns:
            continue
        frames.append(pd.DataFrame({"ts": df["ts"], "queue": df[by], "metric": metric,
                                    "value": df["value"]}))
    if not frames:
        return schema.empty(schema.QUEUE_SAMPLE_COLUMNS)
    return schema.conform(pd.concat(frames, ignore_index=True), schema.QUEUE_SAMPLE_COLUMNS)
