"""generate_cluster: arrivals -> event-driven cluster -> segments -> telemetry -> tidy tables."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from features.schema import (GPU_SAMPLE_COLUMNS, POD_COLUMNS, QUEUE_SAMPLE_COLUMNS, conform)
from simulator.arrivals import generate_arrivals
from simulator.cluster_sim import ClusterSim
from simulator.config import APP_ITERATIONS, SimConfig, SyntheticCluster
from simulator.health import apply_health, draw_health
from simulator.seeds import load_seed
from simulator.segments import build_segments, diurnal_busy_prob
from simulator.telemetry import METRIC_GRID, metric_grids
from simulator.truth import build_truth
from simulator.workloads import BATCH_LABEL, gpu_spec


def _names(cfg: SimConfig, pods: list) -> tuple[list, list, list, list]:
    nodes = [f"gpu-node-{n:02d}" for n in range(cfg.nodes)]
    uuids = []
    for g in range(cfg.n_gpus):
        h = hashlib.sha1(f"{cfg.seed}/{g}".encode()).hexdigest()
        uuids.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")
    ns = [cfg.namespace_prefix + p.queue for p in pods]
    names = [f"{p.workload}-{p.pid:05d}" for p in pods]
    return nodes, uuids, ns, names


def _sample_rows(cfg: SimConfig, pods: list, n_steps: int, lo: int = 0, hi: int | None = None):
    """(gpu, step, pod) of every sample row of steps [lo, hi): one per attached pod, or pod
    -1 when idle."""
    hi = n_steps if hi is None else hi
    att_gpu, att_i0, att_i1, att_pod, att_first = [], [], [], [], []
    for p in pods:
        if np.isnan(p.started):
            continue
        stop = p.finished if not np.isnan(p.finished) else cfg.duration_s
        i0 = int(np.clip(np.ceil(p.started / cfg.step_s), lo, hi)) - lo
        i1 = int(np.clip(np.ceil(stop / cfg.step_s), lo, hi)) - lo
        for k, g in enumerate(p.gpus):
            if i1 > i0:
                att_gpu.append(g), att_i0.append(i0), att_i1.append(i1)
                att_pod.append(p.pid), att_first.append(k == 0)
    att_gpu, att_i0, att_i1 = (np.asarray(x, dtype=np.int64) for x in (att_gpu, att_i0, att_i1))
    lens = att_i1 - att_i0
    count = np.zeros((cfg.n_gpus, hi - lo + 1), dtype=np.int64)
    np.add.at(count, (att_gpu, att_i0), 1)
    np.add.at(count, (att_gpu, att_i1), -1)
    busy = np.cumsum(count[:, :-1], axis=1) > 0
    idle_g, idle_i = np.nonzero(~busy)
    step = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + \
        np.repeat(att_i0, lens)
    gpu = np.concatenate([idle_g, np.repeat(att_gpu, lens)])
    idx = np.concatenate([idle_i, step]) + lo
    pod = np.concatenate([np.full(len(idle_g), -1),
                          np.repeat(np.asarray(att_pod, dtype=np.int64), lens)])
    first = np.concatenate([np.zeros(len(idle_g), bool),
                            np.repeat(np.asarray(att_first, dtype=bool), lens)])
    order = np.lexsort((idx, pod, gpu))  # series-contiguous: gpu, pod, then time
    return gpu[order], idx[order], pod[order], first[order]


def _samples(cfg, pods, grids, seg, n_steps) -> pd.DataFrame:
    return pd.concat([df for _, df in metric_frames(cfg, pods, grids, seg, n_steps)],
                     ignore_index=True)


def metric_frames(cfg, pods, grids, seg, n_steps, lo: int = 0, hi: int | None = None):
    """(metric, samples of steps [lo, hi)) per metric, in the samples table's order; the
    string columns are categoricals with the same levels in every frame."""
    nodes, uuids, ns, names = _names(cfg, pods)
    gpu, idx, pod, first = _sample_rows(cfg, pods, n_steps, lo, hi)
    metrics = cfg.metric_names()
    pod_levels = [""] + names
    ns_levels = sorted(set(ns)) + [""]
    ns_of_pod = np.asarray([ns_levels.index(x) for x in ns] + [len(ns_levels) - 1])
    step_ns = int(round(cfg.step_s * 1e9))
    for k, metric in enumerate(metrics):
        if metric == APP_ITERATIONS:
            m = first & (pod >= 0)
            m[m] = np.asarray([pods[q].workload for q in pod[m]]) != "llm-serving"
            m[m] &= np.asarray([pods[q].workload for q in pod[m]]) != "notebook"
            g, i, q = gpu[m], idx[m], pod[m]
            values = _iterations(seg, q, i * cfg.step_s)
        else:
            g, i, q = gpu, idx, pod
            values = grids[METRIC_GRID[metric]][g, i]
        yield metric, pd.DataFrame({
            "ts": pd.to_datetime(cfg.start.value + i.astype(np.int64) * step_ns, unit="ns",
                                 utc=True),
            "node": pd.Categorical.from_codes(g // cfg.gpus_per_node, nodes),
            "gpu": pd.Categorical.from_codes(g % cfg.gpus_per_node,
                                             [str(x) for x in range(cfg.gpus_per_node)]),
            "uuid": pd.Categorical.from_codes(g, uuids),
            "namespace": pd.Categorical.from_codes(ns_of_pod[q], ns_levels),  # q=-1: ""
            "pod": pd.Categorical.from_codes(q + 1, pod_levels),
            "metric": pd.Categorical.from_codes(np.full(len(g), k), metrics),
            "value": np.asarray(values, dtype=float),
        })


def _iterations(seg, pod: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Optimizer steps completed by `pod` at time `t` (the app's progress counter)."""
    if len(pod) == 0:
        return np.zeros(0)
    # keys (pod, t) sort as pod * span + (t - lo) once span exceeds the time range
    lo = min(seg.t0.min(), t.min())
    span = max(seg.t1.max(), t.max()) - lo + 1.0
    key = seg.pod * span + (seg.t0 - lo)
    k = np.clip(np.searchsorted(key, pod * span + (t - lo), side="right") - 1, 0, len(key) - 1)
    done = seg.iters0[k] + seg.rate[k] * np.clip(t - seg.t0[k], 0, seg.t1[k] - seg.t0[k])
    return np.floor(done)


def _queues(cfg: SimConfig, pods: list, n_steps: int) -> pd.DataFrame:
    t = np.arange(n_steps) * cfg.step_s
    frames = []
    for q in cfg.queues:
        mine = [p for p in pods if p.queue == q]
        created = np.asarray([p.created for p in mine])
        started = np.asarray([p.started for p in mine])
        gpus = np.asarray([p.num_gpu * p.milli / 1000 for p in mine])
        n_pend = np.zeros(n_steps)
        g_pend = np.zeros(n_steps)
        if mine:
            pend = lambda x, w: (np.searchsorted(np.sort(x), t, side="right"),  # noqa: E731
                                 np.concatenate([[0], np.cumsum(w[np.argsort(x)])]))
            c, cw = pend(created, gpus)
            # a pod stops pending when it starts, or when it is deleted while pending
            s_fin = np.fmin(started, np.asarray([p.finished for p in mine]))
            s_fin = np.where(np.isnan(s_fin), np.inf, s_fin)
            s, sw = pend(s_fin, gpus)
            n_pend, g_pend = c - s, cw[c] - sw[s]
        for metric, v in (("kueue_pending_workloads", n_pend),
                          ("kueue_cluster_queue_resource_pending", np.round(g_pend, 3))):
            frames.append(pd.DataFrame({"ts": cfg.start + pd.to_timedelta(t, unit="s"),
                                        "queue": q, "metric": metric, "value": v}))
    return conform(pd.concat(frames, ignore_index=True), QUEUE_SAMPLE_COLUMNS)


def simulate(cfg: SimConfig) -> dict:
    """Everything but the sample rows: pods, segments, health and the metric grids."""
    cfg.metric_names()  # validates `metrics` before any work
    spec = gpu_spec(cfg.gpu_model)
    root = np.random.SeedSequence(cfg.seed)
    r_arr, r_sim, r_seg, r_health, r_noise = (np.random.default_rng(s) for s in root.spawn(5))
    arrivals = generate_arrivals(cfg, r_arr)
    sim = ClusterSim(cfg, spec, r_sim)
    sim.run(arrivals)
    pods = sim.pods
    busy = diurnal_busy_prob(cfg, load_seed("arrivals.json")["profiles"][0]["hour_of_day_share"])
    seg, phase_rows = build_segments(cfg, spec, pods, r_seg, busy)
    n_steps = int(np.floor(cfg.duration_s / cfg.step_s + 1e-9))
    health = draw_health(cfg, r_health)
    hg = {k: np.zeros((cfg.n_gpus, n_steps)) for k in ("sbe", "dbe", "xid", "temp_offset")}
    hg["hw_slowdown"] = np.zeros((cfg.n_gpus, n_steps), dtype=bool)
    apply_health(health, n_steps, cfg.step_s, r_health, hg)
    grids = metric_grids(cfg, spec, pods, seg, hg, r_noise)
    return {"spec": spec, "sim": sim, "pods": pods, "seg": seg, "phase_rows": phase_rows,
            "n_steps": n_steps, "health": health, "grids": grids}


def pod_tables(cfg: SimConfig, pods: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pods table and the pod labels of the pods visible in the window."""
    nodes, uuids, ns, names = _names(cfg, pods)
    visible = [p for p in pods if p.created < cfg.duration_s and
               (np.isnan(p.finished) or p.finished >= 0)]
    ts = lambda s: cfg.start + pd.to_timedelta(s, unit="s")  # noqa: E731
    pod_df = pd.DataFrame({
        "namespace": [ns[p.pid] for p in visible], "pod": [names[p.pid] for p in visible],
        "node": [nodes[p.node] if p.node >= 0 else "" for p in visible],
        "queue": [p.queue for p in visible], "priority": [p.priority for p in visible],
        "workload": [p.workload for p in visible],
        "gpu_request": [p.num_gpu * p.milli / 1000 for p in visible],
        "created": ts(np.asarray([p.created for p in visible], dtype=float)),
        "started": ts(np.asarray([p.started for p in visible], dtype=float)),
        "finished": ts(np.asarray([p.finished for p in visible], dtype=float)),
    })
    labels = pd.DataFrame(
        [(ns[p.pid], names[p.pid], k, v) for p in visible for k, v in (
            ("app.kubernetes.io/name", p.workload),
            ("foresight.io/job-template", f"{p.workload}-template"),
            ("image", f"registry.example/{p.workload}:1.0"),
            ("kueue.x-k8s.io/queue-name", p.queue),
            ("gpu-fraction", f"{p.milli / 1000:g}"),
            (BATCH_LABEL, f"{p.feats['batch_size']:g}"))],
        columns=["namespace", "pod", "label", "value"])
    return conform(pod_df, POD_COLUMNS), labels


def generate_cluster(config: SimConfig) -> SyntheticCluster:
    """Generate a deterministic synthetic history of a GPU cluster (see simulator/README)."""
    cfg = config
    st = simulate(cfg)
    pods, n_steps = st["pods"], st["n_steps"]
    samples = conform(_samples(cfg, pods, st["grids"], st["seg"], n_steps), GPU_SAMPLE_COLUMNS)
    nodes, uuids, ns, names = _names(cfg, pods)
    pod_df, labels = pod_tables(cfg, pods)
    truth = build_truth(cfg, st["spec"], st["sim"], st["phase_rows"], st["health"], nodes, ns,
                        names)
    return SyntheticCluster(config=cfg, samples=samples, pods=pod_df, pod_labels=labels,
                            queues=_queues(cfg, pods, n_steps), truth=truth)
