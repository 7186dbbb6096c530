"""Ground-truth tables written beside the synthetic data, for scoring later models."""
from __future__ import annotations

import numpy as np
import pandas as pd

from features.schema import LONG_COLUMNS, conform
from simulator.config import SimConfig
from simulator.workloads import CATALOGUE, iteration_period

SOLO = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "pcie", "fb_used_mib",
        "power_dyn_w")


def _ts(cfg: SimConfig, s) -> pd.DatetimeIndex:
    return cfg.start + pd.to_timedelta(np.asarray(s, dtype=float), unit="s")


def _mean_speed(pods: list, pid: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Time-weighted mean speed of each pod over [a, b) from its speed segments."""
    segs = [(p.pid, t0, t1, s) for p in pods for t0, t1, s in p.speed_segments]
    pod_, t0s, t1s, sps = (np.asarray(x, dtype=float) for x in zip(*segs))
    lo = min(t0s.min(), a.min())
    span = max(t1s.max(), b.max()) - lo + 1.0  # keys (pod, t) sort as pod * span + (t - lo)
    keys = pod_ * span + (t0s - lo)
    cum = np.concatenate([[0.0], np.cumsum((t1s - t0s) * sps)])

    # integral from the first segment of all: differences cancel the other pods' share
    def integral(t):
        k = np.searchsorted(keys, pid * span + (t - lo), side="right") - 1
        return cum[k] + sps[k] * (t - t0s[k])
    return (integral(b) - integral(a)) / np.maximum(b - a, 1e-9)


def build_truth(cfg: SimConfig, spec: dict, sim, phase_rows: list, health: pd.DataFrame,
                nodes: list, ns: list, names: list) -> dict:
    pods, end = sim.pods, cfg.duration_s
    out: dict[str, pd.DataFrame] = {}

    # phases: one row per (pod phase, GPU), clipped to the window
    ph = pd.DataFrame(phase_rows, columns=["pid", "start", "end", "phase"])
    ph = ph[(ph.end > 0) & (ph.start < end)]
    ph = ph.assign(start=ph.start.clip(lower=0), end=ph.end.clip(upper=end))
    ph["gpu_index"] = [pods[q].gpus for q in ph.pid]
    ph = ph.explode("gpu_index")
    g = ph.gpu_index.to_numpy(dtype=int)
    out["phases"] = pd.DataFrame({
        "namespace": [ns[q] for q in ph.pid], "pod": [names[q] for q in ph.pid],
        "node": [nodes[x // cfg.gpus_per_node] for x in g],
        "gpu": [str(x % cfg.gpus_per_node) for x in g],
        "start": _ts(cfg, ph.start), "end": _ts(cfg, ph.end), "phase": ph.phase.to_numpy()})

    # interference: one row per (pod, partner) co-location episode
    ep = pd.DataFrame(sim.episodes, columns=["a", "b", "sharing", "start", "end"])
    ep = ep[(ep.end > 0) & (ep.start < end)].reset_index(drop=True)
    ep = ep.assign(start=ep.start.clip(lower=0), end=ep.end.clip(upper=end))
    a, b = ep.a.to_numpy(dtype=np.int64), ep.b.to_numpy(dtype=np.int64)
    speed = _mean_speed(pods, a, ep.start.to_numpy(), ep.end.to_numpy()) if len(ep) else \
        np.zeros(0)
    # phase-averaged solo features: the inputs of the interference function
    feats = {k: np.asarray([p.ifeats[k] for p in pods], dtype=float) for k in SOLO}
    pair = np.ones(len(ep))
    for mode in ("timeslice", "mps", "node"):
        m = (ep.sharing == mode).to_numpy()
        if m.any():  # the simulator's own pair function (Gavel- or H200-calibrated)
            pair[m] = sim.pair_speeds(a[m], b[m], mode)
    inter = pd.DataFrame({
        "namespace": [ns[q] for q in a], "pod": [names[q] for q in a],
        "partner_namespace": [ns[q] for q in b], "partner_pod": [names[q] for q in b],
        "sharing": ep.sharing.to_numpy(), "start": _ts(cfg, ep.start), "end": _ts(cfg, ep.end),
        "speed": np.round(speed, 6), "pair_speed": np.round(pair, 6),
        "a_workload": [pods[q].workload for q in a], "b_workload": [pods[q].workload for q in b]})
    for k in SOLO:
        inter[f"a_{k}"], inter[f"b_{k}"] = feats[k][a], feats[k][b]
    out["interference"] = inter

    # demand: GPUs requested by pods created in each bin, per queue (Nixtla long)
    bins = pd.date_range(cfg.start, cfg.start + pd.Timedelta(seconds=end), freq=cfg.demand_bin,
                         inclusive="left")
    created = [(p.queue, p.created, p.num_gpu * p.milli / 1000) for p in pods
               if 0 <= p.created < end]
    dem = pd.DataFrame(created, columns=["unique_id", "t", "y"])
    dem["ds"] = _ts(cfg, dem.t).floor(cfg.demand_bin)
    dem = dem.groupby(["unique_id", "ds"]).y.sum()
    full = pd.MultiIndex.from_product([list(cfg.queues), bins], names=["unique_id", "ds"])
    dem = dem.reindex(full, fill_value=0.0).reset_index()
    # features.schema.conform treats unique_id as numeric (it is not in _STRING_COLUMNS):
    # conform the rest and keep the queue names as strings.
    long = conform(dem.assign(unique_id=0), LONG_COLUMNS)
    long["unique_id"] = dem.unique_id.astype("string").to_numpy()
    out["demand"] = long

    gi = health.gpu_index.to_numpy(dtype=int)
    out["health"] = pd.DataFrame({
        "node": [nodes[x // cfg.gpus_per_node] for x in gi],
        "gpu": [str(x % cfg.gpus_per_node) for x in gi],
        "start": _ts(cfg, health.start), "end": _ts(cfg, health.end),
        "condition": health.condition.to_numpy()})

    out["iteration_period"] = pd.DataFrame({
        "namespace": ns, "pod": names, "workload": [p.workload for p in pods],
        "seconds": [iteration_period(CATALOGUE[p.workload], spec) for p in pods]})

    out["pod_solo"] = pd.DataFrame({"namespace": ns, "pod": names,
                                    "workload": [p.workload for p in pods],
                                    **{k: feats[k] for k in SOLO}})

    rows = []
    for w in CATALOGUE.values():
        rows.append({
            "workload": w.name, "kind": w.kind, "sm_active": w.sm, "sm_occupancy": w.occ,
            "tensor_active": w.tensor, "dram_active": w.dram, "pcie": w.pcie,
            "fb_peak_mib": min(w.fb_mib, 0.92 * spec["fb_mib"]),
            "compute_power_w": spec["power_fraction"][w.zeus] * spec["tdp_w"],
            "iteration_period_s": iteration_period(w, spec), "gpu_model": spec["name"]})
    out["workloads"] = pd.DataFrame(rows)
    return out
