"""GPU-sharing slowdowns calibrated on the real H200 measurement (data/h200): time-slicing, MPS.

Why: the Gavel-calibrated form (simulator/interference.py, V100 throughputs) gives the demo
cluster so little interference that the training median beats any model. On one H200
(data/h200, 8 workloads x 28 pairs per mode) two busy time-sliced contexts get ~0.5 each and
under MPS a job that keeps every SM busy starves a lighter partner (0.97 / 0.07). So the true
speed of a co-located pair here is:

1. the structured form of forecaster/interference/mechanism.py (SharingMechanism: round robin
   from busy share and step time; MPS hogging from SM activity x util and DRAM), its parameters
   fitted on data/h200 by `derive_sharing` and committed in data/seeds/sharing.json;
2. applied to the two pods' simulated steady-compute solo features and step times (training:
   the optimizer-step period its progress counter shows; others: an assumption), averaged
   over the partner's busy and idle time (its class duty: a notebook busy 15 % of the time
   costs little);
3. times a fixed per-(pod, partner) random effect in logit space whose spread is the robust
   spread of the fitted form's residuals on the H200 pairs, per mode: the part of real
   co-location speed that solo telemetry does not explain.

Several partners on one GPU: their delays add (speed = 1 / (1 + sum of (1/s_i - 1))), as in
the round-robin form where each busy partner adds its slice to every step.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.seeds import load_seed
from simulator.workloads import WorkloadClass, iteration_period

REPO = Path(__file__).resolve().parents[1]
H200_DIR = REPO / "data" / "h200"
SEED_FILE = "sharing.json"
MODES = ("timeslice", "mps")
#: Step (sync-to-sync) time of pods without an optimizer period: an LLM server's decode step
#: (~30 ms per token batch) and an interactive notebook's short kernels. Assumptions: no
#: committed measurement gives them (H200's decode_gemv steps at 0.7 ms is a kernel loop).
OTHER_STEP_S = {"serve": 0.03, "notebook": 0.05}
#: Speeds are kept in (0, 1) before the logit noise: an idle partner stays within ~1 % of 1.
_LO, _HI = 0.01, 0.999


def _logit(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, _LO, _HI)
    return np.log(x / (1.0 - x))


def derive_sharing(h200_dir: Path = H200_DIR) -> dict[str, Any]:
    """Fit SharingMechanism on the H200 pair table (both directions of each pair) and size
    the residual noise per mode: 1.4826 x the median absolute logit residual (robust: a
    3 s window that caught a launch stall should not widen every simulated pair)."""
    from features.h200 import load_h200_pairs
    from forecaster.interference.features import directed
    from forecaster.interference.mechanism import SharingMechanism

    d = directed(load_h200_pairs(h200_dir))
    d = d[d["y"].notna()].reset_index(drop=True)
    # the hogging MPS form: it needs only GPU util, SM and DRAM activity and step time, which
    # the simulator's pods carry (the priority form reads tensor activity and occupancy too)
    mech = SharingMechanism(mps_form="hogging").fit(d, d["y"].to_numpy())
    pred, y = mech.predict(d), d["y"].to_numpy()
    noise, mae = {}, {}
    for mode in MODES:
        k = (d["sharing"] == mode).to_numpy()
        r = _logit(y[k]) - _logit(pred[k])
        noise[mode] = round(float(1.4826 * np.median(np.abs(r - np.median(r)))), 4)
        mae[mode] = round(float(np.mean(np.abs(y[k] - pred[k]))), 4)
    body = mech.to_json()
    body["params"] = {k: ([round(x, 6) for x in v] if isinstance(v, list) else round(v, 8))
                      for k, v in body["params"].items()}
    return {
        "provenance": {
            "source": "data/h200/solo.csv + pairs.csv (one NVIDIA H200, colocate.py, "
                      "8 workloads, 28 pairs under time-slicing and under MPS)",
            "method": "forecaster.interference.mechanism.SharingMechanism fitted on both "
                      "directions of every measured pair (features.h200.load_h200_pairs); "
                      "noise_logit_sd = 1.4826 x median absolute deviation of the logit "
                      "residuals per mode; regenerate with python -m simulator.sharing",
        },
        "mechanism": body,
        "noise_logit_sd": noise,
        "h200_mae": mae,
        "directed_rows": int(len(d)),
    }


@lru_cache(maxsize=1)
def _mechanism():
    from forecaster.interference.mechanism import SharingMechanism

    seed = load_seed(SEED_FILE)
    return SharingMechanism.from_json(seed["mechanism"]), dict(seed["noise_logit_sd"])


def step_seconds(w: WorkloadClass, spec: dict) -> float:
    """A pod's solo step: its optimizer period (what 1 / its counter's solo rate measures)."""
    period = iteration_period(w, spec)
    return period if period == period else OTHER_STEP_S.get(w.kind, 0.05)


def side_features(feats: Mapping[str, float], w: WorkloadClass, spec: dict) -> dict[str, float]:
    """Mechanism inputs of one pod from its steady solo features: GPU util as
    simulator/telemetry.py reports it in compute (1.1 x SM + 5 %), its step, and the class
    duty (the share of time a partner feels it at that level; see pair_speed)."""
    util = 100.0 * min(1.0, 1.1 * feats["sm_active"] + 0.05)
    return {"gpu_util": util, "sm_active": feats["sm_active"],
            "dram_active": feats["dram_active"], "step_s": step_seconds(w, spec),
            "duty": w.duty}


def pair_noise(seed: int, a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    """Standard-normal random effect of each directed (pod a, partner b) pair: a hash of
    (seed, a, b, mode), so it is the same at every refresh and leaves the simulator's
    random stream (and with it the schedule of other configurations) alone."""
    out = np.empty(len(a))
    for i, (x, y) in enumerate(zip(np.asarray(a).tolist(), np.asarray(b).tolist())):
        h = hashlib.blake2b(f"{seed}/{x}/{y}/{mode}".encode(), digest_size=8).digest()
        out[i] = np.random.default_rng(int.from_bytes(h, "little")).standard_normal()
    return out


def pair_speed(me: Mapping[str, np.ndarray], partner: Mapping[str, np.ndarray], mode: str,
               noise: np.ndarray | None = None) -> np.ndarray:
    """Speed of the slowed job (arrays `me`, side_features keys) beside one partner under
    `mode`. The partner is at its steady level a `duty` share of the time and idle otherwise,
    and the speed is the time average of the two (the form is non-linear: averaging the
    partner's features first would turn a hog busy 90 % of the time into a mild one).
    `noise` (standard normal per row) is scaled by the H200 residual spread."""
    mech, sd = _mechanism()
    n = len(np.atleast_1d(me["gpu_util"]))
    duty = np.broadcast_to(np.asarray(partner.get("duty", 1.0), float), (n,))
    speeds = []
    for level in (1.0, 0.0):  # partner busy, partner idle
        rows: dict[str, Any] = {"sharing": np.full(n, mode, dtype=object)}
        for role, src, scale in (("self", me, 1.0), ("partner", partner, level)):
            for k in ("gpu_util", "sm_active", "dram_active", "step_s"):
                x = np.broadcast_to(np.asarray(src[k], float), (n,))
                rows[f"{role}_{k}"] = x if k == "step_s" else x * scale
        speeds.append(mech.predict(rows))
    s = duty * speeds[0] + (1.0 - duty) * speeds[1]
    if noise is None:
        return np.clip(s, _LO, 1.0)
    return 1.0 / (1.0 + np.exp(-(_logit(s) + sd[mode] * np.asarray(noise, float))))


def combine(speeds: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Speed beside several partners (rows of one group): the partners' delays add."""
    delay = np.zeros(n_groups)
    np.add.at(delay, group, 1.0 / np.maximum(speeds, _LO) - 1.0)
    return 1.0 / (1.0 + delay)


if __name__ == "__main__":
    import json

    from simulator.seeds import SEED_DIR

    (SEED_DIR / SEED_FILE).write_text(json.dumps(derive_sharing(), indent=1, sort_keys=True)
                                      + "\n")
    print(f"wrote {SEED_DIR / SEED_FILE}")
