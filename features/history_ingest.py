"""A job history from an ingest directory (`foresight ingest`, or `foresight demo`'s tables).

Pods: ``pods.parquet`` (created, started, finished, GPU request, queue, priority, workload).
Nodes: ``nodes.parquet`` (``node``, ``gpus``, ``model``: kube_node_status_allocatable and the
GPU feature-discovery label) when there, else the GPUs each node reported in the GPU samples;
nodes pods ran on that are in neither take the most common GPU count (said).
Gangs: a ``gang`` column when the pods table has one (`ingest_history` adds it from the
scheduler-plugins pod-group or Volcano job label of kube_pod_labels), else pods named ``<job>-(master|worker|launcher|ps|chief|leader|head)-<n>`` in one
namespace (PyTorchJob, MPIJob, TFJob, LeaderWorkerSet, Ray) form one gang (said).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from features import schema
from features.history import History, Notes, finish_history, node_table
from features.history_csv import seconds
from features.ingest_store import read_parquet
from ground.errors import ForesightError

GANG_NAME = r"^(?P<job>.+)-(?:master|worker|launcher|ps|chief|leader|head|evaluator)-\d+$"
NODES_FILE = "nodes.parquet"


def infer_gangs(pods: pd.DataFrame, notes: Notes) -> pd.Series:
    """The gang id per pod ('' = none): the ``gang`` column, else from controller pod names."""
    if "gang" in pods and pods["gang"].astype(str).ne("").any():
        return pods["gang"].fillna("").astype(str)
    name = pods["pod"].astype(str).str.extract(GANG_NAME, expand=False)
    key = (pods["namespace"].astype(str) + "/" + name).where(name.notna(), "")
    size = key.map(key.value_counts())
    key = key.where(size > 1, "")
    notes.inferred(int(key.ne("").sum()), f"pods are in {key[key.ne('')].nunique():,} gangs "
                   "inferred from their names (<job>-worker-<n>, ...): each gang is placed "
                   "all-or-nothing")
    return key


def _sample_nodes(root: Path) -> pd.DataFrame:
    """node -> distinct GPUs seen in the samples (either layout of the samples)."""
    files = sorted((root / "samples").glob("day=*/*.parquet")) or \
        ([root / "samples.parquet"] if (root / "samples.parquet").is_file() else [])
    seen = []
    for f in files:
        s = read_parquet(f, columns=["node", "gpu", "uuid"])
        seen.append(s.drop_duplicates())
    if not seen:
        return pd.DataFrame({"node": [], "gpus": []})
    s = pd.concat(seen).drop_duplicates()
    s = s[s["node"].astype(str).ne("")]
    gid = s["uuid"].astype(str).where(s["uuid"].astype(str).ne(""), s["gpu"].astype(str))
    return s.assign(g=gid).groupby("node")["g"].nunique().rename("gpus").reset_index()


def read_ingest_history(root: Path | str, end: float | None = None) -> History:
    root = Path(root)
    path = root / "pods.parquet"
    if not path.is_file():
        raise ForesightError(f"{root} has no pods.parquet: run `foresight ingest --out {root}` "
                             "first (or give --prometheus-url)")
    notes = Notes()
    raw = read_parquet(path)
    missing = [c for c in ("pod", "created", "gpu_request") if c not in raw.columns]
    for c in missing:
        notes.problem(len(raw), f"rows: pods.parquet has no column {c!r}")
    if "created" in missing:
        raise ForesightError(f"{path} has no 'created' column: no arrival times")
    try:
        pods = schema.conform(raw, schema.POD_COLUMNS)
    except ValueError as exc:  # a column of the wrong type: as `demand series` says it
        raise ForesightError(f"{path}: not a readable pods table ({exc})") from None
    if "gang" in raw:
        pods["gang"] = raw["gang"].fillna("").astype(str).to_numpy()
    if (root / NODES_FILE).is_file():
        nodes = node_table(read_parquet(root / NODES_FILE), notes)
        how = "nodes.parquet"
    else:
        nodes = node_table(_sample_nodes(root), notes)
        how = "the GPU samples"
    ran = pods["node"].astype(str)
    extra = sorted(set(ran[ran.ne("")]) - set(nodes["node"]))
    if extra and len(nodes):
        g = int(nodes["gpus"].mode().iloc[0])
        notes.inferred(len(extra), f"nodes ran GPU pods but are not in {how}: each given "
                       f"{g} GPUs (the most common count)")
        nodes = pd.concat([nodes, pd.DataFrame({"node": extra, "gpus": g, "model": ""})],
                          ignore_index=True)
    elif extra:
        notes.problem(len(extra), f"nodes ran GPU pods, and no node has GPU counts in {how}: "
                      "each given the largest request seen, rounded up to 8")
        g = int(max(8, np.ceil(pods["gpu_request"].max())))
        nodes = pd.DataFrame({"node": extra, "gpus": g, "model": ""})
    man_end = None
    if (root / "ingest.json").is_file():
        try:
            man_end = pd.Timestamp(json.loads((root / "ingest.json").read_text())["end"])
        except (OSError, ValueError, KeyError):
            notes.problem(1, "ingest.json is not readable: the history ends at its last event")
    if end is None and man_end is not None:
        end = float(seconds(pd.Series([man_end.tz_convert("UTC")]))[0])
    pt = pd.DataFrame({"job": pods["namespace"].astype(str) + "/" + pods["pod"].astype(str),
                       "gang": infer_gangs(pods, notes).to_numpy(),
                       "arrival": seconds(pods["created"]), "start": seconds(pods["started"]),
                       "finish": seconds(pods["finished"]), "runtime_s": np.nan, "pods": 1,
                       "gpus": pods["gpu_request"].to_numpy(float), "mig_g": 0.0,
                       "queue": pods["queue"].astype(str), "namespace": pods["namespace"],
                       "priority": pods["priority"].astype(np.int64),
                       "workload": pods["workload"].astype(str),
                       "node": pods["node"].astype(str)})
    return finish_history(pt, nodes, end, pd.Timestamp(0, tz="UTC"), notes, str(root))


def nodes_from_source(source, end, window_s: int, gpu_resource: str = "nvidia_com_gpu",
                      node_label: str = "node") -> pd.DataFrame:
    """node, gpus, model from kube_node_status_allocatable and the GPU feature-discovery
    label (kube_node_labels' label_nvidia_com_gpu_product); empty when KSM exports neither."""
    alloc = source.query(f'last_over_time(kube_node_status_allocatable{{resource='
                         f'"{gpu_resource}"}}[{window_s}s])', end)
    if alloc.empty or node_label not in alloc.columns:
        return pd.DataFrame({"node": [], "gpus": [], "model": []})
    out = alloc[[node_label, "value"]].rename(columns={node_label: "node", "value": "gpus"})
    out = out.drop_duplicates("node", keep="last")
    lab = source.query(f"last_over_time(kube_node_labels[{window_s}s])", end)
    col = "label_nvidia_com_gpu_product"
    if not lab.empty and col in lab.columns and node_label in lab.columns:
        m = lab[[node_label, col]].drop_duplicates(node_label, keep="last")
        out = out.merge(m.rename(columns={node_label: "node", col: "model"}), on="node",
                        how="left")
    else:
        out["model"] = ""
    return out.fillna({"model": ""}).sort_values("node").reset_index(drop=True)


#: kube_pod_labels labels naming a pod's gang: scheduler-plugins' PodGroup
#: (scheduling.x-k8s.io/pod-group) and Volcano's job (volcano.sh/job-name); KSM exports them
#: when its --metric-labels-allowlist lets them through.
GANG_LABELS = ("label_scheduling_x_k8s_io_pod_group", "label_volcano_sh_job_name")


def gangs_from_source(source, end, window_s: int) -> pd.DataFrame:
    """namespace, pod, gang ('' none) from the pod-group labels of kube_pod_labels."""
    lab = source.query(f"last_over_time(kube_pod_labels[{window_s}s])", end)
    cols = [c for c in GANG_LABELS if c in lab.columns]
    if lab.empty or not cols or not {"namespace", "pod"} <= set(lab.columns):
        return pd.DataFrame({"namespace": [], "pod": [], "gang": []})
    g = lab[cols].fillna("").astype(str).agg(lambda r: next((v for v in r if v), ""), axis=1)
    out = pd.DataFrame({"namespace": lab["namespace"].astype(str), "pod": lab["pod"].astype(str),
                        "gang": g})
    out["gang"] = (out["namespace"] + "/" + out["gang"]).where(out["gang"].ne(""), "")
    return out.drop_duplicates(["namespace", "pod"], keep="last")


def write_nodes_and_gangs(source, root: Path | str, end, window_s: int) -> dict:
    """After an ingest: ``nodes.parquet`` from kube_node_status_allocatable (and the GFD
    product label), and a ``gang`` column in ``pods.parquet`` from the pod-group labels, where
    kube-state-metrics exports them. Counts of what was written."""
    root = Path(root)
    nodes = nodes_from_source(source, end, window_s)
    if len(nodes):
        atomic_parquet(nodes, root / NODES_FILE)
    gangs = gangs_from_source(source, end, window_s)
    tagged = 0
    if gangs["gang"].ne("").any():  # the pods table gains a gang column (others ignore it)
        pods = pd.read_parquet(root / "pods.parquet")
        pods = pods.merge(gangs, on=["namespace", "pod"], how="left").fillna({"gang": ""})
        atomic_parquet(pods, root / "pods.parquet")
        tagged = int(pods["gang"].ne("").sum())
    return {"nodes": len(nodes), "gang_pods": tagged}


def atomic_parquet(df: pd.DataFrame, target: Path) -> None:
    from features.ingest_store import atomic_parquet as write

    write(df, target)


def ingest_history(url: str, out: Path | str, since, end=None, **auth) -> None:
    """`foresight ingest` of what the what-if needs: pods, nodes (and gangs), and one GPU
    metric at 5 min (the GPUs of nodes kube-state-metrics does not list). `auth`:
    PrometheusSource's token, basic auth, TLS and tenant arguments."""
    from features.ingest import now_utc
    from features.ingest_store import ingest_to_dir
    from features.prometheus import PrometheusSource

    end = end or now_utc()
    ingest_to_dir(PrometheusSource(url, **auth), end - since, end, out, step_s=300.0,
                  metrics=("DCGM_FI_DEV_GPU_UTIL",))
