"""Phase segmentation of (pod, GPU) telemetry: change points or a Gaussian HMM, then rules.

Both segmenters work on the same four series-relative features, so one pooled model and one
set of rules serve workloads of very different absolute levels:
- `act`: SM active / the series' steady-compute level (p95 of SM active while not idle),
- `fb`: framebuffer used / the series' peak (start-up holds ~half the weights/activations),
- `rx`, `tx`: PCIe bytes / the series' compute-phase host->device rate.
Segments come from ruptures (KernelCPD, linear kernel = l2 cost, C implementation) or from
the Viterbi path of an hmmlearn GaussianHMM pooled over all series; each segment is labelled
by physically meaningful thresholds on its means (checkpoint = SM idle + device->host PCIe
high; start-up = framebuffer not yet at peak; ...), then equal neighbours are merged, so
boundaries that are not phase changes (interference speed steps) disappear.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import ruptures as rpt
from hmmlearn.hmm import GaussianHMM

from features.segments import WideSeries
from forecaster.fingerprint.hires import has_util, segment_hires

FEATURES = ("act", "fb", "rx", "tx")
TRAIN_PHASES = ("startup", "compute", "eval", "checkpoint", "stall", "idle")
SERVE_PHASES = ("startup", "serving_busy", "serving_idle")
PHASES = TRAIN_PHASES + SERVE_PHASES[1:]
#: prototype feature means per phase (act, fb, rx, tx), the HMM's starting point
PROTOTYPES = {
    "startup": (0.08, 0.45, 0.55, 0.02), "compute": (1.0, 1.0, 1.0, 0.1),
    "eval": (0.55, 1.0, 0.6, 0.1), "checkpoint": (0.04, 1.0, 0.02, 1.0),
    "stall": (0.12, 1.0, 0.05, 0.05), "idle": (0.0, 1.0, 0.0, 0.0),
    "serving_busy": (1.0, 1.0, 1.0, 0.6), "serving_idle": (0.06, 1.0, 0.05, 0.03),
}
DEFAULT_RULES = {
    "idle_act": 0.04,       # below: no kernels running (relative to the compute level)
    "idle_sm": 0.03,        # or below this absolute SM activity (idle exporter noise ~0.02)
    "low_act": 0.2,         # below: SM essentially idle (start-up, checkpoint, stall)
    "compute_act": 0.7,     # at or above: steady compute; between: evaluation
    "startup_fb": 0.7,      # framebuffer below this share of peak: still loading
    "ckpt_tx": 0.15,        # device->host traffic (relative) well above the noise ...
    "ckpt_tx_rx": 3.0,      # ... and dominating host->device: writing weights out
    "serving_tx_ratio": 0.45,  # tx/rx in busy samples: inference returns outputs
}


def relative_features(values: np.ndarray, columns: list[str]) -> tuple[np.ndarray, dict]:
    """Series-relative features (n, 4) and the references used (see module docstring)."""
    col = {c: values[:, i] for i, c in enumerate(columns)}
    n = len(values)
    sm = np.nan_to_num(col.get("sm", col.get("tensor", np.zeros(n))))
    # steady-compute level: p95 over samples with kernels running (a mostly idle notebook's
    # overall p95 would be its idle level)
    busy_sm = sm[sm > 0.05]  # above the exporter's idle noise
    ref = max(float(np.percentile(busy_sm, 95)) if len(busy_sm) else 0.0, 0.05)
    act = np.clip(sm / ref, 0, 1.5)
    fb = np.nan_to_num(col.get("fb", np.ones(n)))
    fbr = fb / max(float(fb.max()) if n else 1.0, 1.0)
    rx = np.nan_to_num(col.get("rx", np.zeros(n)))
    tx = np.nan_to_num(col.get("tx", np.zeros(n)))
    busy = act > 0.8
    pref = float(np.median(rx[busy])) if busy.sum() >= 3 else float(np.percentile(rx, 95))
    pref = max(pref, 2e8)  # 200 MB/s floor: 10x the exporter noise (~20 MB/s)
    # 5th column: absolute SM activity, for the idle gate only (segmenters use the first 4)
    X = np.column_stack([act, fbr, np.clip(rx / pref, 0, 3), np.clip(tx / pref, 0, 3), sm])
    return X, {"sm_ref": ref, "pcie_ref": pref}


def is_serving(X: np.ndarray, rules: dict) -> bool:
    """Inference pods send results back: tx/rx in busy samples is ~0.6 vs ~0.3 for training."""
    busy = X[:, 0] > rules["compute_act"]
    if busy.sum() < 3:
        return False
    return float(np.median(X[busy, 3]) / max(np.median(X[busy, 2]), 1e-6)) >= \
        rules["serving_tx_ratio"]


def label_means(m: np.ndarray, serving: bool, rules: dict) -> np.ndarray:
    """Phase name for each row of segment means (act, fb, rx, tx[, absolute sm])."""
    act, fb, rx, tx = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
    sm_abs = m[:, 4] if m.shape[1] > 4 else np.full(len(m), np.inf)
    out = np.empty(len(m), dtype=object)
    low = act < rules["low_act"]
    if serving:
        out[:] = np.where(low, "serving_idle", "serving_busy")
        out[fb < rules["startup_fb"]] = "startup"
        return out
    out[:] = "eval"
    out[act >= rules["compute_act"]] = "compute"
    out[low] = "stall"
    out[low & (tx > rules["ckpt_tx"]) & (tx > rules["ckpt_tx_rx"] * rx)] = "checkpoint"
    out[fb < rules["startup_fb"]] = "startup"  # working set not allocated yet
    # no kernels: relative to the pod's compute level, or in absolute terms (exporter noise)
    out[((act < rules["idle_act"]) | (sm_abs < rules["idle_sm"])) & (rx < 0.1) & (tx < 0.1)
        & (fb >= rules["startup_fb"])] = "idle"
    return out


def _runs(labels: np.ndarray) -> np.ndarray:
    """Start index of each run of equal labels."""
    if len(labels) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])


def label_breaks(X: np.ndarray, bounds: np.ndarray, serving: bool, rules: dict) -> np.ndarray:
    """Per-sample labels from segment starts `bounds` (sorted, starting at 0)."""
    ends = np.r_[bounds[1:], len(X)]
    csum = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(X, axis=0)])
    means = (csum[ends] - csum[bounds]) / (ends - bounds)[:, None]
    return np.repeat(label_means(means, serving, rules), ends - bounds)


class PhaseSegmenter:
    """Segment and label (pod, GPU) series. method: "cpd" (ruptures) or "hmm" (hmmlearn)."""

    def __init__(self, method: str = "cpd", penalty: float = 10.0, chunk: int = 720,
                 n_iter: int = 10, fit_samples: int = 200_000, rules: dict | None = None,
                 seed: int = 0, hires_penalty: float | None = None) -> None:
        self.method = method
        self.penalty = penalty
        self.chunk = chunk
        self.n_iter = n_iter
        self.fit_samples = fit_samples
        self.rules = rules
        self.seed = seed
        self.hires_penalty = hires_penalty  # None: the BIC rule (hires.bic_penalty)

    @property
    def rules_(self) -> dict:
        return {**DEFAULT_RULES, **(self.rules or {})}

    # ---- segmenters ------------------------------------------------------------------------
    def _hmm_init(self) -> GaussianHMM:
        k = len(PROTOTYPES)
        h = GaussianHMM(n_components=k, covariance_type="diag", n_iter=self.n_iter,
                        init_params="", params="stmc", random_state=self.seed)
        h.startprob_ = np.full(k, 1 / k)
        stay = 0.98  # sticky: phases last many samples
        h.transmat_ = np.full((k, k), (1 - stay) / (k - 1)) + np.eye(k) * (stay - (1 - stay) / (k - 1))
        h.means_ = np.asarray(list(PROTOTYPES.values()), dtype=float)
        h.covars_ = np.full((k, len(FEATURES)), 0.03 ** 2)
        return h

    def fit(self, ws: WideSeries) -> "PhaseSegmenter":
        """HMM: EM on a pooled subsample of series, starting from the phase prototypes."""
        self.hmm_ = None
        if self.method == "hmm":
            rng = np.random.default_rng(self.seed)
            order = rng.permutation(len(ws))
            Xs, lens, total = [], [], 0
            for k in order:
                X, _ = relative_features(ws.series(k)[1], ws.columns)
                X = X[:, :len(FEATURES)]
                if len(X) < 2:
                    continue
                Xs.append(X), lens.append(len(X))
                total += len(X)
                if total >= self.fit_samples:
                    break
            h = self._hmm_init()
            if Xs:
                h.fit(np.vstack(Xs), lens)
            self.hmm_ = h
        elif self.method != "cpd":
            raise ValueError(f"unknown method {self.method!r}: use cpd or hmm")
        return self

    def _breaks(self, X: np.ndarray) -> np.ndarray:
        if len(X) < 2:
            return np.zeros(min(len(X), 1), np.int64)
        if self.method == "hmm":
            states = self.hmm_.predict(X[:, :len(FEATURES)])
            return _runs(states)
        # CPD in chunks: KernelCPD's Pelt is quadratic in the worst case; chunk edges are
        # removed again by the merge of equal labels.
        X4 = X[:, :len(FEATURES)]
        sd = np.median(np.abs(np.diff(X4, axis=0)), axis=0) * 1.4826 / np.sqrt(2)
        Z = X4 / np.maximum(sd, 0.01)
        out = [0]
        for a in range(0, len(X), self.chunk):
            z = Z[a:a + self.chunk]
            if len(z) < 3:
                continue
            bk = rpt.KernelCPD(kernel="linear", min_size=1, jump=1).fit(z).predict(
                pen=self.penalty)
            out.extend(a + b for b in bk[:-1])
            out.append(a + len(z))
        return np.unique(np.asarray(out[:-1] if out[-1] == len(X) else out, dtype=np.int64))

    # ---- prediction -----------------------------------------------------------------------
    def label_series(self, values: np.ndarray, columns: list[str],
                     step_s: float | None = None) -> np.ndarray:
        """Phase name per sample of one series. A series that carries GPU util (high-
        resolution telemetry, features.telemetry_csv) takes the hires path: CPD on util and
        memory-copy util with a BIC penalty, named by forecaster.fingerprint.hires."""
        if has_util(columns):
            return segment_hires(values, columns, penalty=self.hires_penalty,
                                 rules=self.rules, step_s=step_s)
        X, _ = relative_features(values, columns)
        if len(X) == 0:
            return np.zeros(0, dtype=object)
        rules = self.rules_
        return label_breaks(X, self._breaks(X), is_serving(X, rules), rules)

    def predict(self, ws: WideSeries) -> pd.DataFrame:
        """One row per labelled segment: KEY_COLUMNS, start, end (exclusive), phase, samples."""
        rows = []
        step = np.int64(0)
        for k in range(len(ws)):
            t, v = ws.series(k)
            lab = self.label_series(v, ws.columns, _step_s(t))
            if len(lab) == 0:
                continue
            st = _runs(lab)
            en = np.r_[st[1:], len(lab)]
            if len(t) > 1:
                step = np.int64(np.median(np.diff(t)))
            tend = np.r_[t[st[1:]], t[-1] + step]
            key = ws.keys.iloc[k]
            rows.append(pd.DataFrame({
                "namespace": key["namespace"], "pod": key["pod"], "node": key["node"],
                "gpu": key["gpu"], "start": t[st], "end": tend, "phase": lab[st],
                "samples": en - st}))
        if not rows:
            return pd.DataFrame(columns=["namespace", "pod", "node", "gpu", "start", "end",
                                         "phase", "samples"])
        out = pd.concat(rows, ignore_index=True)
        out["start"] = pd.to_datetime(out["start"], utc=True)
        out["end"] = pd.to_datetime(out["end"], utc=True)
        return out


def _step_s(t: np.ndarray) -> float | None:
    """Median sample spacing (s) of int64-ns timestamps; None for fewer than 2."""
    return float(np.median(np.diff(t))) / 1e9 if len(t) > 1 else None
