"""Integer codes of telemetry sample rows: step, pod, GPU, node, metric.

Why: at tens of millions of samples, strings and Timestamps cost most of the time in pandas
merges and multi-key group-bys. Every sample gets a step code (its index in the sorted unique
timestamps), a pod code and a GPU code, and each question is asked of one int64 composite
(step x pod, step x GPU, ...): a hash group-by or a sorted lookup. Pod codes follow the order of
the "namespace/pod" names (features.pair_build relies on it for which pod is side `a`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd


class SampleCodes:
    """Integer codes of every sample row: step, pod, GPU, node, metric."""

    @classmethod
    def of(cls, s: pd.DataFrame, step_ns: int | None = None) -> "SampleCodes":
        c = cls()
        ns = pd.to_datetime(s["ts"], utc=True).dt.as_unit("ns").astype("int64").to_numpy()
        c.ts_all = np.unique(ns)
        c.step = step_ns or (int(np.median(np.diff(c.ts_all))) if len(c.ts_all) > 1
                             else int(30e9))
        c.t = np.searchsorted(c.ts_all, ns).astype(np.int64)
        c.key, c.names = pod_codes(s)
        c.gpu, gpu_names = pd.factorize(text(s["uuid"]))
        node, c.node_names = pd.factorize(text(s["node"]))
        c.node_of_gpu = np.zeros(len(gpu_names), dtype=np.int64)
        c.node_of_gpu[c.gpu] = node  # a GPU sits in one node
        c.metric, c.metric_names = pd.factorize(text(s["metric"]))
        c.K, c.G = max(len(c.names), 1), max(len(gpu_names), 1)
        # one row per (step, pod, GPU): who was on which GPU at each step
        att = pd.unique((c.t * c.K + c.key) * c.G + c.gpu)
        c.att_tk, c.att_gpu = att // c.G, att % c.G
        tg = c.att_tk // c.K * c.G + c.att_gpu
        _, inv, cnt = np.unique(tg, return_inverse=True, return_counts=True)
        c.att_n = cnt[inv]  # pods on that GPU at that step
        worst = pd.Series(c.att_n).groupby(c.att_tk).max()
        c.alone_tk = np.sort(worst.index.to_numpy()[worst.to_numpy() == 1])
        return c

    def is_alone(self, tk: np.ndarray) -> np.ndarray:
        """Whether pod-step `tk` (step * K + pod) had every GPU of the pod to itself."""
        return member(self.alone_tk, tk)

    def gpus_per_pod(self) -> pd.Series:
        n = pd.Series(self.att_gpu).groupby(self.att_tk % self.K).nunique()
        return pd.Series(n.to_numpy(), index=self.names[n.index.to_numpy()])


def text(col: pd.Series) -> pd.Series:
    """The column as strings, without a copy when it already holds them."""
    if isinstance(col.dtype, (pd.StringDtype, pd.CategoricalDtype)) or col.dtype == object:
        return col
    return col.astype(str)


def member(sorted_ids: np.ndarray, x: np.ndarray) -> np.ndarray:
    if len(sorted_ids) == 0:
        return np.zeros(len(x), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_ids, x), len(sorted_ids) - 1)
    return sorted_ids[i] == x


def pod_codes(s: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the code of "namespace/pod" in string order, and the names by code."""
    ns_c, ns_u = pd.factorize(text(s["namespace"]))
    pod_c, pod_u = pd.factorize(text(s["pod"]))
    n = max(len(pod_u), 1)
    pair_c, pair_u = pd.factorize(ns_c.astype(np.int64) * n + pod_c)
    names = np.asarray([f"{ns_u[v // n]}/{pod_u[v % n]}" for v in pair_u], dtype=object)
    order = np.argsort(names, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[pair_c], names[order]


def as_ts(ns: np.ndarray, dtype) -> pd.Series:
    out = pd.to_datetime(ns.astype("int64"), utc=isinstance(dtype, pd.DatetimeTZDtype))
    return out.tz_convert(dtype.tz) if isinstance(dtype, pd.DatetimeTZDtype) else out
