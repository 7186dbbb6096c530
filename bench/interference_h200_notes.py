"""The "How to read it" notes under every table bench/interference_h200.py writes."""
from __future__ import annotations

NOTES = [
    "## How to read it", "",
    "- The model is the structured part of forecaster/interference/mechanism.py fit per fold "
    "(time-slicing: round robin from each side's busy share and step time, the partner ready "
    "when it has work queued, both speeds scaled to the pair's fitted occupancy; MPS: a "
    "contention priority learned from differences of solo fingerprints: hogging, step "
    "length, tensor, DRAM, occupancy, busy share, SM activity per busy time, weighted by how "
    "often the partner is busy, both speeds scaled to the pair's fitted util-weighted total; "
    "`--ts-form` / `--mps-form` give the earlier forms) and LightGBM on top: on its residual, "
    "or with its speed as a feature, "
    "or not at all, whichever errs least on the workloads held out inside the training folds.",
    "- Training data of a fold: the scored set's pairs without the held-out workload, plus the "
    "other committed measurements (data/h200, data/h200b, data/h200m, data/h200c ... h200i, "
    "less the one scored and less every pair of a workload of the held-out name). "
    "`data/h200j` (measured 2026-11-27 with h200i; both first scored once with the model as "
    "it stood, interference_h200_i.md / _j.md) is set aside: scored once after the choices, "
    "and in no fold's training when a committed set is scored; a measurement that is none of "
    "the committed sets trains on all of them. `data/h200d`, `h200f` and `h200h`, each set "
    "aside and scored once in an earlier session, are dev sets now. "
    "`--no-extra` scores the set alone.",
    "- Step time is not a DCGM field: it is 1 / the solo window's rate (colocate.py's `rate`), "
    "as a cluster's progress counter gives it (before 2026-11-27: the median step, "
    "`step_median_s`). `--no-step` drops it.",
    "- Disclosure: the time-slicing form and the first MPS form were written after reading the "
    "shared 8-workload table. The MPS priority form was chosen after the two later "
    "measurements (data/h200b: eight other workloads; data/h200m: four of each) were taken "
    "on 2026-11-26 and the earlier form was seen to carry to them no better than the rule "
    "(leave one out on h200b with the other measurements in training: MPS 0.96x the rule, "
    "interference_h200_other_hogging.md); its features were "
    "picked on leave-one-workload-out over all three sets. No part is untouched by that "
    "choice; the dev/final split of the shared set (final: decode_gemv, resnet50_train) "
    "governs the blend and margin choices as before.",
    "- The p10 margin (`--margin scaled`, the default) is q times a learned scale: a small "
    "L1 booster predicts how far off the point is for rows like this one (features and the "
    "point), fit on half the calibration groups' held-out errors and scored on the other "
    "half (forecaster/interference/conformal.py). `--margin band` is the earlier one margin "
    "per band of predicted speed. The scale was chosen on the pool of the four dev sets "
    "(`--part pool`), with 6 calibration groups beyond 8 workloads instead of 3. q is taken "
    "per sharing mode where a mode has 100 held-out scores (chosen on the six dev sets).",
    "- `model point (no margin)` admits on the point prediction alone: how far the "
    "information in the fingerprints goes without any margin. `--alpha` sets the bound's "
    "level (0.1: the p10; 0.4: the p40), the safety trade-off a less pessimistic bound buys "
    "(interference_h200_pool_alpha04.md).",
    "- `model (admission bound)` is what the extender does with a pod's "
    "`foresight.io/min-speed`: it admits when point - q clears the floor, q calibrated per "
    "sharing mode and floor by conformal risk control on the training folds' held-out rows "
    "so that at most 5 % of unsafe placements are admitted "
    "(forecaster/interference/admission.py; `--admit-risk`). The p10 (`model (p10)`) is still "
    "what the API publishes: it holds about 10 % of unseen speeds below it, and so admits far "
    "fewer unsafe placements than any operator's risk and refuses most safe ones. Where the "
    "trees serve without the structured part (the `plain` blend, chosen inside a fold when the "
    "forms lose to trees without them), the learned scale now serves too (before: one margin "
    "for every row).",
    "- Part of the margin is the measurement itself: see the line on pairs measured twice "
    "under the per-set table (`--part pool`). Copy-engine jobs (`h2d_copy` in data/h200c, "
    "`d2h_copy` in data/h200i: ~99 % GPU util with SM activity 0.0000) cost their partners "
    "nothing in either mode and are not slowed; since 2026-11-27 the forms read a side with "
    "no SM activity as running no kernels and give both sides 1.0 (mechanism.py `_NO_SM`; "
    "before, a copy job was predicted as a hog: adding data/h200h and h200i to training "
    "raised the shared set's time-slicing MAE from 0.052 to 0.079, 0.072 with h200i alone "
    "and 0.055 with h200h alone; with the rule, 0.046).", ""]
