"""New-job peak-framebuffer prediction on unseen jobs (later seed) and unseen workloads (LOWO).

    nice .venv/bin/python bench/fingerprint_newjob.py
Train: fingerprints + predictor from seed 1 (3 days); test: every run of seed 2 that got past
start-up on an exclusive GPU (a shared GPU's framebuffer is the sum of its pods). Unseen
workloads: leave one workload out of seed 1's training runs, predict seed 2's runs of it with
the key hidden. Baseline: the declared request (requested GPUs x the GPU's framebuffer).
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from fingerprint_common import RESULTS, header, table  # noqa: E402
from features.segments import wide_series  # noqa: E402
from forecaster.fingerprint import FingerprintModel, job_table, peak_runs  # noqa: E402
from forecaster.fingerprint_predict import NewJobPredictor  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402
from simulator.workloads import gpu_spec  # noqa: E402

M = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
     "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_FB_USED",
     "DCGM_FI_DEV_POWER_USAGE")


def runs(seed: int) -> pd.DataFrame:
    c = generate_cluster(SimConfig(seed=seed, days=3, step_s=30, metrics=M, app_counter=False))
    m = FingerprintModel().fit(wide_series(c.samples), c.pods, c.pod_labels)
    return job_table(c.pods, c.pod_labels).merge(peak_runs(m.runs_), on=["namespace", "pod"])


def score(name: str, up: np.ndarray, act: np.ndarray) -> dict:
    return {"predictor": name, "runs": len(act), "coverage": float(np.mean(up >= act)),
            "mean_over_reservation": float(np.mean((up - act) / act)),
            "mean_over_when_covered": float(np.mean(((up - act) / act)[up >= act]))}


def main() -> None:
    t0 = time.time()
    tr, te = runs(1), runs(2)
    fb_gpu = gpu_spec("A40")["fb_mib"]
    act = te["peak_fb_mib"].to_numpy()
    rows = []
    p = NewJobPredictor(coverage=0.95).fit(tr)
    pr = p.predict(te)
    rows.append(score("key match (workload fingerprint + conformal)",
                      pr["peak_fb_upper_mib"].to_numpy(), act))
    # per GPU (peaks are per GPU): a whole GPU's framebuffer, or the requested fraction of it
    rows.append(score("baseline: declared request (min(GPUs, 1) x 46068 MiB per GPU)",
                      fb_gpu * np.minimum(te["gpu_request"].to_numpy(), 1.0), act))
    rows.append(score("baseline: max peak of the workload's training runs",
                      te["workload"].map(tr.groupby("workload")["peak_fb_mib"].max())
                      .to_numpy(), act))
    lowo_up, lowo_act, per = [], [], []
    for w in sorted(tr["workload"].unique()):
        q = NewJobPredictor(coverage=0.95).fit(tr[tr["workload"] != w])
        t = te[te["workload"] == w]
        if t.empty:
            continue
        up = q.predict(t.assign(workload="(hidden)"))["peak_fb_upper_mib"].to_numpy()
        lowo_up.append(up), lowo_act.append(t["peak_fb_mib"].to_numpy())
        per.append(score(w, up, t["peak_fb_mib"].to_numpy()))
    rows.append(score("key hidden: LightGBM on metadata (leave one workload out)",
                      np.concatenate(lowo_up), np.concatenate(lowo_act)))
    # the floor set by the generator: per-pod framebuffer ~ class mean x lognormal(0, 0.15)
    z = 1.6449
    floor = float(np.exp(0.15 * z + 0.15 ** 2 / 2) - 1)
    by_w = pd.DataFrame({"workload": te["workload"], "cov": pr["peak_fb_upper_mib"] >= act,
                         "over": pr["peak_fb_upper_mib"] / act - 1}).groupby("workload").agg(
        runs=("cov", "size"), coverage=("cov", "mean"), mean_over_reservation=("over", "mean"))
    lines = header("New-job peak framebuffer: calibrated upper quantile (target 95 %)",
                   "nice .venv/bin/python bench/fingerprint_newjob.py", [
        f"train: seed 1, 3 days, 30 s ({len(tr)} runs); test: seed 2 ({len(te)} runs past "
        "start-up on exclusive GPUs); over-reservation = (upper - actual peak) / actual peak",
        f"pooled conformal log-quantile (key path): {p.q_pooled_:.3f}; model path: "
        f"{p.q_model_:.3f}", f"wall {time.time() - t0:.0f} s"])
    lines += table(rows)
    lines += ["", "Key path per workload:", ""] + table(by_w.reset_index().to_dict("records"))
    lines += ["", "Leave-one-workload-out per held-out workload:", ""] + table(per)
    lines += ["", "## Reading", "",
              "- The target (>= 95 % coverage with < 15 % mean over-reservation) is **not met**."
              " The generator draws each pod's framebuffer as its class mean times an "
              "independent lognormal(0, 0.15) jitter (simulator/workloads.py solo_features) "
              "that no pre-start metadata carries. Even knowing the class mean exactly, a 95 % "
              f"upper bound over-reserves by E[exp(0.15(1.645 - Z))] - 1 = {floor:.1%} on "
              "average: the 15 % target is below what this generator allows before the job "
              "starts.",
              "- The key path is at that floor (its over-reservation is close to the bound "
              "above) and replaces the declared request, which over-reserves several-fold.",
              "- With the key hidden, metadata (image, namespace, queue, requested GPUs) does "
              "not identify an unseen workload's footprint; the workload-grouped conformal "
              "quantile keeps coverage at the price of a wide bound."]
    (RESULTS / "fingerprint_newjob.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
