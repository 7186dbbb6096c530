"""Beyond-packing replay mode: what GPU sharing does to the pods that share.

Every GPU-sharing pod (one GPU, < 1000 milli) is given a workload drawn from the Gavel job types
measured on one GPU model (``truth_gpu``, physical runs, scale 1). At the end of the replay we
count, per policy, (a) co-located pairs on a GPU whose *true* normalized speed (Gavel, either
side) is under ``slow`` and (b) pods on a shared GPU whose true peak memory does not fit (the
sum of the true peaks of the pods on that GPU exceeds it; a pod alone always fits).

Gavel measures no memory, so true peak memory is *synthetic*: per workload a peak/declared
ratio drawn once per seed from U(0.7, 1.3), times the pod's declared share. Foresight may not
read the truth ahead of time. It predicts the speed of a pair from what telemetry would have
shown it so far: a pair that has already shared a GPU has a measured speed; any other pair gets
the same jobs' speed measured on another GPU model (``predict_gpu``), mapped to this GPU model
by a least-squares line fitted online to the pairs measured so far (raw P100 speeds are all
< 0.85 on V100-safe pairs: without that mapping every co-location looks unsafe). Memory comes
from the peak/declared ratios of pods of the same workload placed before.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ground.errors import ForesightError
from simulator.replay.data import read_table

MIN_FIT_PAIRS = 5  # measured (ordered) pairs needed before the P100 -> truth line replaces raw P100


def speed_matrix(pairs: pd.DataFrame, gpu: str, jobs: list[str]) -> np.ndarray:
    """S[a, b] = speed of job a co-located with job b (co-located / solo throughput)."""
    d = pairs[(pairs["source"] == "physical") & (pairs["gpu"] == gpu) & (pairs["scale_a"] == 1)
              & (pairs["scale_b"] == 1)]
    idx = {j: i for i, j in enumerate(jobs)}
    s = np.full((len(jobs), len(jobs)), np.nan)
    for a, b, v in zip(d["job_a"], d["job_b"], d["norm_speed_a"]):
        if a in idx and b in idx:
            s[idx[a], idx[b]] = v
    s[np.isnan(s) | (s <= 0)] = 0.0  # infeasible or not measured: as bad as it gets
    return s


class ColocationMode:
    """Workloads, truth, Foresight's online predictions and the counters of one replay."""

    def __init__(self, gavel_pairs: Path, truth_gpu: str = "v100", predict_gpu: str = "p100",
                 slow: float = 0.85) -> None:
        if not Path(gavel_pairs).is_file():
            raise ForesightError(f"Gavel pair table not found: {gavel_pairs}")
        pairs = read_table(gavel_pairs, ("source", "gpu", "job_a", "scale_a", "job_b", "scale_b",
                                         "norm_speed_a"), "Gavel pair")
        d = pairs[(pairs["source"] == "physical") & (pairs["gpu"] == truth_gpu)]
        self.jobs = sorted(set(d["job_a"]))
        if not self.jobs:
            raise ForesightError(f"no physical {truth_gpu} rows in {gavel_pairs}")
        self.true_speed = speed_matrix(pairs, truth_gpu, self.jobs)
        self.pred_speed = speed_matrix(pairs, predict_gpu, self.jobs)
        self.slow = slow

    def start(self, n_pods: int, shape: tuple[int, int], seed: int) -> None:
        rng = np.random.default_rng(seed + 7919)
        j = len(self.jobs)
        self.workload = rng.integers(0, j, n_pods)
        self.ratio = rng.uniform(0.7, 1.3, j)
        self.residents: dict[tuple[int, int], list[tuple[int, int]]] = {}  # slot -> (job, milli)
        self.seen_ratio_sum = np.zeros(j)
        self.seen_ratio_n = np.zeros(j)
        # a pair's speed is the worse of its two sides; prior = the other GPU model's pair
        self.true_pair = np.minimum(self.true_speed, self.true_speed.T)
        self.prior_pair = np.minimum(self.pred_speed, self.pred_speed.T)
        self.measured = np.zeros((j, j), dtype=bool)
        self.pred_pair = self.prior_pair.copy()
        self.slot_milli = np.zeros((*shape, j))  # per slot and job: milli of that job there
        self.shared_slot = np.zeros(shape, dtype=bool)  # a GPU-sharing pod runs there

    def _measure(self, job: int, others: list[int]) -> None:
        """Pairs that now share a GPU: telemetry shows their speed from here on."""
        new = [k for k in others if not self.measured[job, k]]
        if not new:
            return
        self.measured[job, new] = self.measured[new, job] = True
        x, y = self.prior_pair[self.measured], self.true_pair[self.measured]
        pred = self.prior_pair
        if len(x) >= MIN_FIT_PAIRS and np.ptp(x) > 0:  # least-squares line prior -> truth
            b, a = np.polyfit(x, y, 1)
            pred = a + b * self.prior_pair
        self.pred_pair = np.where(self.measured, self.true_pair, pred)

    def placed(self, pod_index: int, node: int, slots: list[int], milli: int) -> None:
        if len(slots) != 1 or milli >= 1000:
            return
        job = int(self.workload[pod_index])
        here = self.residents.setdefault((node, slots[0]), [])
        self._measure(job, [k for k, _ in here])
        here.append((job, milli))
        self.seen_ratio_sum[job] += self.ratio[job]  # its peak shows in telemetry once it runs
        self.seen_ratio_n[job] += 1
        self.slot_milli[node, slots[0], job] += milli
        self.shared_slot[node, slots[0]] = True

    def predicted_slow(self, pod_index: int) -> np.ndarray:
        """(N, G) bool: slots where a resident and the pod are predicted to pair under ``slow``."""
        job = int(self.workload[pod_index])
        partners = self.pred_pair[job] < self.slow  # jobs predicted slow beside this one
        return (self.slot_milli[:, :, partners] > 0).any(axis=2)

    def predicted_overflow(self, pod_index: int, milli: int) -> np.ndarray:
        """(N, G) bool: slots whose predicted summed peak memory would exceed the GPU."""
        job = int(self.workload[pod_index])
        mean = np.divide(self.seen_ratio_sum, self.seen_ratio_n,
                         out=np.ones(len(self.jobs)), where=self.seen_ratio_n > 0)
        peak = self.slot_milli @ mean + milli * mean[job]
        return self.shared_slot & (peak > 1000)  # a pod alone always fits

    def report(self) -> dict:
        slow_pairs = pairs = oom = 0
        for res in self.residents.values():
            peak = sum(min(1000.0, m * self.ratio[j]) for j, m in res)
            if len(res) > 1 and peak > 1000:  # only sharing can make a pod not fit
                oom += len(res)
            for a in range(len(res)):
                for b in range(a + 1, len(res)):
                    ja, jb = res[a][0], res[b][0]
                    pairs += 1
                    slow_pairs += min(self.true_speed[ja, jb], self.true_speed[jb, ja]) < self.slow
        shared = sum(len(r) for r in self.residents.values())
        return {"sharing_pods": shared, "colocated_pairs": pairs, "slow_pairs": int(slow_pairs),
                "memory_overflow_pods": int(oom)}
