"""Derive the simulator's small seed files (data/seeds/*.json) from the real traces.

Run once by a developer who has ../shared/traces (a fresh clone does not; the generator reads
only data/seeds):

    python -m simulator.derive_seeds [--traces ../shared/traces] [--out data/seeds]

Every seed file carries a `provenance` block: the source file(s) and how each number was
computed, so the generator's magnitudes can be traced back to a published measurement.
"""
from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
DEFAULT_OUT = REPO / "data" / "seeds"
QUANTILES = [round(q, 2) for q in np.linspace(0.0, 1.0, 21)]

# Training-set sizes (samples per epoch) of the Zeus benchmark datasets, from the datasets'
# own documentation: CIFAR-100 train 50,000; ImageNet-1k train 1,281,167; SQuAD v1.1 train
# 87,599; LibriSpeech 960 h train 281,241 utterances; MovieLens-1M 1,000,209 ratings;
# Sentiment140 1,600,000 tweets. Used to turn Zeus' time_per_epoch into an iteration period.
DATASET_SIZE = {"cifar100": 50_000, "imagenet": 1_281_167, "squad": 87_599,
                "librispeech": 281_241, "movielens-1m": 1_000_209, "sentiment140": 1_600_000}


def _write(out: Path, name: str, payload: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def derive_power(traces: Path) -> dict:
    """Zeus: compute-phase power as a fraction of the power limit, and iteration periods.

    For each GPU type and network, take the rows at the highest power limit in the file (the
    board's default limit, i.e. unconstrained), and report median(average_power / power_limit)
    over batch sizes and optimizers, plus the iteration period at the median batch size:
    time_per_epoch / ceil(dataset_size / batch_size).
    """
    gpus: dict[str, dict] = {}
    for path in sorted(glob.glob(str(traces / "zeus-power" / "summary_power_*.csv"))):
        gpu = Path(path).stem.replace("summary_power_", "")
        z = pd.read_csv(path)
        top = z[z.power_limit == z.power_limit.max()]
        nets = {}
        for (dataset, net), grp in top.groupby(["dataset", "network"]):
            frac = float(np.median(grp.average_power / grp.power_limit))
            bs = float(np.median(grp.batch_size))
            row = grp.iloc[(grp.batch_size - bs).abs().argsort().iloc[0]]
            iters = int(np.ceil(DATASET_SIZE[dataset] / row.batch_size))
            nets[f"{net}/{dataset}"] = {
                "power_fraction": round(frac, 4),
                "iteration_period_s": round(float(row.time_per_epoch) / iters, 5),
                "batch_size": int(row.batch_size),
            }
        gpus[gpu] = {"power_limit_w": float(z.power_limit.max()), "networks": nets}
    return {
        "provenance": {
            "source": "zeus-power/summary_power_<gpu>.csv (ml-energy/zeus @ 75a8b939, NSDI'23)",
            "method": "rows at the file's highest power_limit; power_fraction = median of "
                      "average_power/power_limit per (network, dataset); iteration_period_s = "
                      "time_per_epoch / ceil(dataset_size / batch_size) at the median batch size; "
                      "dataset sizes from the datasets' documentation (see derive_seeds.py)",
        },
        "gpus": gpus,
    }


def derive_gavel(traces: Path) -> dict:
    """Gavel: distribution of co-located normalized speeds of single-GPU (scale 1) pairs."""
    g = pd.read_csv(traces / "gavel-colocation" / "gavel_pairs_flat.csv")
    g = g[(g.scale_a == 1) & (g.scale_b == 1) & (g.norm_speed_a > 0) & (g.norm_speed_b > 0)]
    per_gpu = {}
    for (source, gpu), grp in g.groupby(["source", "gpu"]):
        speeds = np.concatenate([grp.norm_speed_a.to_numpy(), grp.norm_speed_b.to_numpy()])
        per_gpu[f"{source}/{gpu}"] = {"n": int(len(speeds)), "quantiles": [
            round(float(v), 4) for v in np.quantile(speeds, QUANTILES)]}
    ref = per_gpu["physical/v100"]
    return {
        "provenance": {
            "source": "gavel-colocation/gavel_pairs_flat.csv (stanford-futuredata/gavel @ c4fa4009)",
            "method": "pairs with scale_a == scale_b == 1 and both throughputs > 0; norm_speed_a "
                      "and norm_speed_b pooled; quantiles at 0, 0.05, ..., 1. `reference` is "
                      "physical/v100 (measured on real V100s with space sharing, i.e. MPS-like)",
        },
        "quantile_levels": QUANTILES,
        "reference": "physical/v100",
        "reference_quantiles": ref["quantiles"],
        "per_gpu": per_gpu,
    }


def derive_arrivals(traces: Path, n_profiles: int = 6) -> dict:
    """Helios Earth: hour-of-day and day-of-week shares of new GPU demand per VC, burstiness.

    New GPU demand per minute = positive increments of (running_gpu_num + pending_gpu_num):
    an approximation (a departure in the same minute hides part of an arrival).
    """
    profiles = []
    for path in sorted(glob.glob(str(traces / "helios-earth" / "Earth_vcs" / "*.csv"))):
        v = pd.read_csv(path, parse_dates=["time"])
        demand = (v.running_gpu_num + v.pending_gpu_num).diff().clip(lower=0).fillna(0)
        hourly = demand.groupby(v.time.dt.floor("h")).sum()
        if hourly.sum() <= 0:
            continue
        hod = hourly.groupby(hourly.index.hour).sum().reindex(range(24), fill_value=0)
        dow = hourly.groupby(hourly.index.dayofweek).sum().reindex(range(7), fill_value=0)
        # Burstiness: hours whose demand exceeds 4x the mean of its hour-of-day slot.
        expected = hourly.index.hour.map(hourly.groupby(hourly.index.hour).mean()).to_numpy()
        burst = hourly.to_numpy() > 4 * np.maximum(expected, 1e-9)
        profiles.append({
            "vc": Path(path).stem, "total_new_gpus": float(hourly.sum()),
            "hour_of_day_share": [round(float(x), 5) for x in hod / hod.sum()],
            "day_of_week_share": [round(float(x), 5) for x in dow / dow.sum()],
            "burst_hour_fraction": round(float(burst.mean()), 5),
            "burst_share_of_demand": round(float(hourly[burst].sum() / hourly.sum()), 5),
            "dispersion_index": round(float(hourly.var() / max(hourly.mean(), 1e-9)), 3),
        })
    profiles.sort(key=lambda p: -p["total_new_gpus"])
    return {
        "provenance": {
            "source": "helios-earth/Earth_vcs/<vc>.csv (S-Lab-System-Group/HeliosArtifact @ "
                      "bdaae109), May 2020, one row a minute, local time as published",
            "method": "new GPU demand = positive minute-to-minute increments of running_gpu_num "
                      "+ pending_gpu_num, summed per hour; shares per hour of day and day of "
                      "week (0 = Monday); burst hour = demand > 4x its hour-of-day mean; VCs "
                      f"sorted by total demand, top {n_profiles} kept",
        },
        "profiles": profiles[:n_profiles],
    }


def derive_jobs(traces: Path) -> dict:
    """openb pod list: GPU counts, fractional shares, durations; Helios cluster summary."""
    o = pd.read_csv(traces / "openb-2023" / "csv" / "openb_pod_list_default.csv")
    o = o[o.num_gpu > 0]
    counts = o.num_gpu.value_counts(normalize=True).sort_index()
    single = o[o.num_gpu == 1]
    frac = single[single.gpu_milli < 1000]
    dur = (o.deletion_time - o.creation_time).to_numpy(dtype=float)
    dur = dur[dur > 0]
    qos = o.qos.value_counts(normalize=True)
    helios = pd.read_csv(traces / "helios-earth" / "helios_cluster_summary.csv").set_index("id")
    return {
        "provenance": {
            "source": "openb-2023/csv/openb_pod_list_default.csv (alibaba/clusterdata @ "
                      "7a6c496e); helios-earth/helios_cluster_summary.csv",
            "method": "GPU pods (num_gpu > 0): share of each num_gpu; share of single-GPU pods "
                      "with gpu_milli < 1000 and quantiles of that gpu_milli; quantiles of "
                      "deletion_time - creation_time (s, > 0); qos shares; Helios Earth GPU-job "
                      "mean/median run time and mean GPUs per job, as published",
        },
        "quantile_levels": QUANTILES,
        "num_gpu_share": {str(int(k)): round(float(v), 5) for k, v in counts.items()},
        "fractional_share_of_single": round(float(len(frac) / len(single)), 5),
        "gpu_milli_quantiles": [float(x) for x in np.quantile(frac.gpu_milli, QUANTILES)],
        "duration_s_quantiles": [float(x) for x in np.quantile(dur, QUANTILES)],
        "qos_share": {str(k): round(float(v), 5) for k, v in qos.items()},
        "helios_earth": {k: float(helios.loc["Earth", k]) for k in
                         ["avg_run_time_gpu", "med_run_time_gpu", "avg_gpu_num"]},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.traces.is_dir():
        raise SystemExit(f"traces folder not found: {args.traces}")
    _write(args.out, "power.json", derive_power(args.traces))
    _write(args.out, "gavel_speeds.json", derive_gavel(args.traces))
    _write(args.out, "arrivals.json", derive_arrivals(args.traces))
    _write(args.out, "jobs.json", derive_jobs(args.traces))
    # The interference calibration needs the workload catalogue: done by its own module.
    from simulator.calibrate import calibrate_interference
    _write(args.out, "interference.json", calibrate_interference(args.out))
    print(f"seed files written to {args.out}")


if __name__ == "__main__":
    main()
