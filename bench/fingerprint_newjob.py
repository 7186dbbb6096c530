"""New-job peak-framebuffer prediction on unseen jobs (later seeds) and unseen workloads (LOWO).

    nice .venv/bin/python bench/fingerprint_newjob.py
Train: fingerprints + predictor from seeds 0 and 1 (2 x 3 days); the conformal quantiles come
from the training runs only (leave one run out). Test: every run of seeds 12-16 (different pods, batch
sizes and residuals) that got past start-up on an exclusive GPU (a shared GPU's framebuffer
is the sum of its pods); ~1,000 runs, so the coverage is known to about +-0.7 %. Unseen workloads: leave one workload out of the
training runs, predict the first test seed's runs of it with the key hidden. Baseline: the declared
request (requested GPUs x the GPU's framebuffer).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from fingerprint_common import RESULTS, header, table  # noqa: E402
from features.segments import wide_series  # noqa: E402
from forecaster.fingerprint.model import FingerprintModel, job_table, peak_runs  # noqa: E402
from forecaster.fingerprint.predict import NewJobPredictor  # noqa: E402
from simulator import SimConfig, generate_cluster  # noqa: E402
from simulator.workloads import FB_RESIDUAL_SIGMA, gpu_spec  # noqa: E402

M = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
     "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_FB_USED",
     "DCGM_FI_DEV_POWER_USAGE")
Z95 = 1.6449
TRAIN_SEEDS = (0, 1)
# Seeds 2-11 were looked at while the predictor was built (bench/fingerprint_newjob_dev.py:
# one training seed under-covered there); 12-16 were first run with the settings fixed.
TEST_SEEDS = (12, 13, 14, 15, 16)


def runs(seed: int) -> pd.DataFrame:
    c = generate_cluster(SimConfig(seed=seed, days=3, step_s=30, metrics=M, app_counter=False))
    m = FingerprintModel().fit(wide_series(c.samples), c.pods, c.pod_labels)
    return job_table(c.pods, c.pod_labels).merge(peak_runs(m.runs_), on=["namespace", "pod"])


def score(name: str, up: np.ndarray, act: np.ndarray) -> dict:
    return {"predictor": name, "runs": len(act), "coverage": float(np.mean(up >= act)),
            "mean_over_reservation": float(np.mean((up - act) / act)),
            "mean_over_when_covered": float(np.mean(((up - act) / act)[up >= act]))}


def floor(sigma: float) -> float:
    """Mean over-reservation of the exact 95 % bound when log peak = known + N(0, sigma)."""
    return float(np.exp(sigma * Z95 + sigma ** 2 / 2) - 1)


def main(test_seeds: tuple = TEST_SEEDS, out: str = "fingerprint_newjob.md") -> None:
    t0 = time.time()
    tr = pd.concat([runs(s) for s in TRAIN_SEEDS], ignore_index=True)
    tests = {s: runs(s) for s in test_seeds}
    fb_gpu = gpu_spec("A40")["fb_mib"]
    p = NewJobPredictor(coverage=0.95, confidence=0.95).fit(tr)
    p_avg = NewJobPredictor(coverage=0.95, confidence=None).fit(tr)
    allt = pd.concat(tests.values(), ignore_index=True)
    act = allt["peak_fb_mib"].to_numpy()
    rows, by_w = [], []
    for s, te in tests.items():
        up = p.predict(te)["peak_fb_upper_mib"].to_numpy()
        a = te["peak_fb_mib"].to_numpy()
        rows.append(score(f"seed {s}: key + batch size", up, a))
        by_w.append(pd.DataFrame({"workload": te["workload"], "cov": up >= a, "over": up / a - 1}))
    main_row = score(f"seeds {test_seeds[0]}-{test_seeds[-1]}: key + batch-size label (memory "
                     "model + conformal, 95 % confidence)",
                     p.predict(allt)["peak_fb_upper_mib"].to_numpy(), act)
    rows.append(main_row)
    rows.append(score("all: same, average-case conformal (no confidence margin)",
                      p_avg.predict(allt)["peak_fb_upper_mib"].to_numpy(), act))
    rows.append(score("all: key, batch-size label withheld (the workload's own run peaks, order statistic)",
                      p.predict(allt.drop(columns="batch_size"))["peak_fb_upper_mib"]
                      .to_numpy(), act))
    rows.append(score("all: baseline: declared request (min(GPUs, 1) x 46068 MiB)",
                      fb_gpu * np.minimum(allt["gpu_request"].to_numpy(), 1.0), act))
    rows.append(score("all: baseline: max peak of the workload's training runs",
                      allt["workload"].map(tr.groupby("workload")["peak_fb_mib"].max())
                      .to_numpy(), act))
    te = tests[test_seeds[0]]
    lowo_up, lowo_act, per = [], [], []
    for w in sorted(tr["workload"].unique()):
        q = NewJobPredictor(coverage=0.95, confidence=0.95).fit(tr[tr["workload"] != w])
        t = te[te["workload"] == w]
        if t.empty:
            continue
        up = q.predict(t.assign(workload="(hidden)"))["peak_fb_upper_mib"].to_numpy()
        lowo_up.append(up), lowo_act.append(t["peak_fb_mib"].to_numpy())
        per.append(score(w, up, t["peak_fb_mib"].to_numpy()))
    rows.append(score(f"seed {test_seeds[0]}: key hidden: LightGBM on metadata incl. batch size (LOWO)",
                      np.concatenate(lowo_up), np.concatenate(lowo_act)))
    bw = pd.concat(by_w).groupby("workload").agg(
        runs=("cov", "size"), coverage=("cov", "mean"), mean_over_reservation=("over", "mean"))
    ok = main_row["coverage"] >= 0.95 and main_row["mean_over_reservation"] < 0.15
    lines = header("New-job peak framebuffer: calibrated upper quantile (target 95 %)",
                   "nice .venv/bin/python bench/fingerprint_newjob.py" + (
                       "" if test_seeds == TEST_SEEDS else
                       f" --test-seeds {' '.join(map(str, test_seeds))} --out {out}"), [
        f"train: seeds {TRAIN_SEEDS}, 3 days each, 30 s ({len(tr)} runs); test: seeds "
        f"{', '.join(map(str, test_seeds))} ({len(allt)} runs past start-up on exclusive GPUs);"
        " over-reservation = (upper - actual peak) / actual peak",
        "generator: peak framebuffer = fixed + per-sample x the pod's batch size (label "
        f"`foresight.io/batch-size`) x lognormal(0, {FB_RESIDUAL_SIGMA}) "
        "(simulator/workloads.py FB_CONFIG)",
        "bound: 95 % upper quantile with 95 % confidence (training-conditional conformal: "
        "covers >= 95 % of new runs with probability 0.95 over the training draw)",
        f"conformal log-quantiles from training runs only: with batch size "
        f"{p.q_cfg_pooled_:.3f} (pooled, per sqrt(1 + leverage)), without {p.q_pooled_:.3f}; "
        f"model path {p.q_model_:.3f}", f"wall {time.time() - t0:.0f} s"])
    lines += table(rows)
    lines += ["", f"Target (>= 95 % coverage, < 15 % mean over-reservation, key + batch size, "
              f"all {len(allt)} test runs): **{'met' if ok else 'not met'}**"]
    lines += ["", "Key + batch-size path per workload (all test seeds):", ""] + table(
        bw.reset_index().to_dict("records"))
    lines += ["", f"Leave-one-workload-out per held-out workload (seed {test_seeds[0]}):", ""] + table(per)
    lines += ["", "## Reading", "",
              "- Peak memory is set by the job's configuration, which is in the job spec before "
              "the pod starts; the generator now exposes it as a batch-size label and keeps "
              f"only a lognormal(0, {FB_RESIDUAL_SIGMA}) residual (allocator/caching variation,"
              f" an assumption). The exact 95 % bound then over-reserves by "
              f"{floor(FB_RESIDUAL_SIGMA):.1%} on average; the per-workload memory model "
              "(fixed + per-sample x batch) with leave-one-run-out conformal quantiles gets "
              "close to that.",
              "- How the protocol came to be: seeds 2-11 were looked at while the predictor "
              "was built (bench/fingerprint_newjob_dev.py). Trained on seed 1 alone (217 "
              "runs), this bound covered 94.8 % of seeds 2-11 (7.2 % over-reservation); "
              "trained on seeds 0-1 (394 runs), 97.8 % (9.5 %). The product defaults (95 % "
              "quantile, 95 % confidence) were not changed; seeds 12-16 were run only after "
              "the training set was fixed.",
              "- Previous generator (commit d93cb39 and before): with unexplained σ=0.15 jitter"
              f" the floor is {floor(0.15):.0%}; the key path measured 90.6 % coverage with "
              "28.4 % mean over-reservation there (seed 2, 181 runs).",
              "- Per seed (~150-290 runs each) the coverage of a 95 % bound moves by +-1.6 % "
              "from sampling alone, which is why the target is judged on all test runs and why"
              " the bound carries a confidence margin: the average-case conformal bound is "
              "calibrated (its pooled coverage is close to 95 %) and so misses 95 % on about "
              "half of the test sets.",
              "- Withholding the label falls back to the workload's own run peaks (the order "
              "statistic that covers 95 % with 95 % confidence from 59 runs, on average from 19, "
              "as conformal_q falls back; the workload median + pooled residuals below 19 "
              "runs; until "
              "2026-11-27 always the median + residuals: coverage 0.995, over-reservation "
              "3.641): coverage holds but the bound must span every batch size of the "
              "workload, hence the large over-reservation; the declared request over-reserves "
              "several-fold.",
              "- With the key hidden, metadata (image, namespace, queue, requested GPUs, batch "
              "size) does not identify an unseen workload's footprint (a batch of 32 means "
              "different memory for different models); the workload-grouped conformal "
              "quantile keeps coverage at the price of a wide bound."]
    (RESULTS / out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Fresh seeds check a bound whose settings were chosen while looking at the default ones.
    ap.add_argument("--test-seeds", type=int, nargs="+", default=list(TEST_SEEDS))
    ap.add_argument("--out", default="fingerprint_newjob.md", help="file under bench/results/")
    a = ap.parse_args()
    main(tuple(a.test_seeds), a.out)
