"""Adapters from registry models to the scheduler hook's provider interfaces.

The hook's scores ask narrow questions (peak framebuffer of these workloads, speed of this
workload beside those); these classes answer them from the models the API store loaded, so the
extender and the REST API score with the same models. Unknown workloads answer NaN, which the
scores read as "no prediction".
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from artifacts.lru import LRU


class InterferenceAdapter:
    """`InterferenceProvider` over an InterferenceModel: one vectorized predict per call."""

    def __init__(self, model: Any) -> None:
        self.model = model
        # (workload, other, sharing) -> (speed of workload, of other, their p10s): the scheduler
        # asks about the same pairs pod after pod; one adapter per model version, never stale.
        self._cache = LRU(200_000)

    def _pairs(self, workload: str, others: Sequence[str], sharing: str) -> np.ndarray:
        """Columns: speed of workload, of other, their p10s, their margin units (NaN when
        the model has no admission bound)."""
        others = [str(o) for o in others]
        admit = self.admits

        def compute(miss: list[int]) -> list[tuple[float, ...]]:
            pairs = pd.DataFrame({"a_workload": [workload] * len(miss),
                                  "b_workload": [others[i] for i in miss],
                                  "sharing": [sharing or ""] * len(miss)})
            out = self.model.predict(pairs, admit=True) if admit else self.model.predict(pairs)
            cols = [out[c].to_numpy(float) for c in (
                "a_speed_pred", "b_speed_pred", "a_speed_p10", "b_speed_p10")]
            nan = np.full(len(miss), np.nan)
            cols += [out["a_speed_unit"].to_numpy(float), out["b_speed_unit"].to_numpy(float)] \
                if admit else [nan, nan]
            return list(zip(*(c.tolist() for c in cols)))

        vals = self._cache.get_many([(workload, o, sharing) for o in others], compute)
        return np.asarray(vals, float).reshape(-1, 6)

    @property
    def admits(self) -> bool:
        """Whether the model calibrated an admission bound (forecaster/interference/admission.py)."""
        return admits(self.model)

    def speeds(self, workload: str, others: Sequence[str], sharing: str
               ) -> tuple[np.ndarray, np.ndarray]:
        if not others:
            return np.zeros(0), np.zeros(0)
        arr = self._pairs(workload, others, sharing)
        return arr[:, 0], arr[:, 1]

    def bounds(self, workload: str, others: Sequence[str], sharing: str
               ) -> tuple[np.ndarray, np.ndarray]:
        """The pessimistic p10 speeds, same shape as `speeds`: what a minimum speed is held to
        where the model has no admission bound (`admit_bound`)."""
        if not others:
            return np.zeros(0), np.zeros(0)
        arr = self._pairs(workload, others, sharing)
        return arr[:, 2], arr[:, 3]

    def units(self, workload: str, others: Sequence[str], sharing: str
              ) -> tuple[np.ndarray, np.ndarray]:
        """The margin unit of each side (NaN: none), same shape as `speeds`."""
        if not others:
            return np.zeros(0), np.zeros(0)
        arr = self._pairs(workload, others, sharing)
        return arr[:, 4], arr[:, 5]

    def admit_bound(self, sharing: str, point: np.ndarray, unit: np.ndarray, p10: np.ndarray,
                    floor: float | np.ndarray) -> np.ndarray:
        """What a minimum speed `floor` is held to: the model's admission bound, the p10 for
        a model without one."""
        return admit_bounds(self.model, sharing, point, unit, p10, floor)[0]


def admits(model: Any) -> bool:
    """Whether `model` calibrated an admission bound (an artifact saved before it, or the
    training-median baseline, has none: its p10 is the bound)."""
    return bool(getattr(model, "admit_q_", None))


def admit_bounds(model: Any, sharing: str, point: np.ndarray, unit: np.ndarray,
                 p10: np.ndarray, floor: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what a minimum speed `floor` is held to, where that is the admission bound rather
    than the p10): the co-location gate's bound, shared with the API's `/v1/interference`."""
    if not admits(model):
        p10 = np.asarray(p10, float)
        return p10, np.zeros(p10.shape, bool)
    from forecaster.interference.admission import from_table

    table = model.admit_q_.get(sharing, {})
    return model.admit_bound(sharing, point, unit, p10, floor), from_table(table, unit)


class FingerprintAdapter:
    """`FingerprintProvider` over the fingerprint kind's Bundle (fingerprints + predictor)."""

    def __init__(self, bundle: Any) -> None:
        fps = getattr(bundle.fingerprints, "fingerprints_", {}) or {}
        # Precomputed once per model version: the hot path is a dict lookup.
        self._peak = {w: _peak(fp) for w, fp in fps.items()}
        self._power = {w: _power(fp) for w, fp in fps.items()}
        center = getattr(bundle.predictor, "center_", {}) or {}
        qk = getattr(bundle.predictor, "q_key_", {}) or {}
        for w, c in center.items():  # the predictor's conformal upper bound where no run peak
            if not np.isfinite(self._peak.get(w, np.nan)):
                self._peak[w] = float(np.exp(c + qk.get(w, 0.0)))
        # the hook names a pod by its workload; fingerprints may be keyed by the job template
        aliases = getattr(bundle.fingerprints, "aliases_", {}) or {}
        for table in (self._peak, self._power):
            for w, key in aliases.items():
                if w not in table and key in table:
                    table[w] = table[key]

    def peak_fb_mib(self, workloads: Sequence[str]) -> np.ndarray:
        return np.array([self._peak.get(w, np.nan) for w in workloads], float)

    def power_w(self, workloads: Sequence[str]) -> np.ndarray:
        return np.array([self._power.get(w, np.nan) for w in workloads], float)


class RuntimeAdapter:
    """`RuntimeProvider` over a RuntimePredictor: the pod's predicted run time at
    `quantile` (the reservation's backfill reads it; p50 as chosen on the timeline's dev
    seeds, bench/results/replay_timeline_backfill.md)."""

    def __init__(self, model: Any, quantile: str = "p50") -> None:
        self.model, self.quantile = model, quantile
        self._cache = LRU(50_000)

    def runtime_s(self, pod: Any) -> float | None:
        gpus = float(getattr(pod, "gpus", 0) or 0)
        milli = float(getattr(pod, "milli", 1000) or 1000)
        milli = milli if 0 < milli <= 1000 else 1000.0  # gpu-memory pods: whole GPUs
        key = (str(getattr(pod, "workload", "")), str(getattr(pod, "queue", "")),
               gpus * min(max(milli, 0.0), 1000.0) / 1000.0, int(getattr(pod, "priority", 0)))

        def compute(miss: list[int]) -> list[float]:
            k = key
            out = self.model.predict(pd.DataFrame({"workload": [k[0]], "queue": [k[1]],
                                                   "gpu_request": [k[2]], "priority": [k[3]]}))
            return [float(out[self.quantile].iloc[0])]

        v = self._cache.get_many([key], compute)[0]
        return v if np.isfinite(v) else None


def _peak(fp: dict) -> float:
    p = (fp.get("peak_fb_mib") or {}).get("p95")
    return float(p) if p is not None else float("nan")


def _power(fp: dict) -> float:
    """Time-share-weighted mean power over phases (NaN when no phase reports power)."""
    num = den = 0.0
    for ph in (fp.get("phases") or {}).values():
        w, share = ph.get("power_w"), ph.get("time_share") or 0.0
        if w is not None:
            num, den = num + w * share, den + share
    return num / den if den > 0 else float("nan")


def install(store: Any, providers: Any, max_age_s: float) -> None:
    """Feed the hook's ProviderSet from the store: now and on every swap."""
    def on_swap(loaded: Any) -> None:
        adapter = {"interference": InterferenceAdapter,
                   "fingerprint": FingerprintAdapter,
                   "runtime": RuntimeAdapter}.get(loaded.kind)
        if adapter is not None:
            providers.set(loaded.kind, adapter(loaded.model), max_age_s)

    store.on_swap.append(on_swap)
    for loaded in list(store.models.values()):
        on_swap(loaded)
