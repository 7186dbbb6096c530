"""A pair table with measured solo fingerprints, built from the synthetic generator.

What the interference done-when asks for: one row per GPU co-location (time-slicing or MPS;
node-level neighbours only as a separate, flagged table) where

- each side's features are its *measured solo fingerprint*: every pod of the simulated cluster
  is re-run alone on a GPU of its own for `solo_hours` (its own phase programme, through the
  generator's telemetry model with its sampling noise: simulator.telemetry.metric_grids), and
  the fingerprint is the mean of each dcgm metric over that solo run (the peak for the
  framebuffer). Why the mean over the whole run and not the busy steps: a partner feels the
  job's average activity (a notebook computes ~15% of the time), and that average is what the
  simulator's interference function reads (`mean_features`). The fingerprint is measured, so
  it differs from the truth's inputs by phase-sampling and metric noise;
- the targets are what a throughput counter would report: the simulator's true pair speed
  (`truth["interference"].pair_speed`, the speed of the pair alone on the GPU) plus Gaussian
  noise of sd `noise_sd` (default 0.012: the progress-counter error of the telemetry
  builder, median |error| 0.008, see bench/results/interference_synthetic.md);
- episodes shorter than `min_seconds` are dropped (a counter cannot time them); each pair of
  pods contributes one row per mode, from its longest episode: the truth is a function of the
  two fingerprints, so repeating a pair would only weight it by how long it stayed together.

The true speeds come back in a separate frame (a_speed_true, b_speed_true) for scoring.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from simulator import SimConfig, generate_cluster
from simulator.seeds import load_seed
from simulator.segments import build_segments, diurnal_busy_prob
from simulator.telemetry import metric_grids
from simulator.workloads import ACTIVITY, CATALOGUE, gpu_spec

#: Solo metric grid -> (pair-table feature, scale, reduction over the solo run).
FINGERPRINT = {"util": ("gpu_util", 1.0, "mean"), "sm": ("sm_active", 1.0, "mean"),
               "occ": ("sm_occupancy", 1.0, "mean"), "tensor": ("tensor_active", 1.0, "mean"),
               "dram": ("dram_active", 1.0, "mean"), "copy": ("mem_copy_util", 1.0, "mean"),
               "rx": ("pcie_rx_mbps", 1e-6, "mean"), "tx": ("pcie_tx_mbps", 1e-6, "mean"),
               "power": ("power_w", 1.0, "mean"), "fb": ("fb_used_mib", 1.0, "max")}


def solo_fingerprints(pod_solo: pd.DataFrame, cfg: SimConfig, hours: float, seed: int,
                      chunk: int = 256) -> pd.DataFrame:
    """Fingerprint of every pod from a simulated solo run (index: namespace/pod)."""
    spec = gpu_spec(cfg.gpu_model)
    busy = diurnal_busy_prob(cfg, load_seed("arrivals.json")["profiles"][0]["hour_of_day_share"])
    rng = np.random.default_rng(seed)
    out = []
    for lo in range(0, len(pod_solo), chunk):
        part = pod_solo.iloc[lo:lo + chunk]
        pods = []
        for i, r in enumerate(part.itertuples(index=False)):
            duty = CATALOGUE[r.workload].duty
            # the truth keeps phase-averaged features (steady level x class duty): undo the
            # average to get the steady-compute levels the telemetry model plays back
            feats = {k: getattr(r, k) / duty if k in ACTIVITY else getattr(r, k)
                     for k in ("sm_active", "sm_occupancy", "tensor_active", "dram_active",
                               "pcie", "fb_used_mib", "power_dyn_w")}
            pods.append(SimpleNamespace(pid=i, workload=r.workload, gpus=[i], feats=feats,
                                        started=0.0, finished=np.nan, speed_segments=[]))
        scfg = SimConfig(seed=seed, start=cfg.start, days=hours / 24, step_s=cfg.step_s,
                         nodes=len(pods), gpus_per_node=1, gpu_model=cfg.gpu_model)
        seg, _ = build_segments(scfg, spec, pods, rng, busy)
        n_steps = int(np.floor(scfg.duration_s / scfg.step_s + 1e-9))
        hg = {k: np.zeros((len(pods), n_steps)) for k in ("sbe", "dbe", "xid", "temp_offset")}
        hg["hw_slowdown"] = np.zeros((len(pods), n_steps), dtype=bool)
        grids = metric_grids(scfg, spec, pods, seg, hg, rng)
        fp = {name: getattr(grids[g], how)(axis=1) * scale
              for g, (name, scale, how) in FINGERPRINT.items()}
        out.append(pd.DataFrame(fp, index=part["namespace"] + "/" + part["pod"]))
    return pd.concat(out)


def solo_pair_table(seed: int, days: float, nodes: int, *, solo_hours: float = 12.0,
                    noise_sd: float = 0.012, min_seconds: float = 120.0,
                    modes: tuple[str, ...] = ("timeslice", "mps"),
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pairs, truth) of one simulated cluster; see the module docstring."""
    cfg = SimConfig(seed=seed, days=days, nodes=nodes, gpus_per_node=4, load=1.0,
                    mps_node_fraction=0.5, metrics=("DCGM_FI_DEV_GPU_UTIL",), app_counter=False)
    c = generate_cluster(cfg)
    tr = c.truth["interference"]
    tr = tr.assign(k=tr["namespace"] + "/" + tr["pod"],
                   pk=tr["partner_namespace"] + "/" + tr["partner_pod"],
                   dur=(tr["end"] - tr["start"]).dt.total_seconds())
    tr = tr[tr["sharing"].isin(modes)]
    fp = solo_fingerprints(c.truth["pod_solo"], cfg, solo_hours, seed + 10_000)
    # the reverse direction of each pair: the same function of the same two pods
    back = tr.drop_duplicates(["k", "pk", "sharing"]).set_index(["k", "pk", "sharing"])
    tr = tr[(tr["k"] < tr["pk"]) & (tr["dur"] >= min_seconds)]
    tr = tr.sort_values("dur", ascending=False).drop_duplicates(["k", "pk", "sharing"])
    tr = tr.sort_values(["start", "k", "pk"]).reset_index(drop=True)
    rev = back["pair_speed"].reindex(pd.MultiIndex.from_arrays([tr["pk"], tr["k"],
                                                                tr["sharing"]]))
    truth = pd.DataFrame({"a_speed_true": tr["pair_speed"].to_numpy(),
                          "b_speed_true": rev.to_numpy()})
    rng = np.random.default_rng(seed + 20_000)
    pairs = pd.DataFrame({"a_workload": tr["a_workload"].to_numpy(),
                          "b_workload": tr["b_workload"].to_numpy(),
                          "sharing": tr["sharing"].to_numpy(), "gpu_model": cfg.gpu_model})
    for side, key in (("a", "k"), ("b", "pk")):
        f = fp.reindex(tr[key].to_numpy())
        for col in fp.columns:
            pairs[f"{side}_{col}"] = f[col].to_numpy()
        y = truth[f"{side}_speed_true"].to_numpy()
        pairs[f"{side}_speed"] = np.clip(y + rng.normal(0.0, noise_sd, len(y)), 0.01, 2.0)
    return pairs, truth
