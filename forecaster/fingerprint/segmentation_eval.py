"""Scores of a segmentation against ground truth: change-point F1 (± tolerance) and phase F1."""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score

from features.segments import WideSeries, shared_mask, truth_labels


def change_points(labels: np.ndarray) -> np.ndarray:
    """Sample indices where the label differs from the previous sample."""
    if len(labels) < 2:
        return np.zeros(0, np.int64)
    return np.flatnonzero(labels[1:] != labels[:-1]) + 1


def match_count(true_cp: np.ndarray, pred_cp: np.ndarray, tol: int) -> int:
    """One-to-one matches within ±tol samples (greedy in time order; both sorted)."""
    i = j = hits = 0
    while i < len(true_cp) and j < len(pred_cp):
        d = pred_cp[j] - true_cp[i]
        if abs(d) <= tol:
            hits, i, j = hits + 1, i + 1, j + 1
        elif d < 0:
            j += 1
        else:
            i += 1
    return hits


def evaluate(segmenter, ws: WideSeries, phases: pd.DataFrame, tol: int = 2,
             series: list[int] | None = None) -> dict:
    """CP precision/recall/F1 and phase macro-F1 over the given series (default: all)."""
    tp = n_true = n_pred = 0
    y_true, y_pred = [], []
    for k in (range(len(ws)) if series is None else series):
        truth = truth_labels(ws, phases, k)
        ok = truth != ""
        if ok.sum() < 2:
            continue
        pred = segmenter.label_series(ws.series(k)[1][ok], ws.columns)
        truth = truth[ok]
        tc, pc = change_points(truth), change_points(pred)
        tp += match_count(tc, pc, tol)
        n_true, n_pred = n_true + len(tc), n_pred + len(pc)
        y_true.append(truth), y_pred.append(pred)
    prec = tp / n_pred if n_pred else 1.0
    rec = tp / n_true if n_true else 1.0
    yt, yp = np.concatenate(y_true), np.concatenate(y_pred)
    labels = sorted(set(yt))
    per = f1_score(yt, yp, labels=labels, average=None, zero_division=0)
    return {"cp_precision": prec, "cp_recall": rec,
            "cp_f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
            "phase_macro_f1": float(np.mean(per)),
            "per_phase_f1": dict(zip(labels, map(float, per))),
            "n_series": len(y_true), "n_true_cp": n_true, "n_pred_cp": n_pred}


def exclusive_series(ws: WideSeries) -> list[int]:
    """Series whose GPU never shows another pod (shared GPUs mix two pods' phases)."""
    return list(np.flatnonzero(~shared_mask(ws)))
