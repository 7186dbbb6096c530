"""How a GPU's sharing mode divides it between two jobs: the structured part of the interference
model, one small physical form per `sharing` value, its few parameters fit to the pair table.

- `timeslice` (the driver round-robins contexts, what the device plugin's time-slicing gives
  pods): a job of step time `s` (one sync-to-sync iteration) whose GPU work `w = util * s` needs
  `ceil(w / T)` slices waits, before each, for the partner's slice: `min(T, w_partner)` (a
  partner of short bursts yields early) plus a context switch `c`, when the partner has work
  queued (probability: its GPU util, or with `ts_form="ready"` 1 - (1 - util) x its
  co-located speed, both speeds solved together; `"conserve"`, the model's default, also
  scales both speeds to the pair's work-conserving total occupancy, a third parameter). Two
  always-busy jobs of long steps get ~0.5 each; a job of short steps beside one of long
  kernels waits out a whole slice every step (0.09 for an embedding gather beside a GEMM on
  the H200); an idle partner costs nothing. Parameters: `T`, `c` (ms), and the occupancy.
- `mps` (kernels of both run at once): while the partner is busy (its GPU util), the two contend
  and the GPU's work distributor favours the job that holds the SMs: speed = 1 - u_partner *
  (1 - sigmoid(k + w . (x_self - x_partner))), x = (hogging h = -log(1 - sm_active * util +
  eps): 0 when idle, large when it never leaves an SM free; log10 step in ms: a job of long
  uninterrupted steps rarely yields its SMs; tensor activity; DRAM activity; SM occupancy;
  log util). The throughput job keeps ~1.0, a latency-bound partner collapses, two hogs
  split, an idle partner costs nothing. The weights are a contention priority learned from
  differences of solo fingerprints, so they carry to workloads never measured in a pair
  (bench/results/interference_h200_other.md vs _other_hogging.md: the eight workloads of
  data/h200b, leave one out). `mps_form="conserve"` (the model's default) keeps that split and
  sets the total: MPS runs kernels of both at once and keeps the GPU busy, so the pair's
  util-weighted progress u_a v_a + u_b v_b is about 1.06 wherever the summed util exceeds 1.25
  (1.05-1.09 per bin, 96 H200 pairs); both speeds are scaled to min(summed util, a fitted
  total), an eighth parameter. Fit on the other workloads, leave one out over 40: form MAE
  0.135 -> 0.125 (bench/results/interference_forms.md). The earlier hogging-only logistic
  stays as `mps_form="hogging"` (the simulator's seed: it needs util, SM and DRAM only);
  artifacts saved before `mps_form` existed (5 MPS numbers) load as that form.

Step time is the one signal DCGM does not carry. A cluster has it where it measures speed at
all: the application's progress counter (`foresight_app_iterations_total`) that the pair
builder reads gives the solo rate, and 1 / rate is the step. Where a pod has no counter the
training median step is used (the form then reduces to busy-share arithmetic).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from scipy.optimize import least_squares, minimize

MODES = ("timeslice", "mps")
_EPS = 0.02  # keeps the MPS hogging finite for a job that is never idle
_MAX_WEIGHT = 4.0  # |weight| of the busy-share and DRAM terms (the 5-number hogging form)
#: Ridge on the MPS priority weights: a few dozen pairs per fit, seven weights.
_MPS_RIDGE = 0.03
#: Bound on the fitted MPS total: concurrent kernels may overlap, so util-weighted progress can
#: pass 1 (1.06 on the H200 pairs), not by much.
_MPS_MAX_TOTAL = 1.3
_READY_ITERS = 12  # the pair's fixed point settles to < 1e-4 within ~8 on the H200 pairs
_MPS_FEATURES = ("hogging", "log10 step ms", "tensor", "dram", "occupancy", "log util",
                 "sm per busy")
#: SM activity at or under this (0 at DCGM's four decimals) while the GPU reads busy: the busy
#: time is copy engines (DMA), not kernels. Time slices and MPS share the SMs, not the copy
#: engines: on the H200 the two pure copy jobs measured (h2d_copy, d2h_copy: ~99 % GPU util,
#: SM activity 0.0000) cost their partners nothing in either mode and were not slowed. A
#: job of tiny kernels still shows some (small_kernels: 0.0003 at 25 % util).
_NO_SM = 5e-5
_LEGACY_FORMS = ("busy", "hogging")
_STARTS = {"timeslice": ([2.0, 0.2], [5.0, 0.5], [1.0, 0.05]),
           "mps": ([-3.0, 1.0, 1.0, 0.0, 0.0], [-1.0, 0.5, 0.5, 0.5, 0.0],
                   [-0.5, 1.5, 1.5, 2.0, 1.0])}


def _col(d: Mapping[str, Any], name: str, n: int) -> np.ndarray:
    return np.asarray(d[name], float) if name in d else np.full(n, np.nan)


def _busy(d: Mapping[str, Any], role: str, n: int) -> np.ndarray:
    """GPU busy share 0-1 from gpu_util (percent); SM activity when util is absent."""
    u = _col(d, f"{role}_gpu_util", n) / 100.0
    return np.clip(np.where(np.isnan(u), _col(d, f"{role}_sm_active", n), u), 0.0, 1.0)


def timeslice_speed(u: np.ndarray, s: np.ndarray, up: np.ndarray, sp: np.ndarray,
                    slice_ms: float, switch_ms: float, ready: bool = False,
                    occupancy: float | None = None) -> np.ndarray:
    """Round-robin speed of a job (busy share u, step s seconds) beside a partner (up, sp).

    The partner takes a slice when it has work queued at one of the job's slice ends: with
    probability its solo busy share, or, with `ready`, the share of wall time it is not in its
    own CPU phase while co-located, 1 - (1 - up) x its co-located speed (a partner held back by
    the job's slices is ready more often than its solo util says: a launch-bound job's tiny
    kernels queue up behind every slice). The two speeds then depend on each other: solved by
    fixed-point iteration from 1.

    With `occupancy` (ready form only) the form sets the split and the GPU's work-conserving
    round robin sets the total: both speeds are scaled so that the pair keeps the GPU busy
    min(u + up, occupancy) of the time (occupancy < 1: what context switches cost). On the
    H200 pairs the true total is 0.96 when the summed util exceeds 1.5, against 0.86 that the
    slices alone give; fit on other workloads, MAE of the form 0.079 -> 0.073
    (bench/results/interference_forms.md)."""
    if not ready:
        return _slice_speed(u, s, up, sp, up, slice_ms, switch_ms)
    v_self, v_part = np.ones(np.shape(u)), np.ones(np.shape(up))
    for _ in range(_READY_ITERS):
        v_self, v_part = (_slice_speed(u, s, up, sp, _ready(up, v_part), slice_ms, switch_ms),
                          _slice_speed(up, sp, u, s, _ready(u, v_self), slice_ms, switch_ms))
    return v_self if occupancy is None else _conserve(u, up, v_self, v_part, occupancy)


def _conserve(u: np.ndarray, up: np.ndarray, v_self: np.ndarray, v_part: np.ndarray,
              total: float) -> np.ndarray:
    """The job's speed once both are scaled so that the pair's util-weighted progress
    u v_self + up v_part is min(u + up, total): the form sets the split, the total the sum."""
    busy = u * v_self + up * v_part
    scale = np.where(busy > 0, np.minimum(u + up, total) / np.maximum(busy, 1e-9), 1.0)
    return np.minimum(1.0, v_self * scale)


def _ready(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Share of wall time a job of busy share u, co-located at speed v, has GPU work queued or
    running (1 - its CPU phase's share); a job with no GPU work never has."""
    return np.where(u > 0, 1.0 - (1.0 - u) * v, 0.0)


def _slice_speed(u: np.ndarray, s: np.ndarray, up: np.ndarray, sp: np.ndarray,
                 p_ready: np.ndarray, slice_ms: float, switch_ms: float) -> np.ndarray:
    s_ms, w = 1e3 * s, 1e3 * u * s
    waits = np.maximum(1.0, np.ceil(w / slice_ms))
    hold = np.minimum(slice_ms, 1e3 * up * sp) + switch_ms
    return s_ms / (s_ms + p_ready * waits * hold)


def mps_priority_x(u: np.ndarray, sm: np.ndarray, step_s: np.ndarray, tensor: np.ndarray,
                   dram: np.ndarray, occ: np.ndarray) -> np.ndarray:
    """One side's MPS contention features (_MPS_FEATURES), rows x 7; missing fields count 0.

    "sm per busy" (SM activity / GPU util) tells a launch- or latency-bound job (busy, yet
    its tiny kernels leave the SMs idle: it then waits behind every block of a partner) from
    one that fills the SMs when it runs."""
    h = -np.log(1.0 - np.clip(sm * u, 0.0, 1.0) + _EPS)
    step_ms = np.log10(np.clip(1e3 * step_s, 1e-3, 1e5))
    per_busy = np.clip(sm / np.maximum(u, 0.05), 0.0, 1.0)
    return np.column_stack([h, step_ms, np.nan_to_num(tensor), np.nan_to_num(dram),
                            np.nan_to_num(occ), np.log(np.maximum(u, 0.01)), per_busy])


def mps_priority_speed(x_self: np.ndarray, x_part: np.ndarray, u_part: np.ndarray,
                       params: np.ndarray) -> np.ndarray:
    """MPS speed from the contention priority k + w . (x_self - x_partner), weighted by how
    often the partner is busy at all."""
    eta = params[0] + (x_self - x_part) @ np.asarray(params[1:], float)
    win = 1.0 / (1.0 + np.exp(-np.clip(eta, -30, 30)))
    return 1.0 - np.clip(u_part, 0.0, 1.0) * (1.0 - win)


def mps_conserve_speed(x_self: np.ndarray, x_part: np.ndarray, u: np.ndarray,
                       u_part: np.ndarray, params: np.ndarray) -> np.ndarray:
    """The priority form's split, scaled so that the pair's util-weighted progress is
    min(u + u_part, total), total = params[-1] (MPS keeps the GPU busy while both have work)."""
    prio, total = np.asarray(params[:-1], float), float(np.clip(params[-1], 0.5, _MPS_MAX_TOTAL))
    return _conserve(u, u_part, mps_priority_speed(x_self, x_part, u_part, prio),
                     mps_priority_speed(x_part, x_self, u, prio), total)


def mps_speed(u: np.ndarray, sm: np.ndarray, dram: np.ndarray, up: np.ndarray,
              smp: np.ndarray, dramp: np.ndarray, params: np.ndarray) -> np.ndarray:
    """The earlier hogging-only MPS form (5 params), kept so fitted artifacts and the demo's
    committed sharing seed predict as they were fit."""
    a, b, c, e, f = params
    # bounded: fit on a few dozen pairs, an unbounded weight on the busy share once made a
    # held-out latency-bound job look immune (e = 17: u = 0.6 -> speed 1.0; it ran at 0.3)
    e, f = np.clip(e, -_MAX_WEIGHT, _MAX_WEIGHT), np.clip(f, -_MAX_WEIGHT, _MAX_WEIGHT)
    h_self = -np.log(1.0 - np.clip(sm * u, 0.0, 1.0) + _EPS)
    h_part = -np.log(1.0 - np.clip(smp * up, 0.0, 1.0) + _EPS)
    eta = a + b * h_part - c * h_self + e * np.log(np.maximum(u, 0.01)) \
        + f * np.nan_to_num(dram) * np.nan_to_num(dramp)
    return 1.0 / (1.0 + np.exp(np.clip(eta, -30, 30)))


class SharingMechanism:
    """fit(directed rows, y) / predict(directed rows): the mechanism's speed per directed row,
    NaN where the row's sharing mode has no form (mig, node) or was not fit."""

    def __init__(self, min_rows: int = 6, mps_form: str = "priority",
                 ts_form: str = "busy") -> None:
        self.min_rows = min_rows
        # "priority", "conserve" (priority, and the pair's total a parameter), or "hogging":
        # needs util, SM and DRAM only
        self.mps_form = mps_form
        # "busy" (the partner's solo util), "ready", or "conserve" (ready, and the pair's total
        # occupancy a third parameter): timeslice_speed
        self.ts_form = ts_form

    def _inputs(self, d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if "sharing" in d:
            sharing = np.asarray(d["sharing"], dtype=object)
        else:  # a DataFrame without the column: no mode, no mechanism
            sharing = np.full(len(d), "", dtype=object)
        n = len(sharing)
        out = {}
        for role in ("self", "partner"):
            out[f"{role}_u"] = _busy(d, role, n)
            sm = _col(d, f"{role}_sm_active", n)
            out[f"{role}_sm"] = np.where(np.isnan(sm), out[f"{role}_u"], sm)
            # runs kernels: busy, and no known SM activity that says its busy time is copies
            out[f"{role}_kernels"] = (out[f"{role}_u"] > 0) & ~(sm <= _NO_SM)
            out[f"{role}_step"] = _col(d, f"{role}_step_s", n)
            out[f"{role}_dram"] = _col(d, f"{role}_dram_active", n)
            out[f"{role}_tensor"] = _col(d, f"{role}_tensor_active", n)
            out[f"{role}_occ"] = _col(d, f"{role}_sm_occupancy", n)
        out["sharing"] = sharing
        return out

    def _steps(self, x: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Each side's step, the training median where a pod has no progress counter."""
        typical = self.params_.get("timeslice_step_s", 0.01) if hasattr(self, "params_") \
            else 0.01
        return (np.where(np.isnan(x["self_step"]), typical, x["self_step"]),
                np.where(np.isnan(x["partner_step"]), typical, x["partner_step"]))

    def _priority_x(self, x: dict[str, np.ndarray], role: str, step: np.ndarray) -> np.ndarray:
        return mps_priority_x(x[f"{role}_u"], x[f"{role}_sm"], step, x[f"{role}_tensor"],
                              x[f"{role}_dram"], x[f"{role}_occ"])

    def _legacy(self, mode: str) -> bool:
        return (self.ts_form if mode == "timeslice" else self.mps_form) in _LEGACY_FORMS

    def _speed(self, x: dict[str, np.ndarray], mode: str, params: np.ndarray) -> np.ndarray:
        """The form's speed; with the current forms, 1 where either side runs no kernels
        (nothing contends for the SMs, and the pair totals, fit where both run kernels, do not
        apply). The legacy forms ("busy", "hogging": the simulator's committed seed, earlier
        artifacts) predict as they were fit."""
        speed = self._form_speed(x, mode, params)
        if self._legacy(mode):
            return speed
        return np.where(x["self_kernels"] & x["partner_kernels"], speed, 1.0)

    def _form_speed(self, x: dict[str, np.ndarray], mode: str, params: np.ndarray
                    ) -> np.ndarray:
        s, sp = self._steps(x)
        if mode == "timeslice":
            return timeslice_speed(x["self_u"], s, x["partner_u"], sp,
                                   abs(params[0]) + 1e-3, abs(params[1]),
                                   ready=self.ts_form in ("ready", "conserve"),
                                   occupancy=float(np.clip(params[2], 0.5, 1.0))
                                   if self.ts_form == "conserve" else None)
        if self.mps_form == "hogging":
            return mps_speed(x["self_u"], x["self_sm"], x["self_dram"], x["partner_u"],
                             x["partner_sm"], x["partner_dram"], params)
        xs, xp = self._priority_x(x, "self", s), self._priority_x(x, "partner", sp)
        if self.mps_form == "conserve":
            return mps_conserve_speed(xs, xp, x["self_u"], x["partner_u"], params)
        return mps_priority_speed(xs, xp, x["partner_u"], params)

    def _fit_mps(self, sub: dict[str, np.ndarray], target: np.ndarray) -> list[float]:
        """Robust least squares (soft L1: a few noisy 3 s windows must not steer it), ridge on
        the weights."""
        s, sp = self._steps(sub)
        xs, xp = self._priority_x(sub, "self", s), self._priority_x(sub, "partner", sp)
        ridge, n_w = np.sqrt(_MPS_RIDGE), len(_MPS_FEATURES)
        start = np.zeros(1 + n_w)
        if self.mps_form == "conserve":  # the total (last) is not a weight: no ridge on it
            start = np.r_[start, 1.0]

        def speed(p: np.ndarray) -> np.ndarray:
            if self.mps_form == "conserve":
                return mps_conserve_speed(xs, xp, sub["self_u"], sub["partner_u"], p)
            return mps_priority_speed(xs, xp, sub["partner_u"], p)

        r = least_squares(lambda p: np.r_[speed(p) - target, ridge * p[1:1 + n_w]], start,
                          loss="soft_l1", f_scale=0.1)
        return [float(v) for v in r.x]

    def fit(self, d: Mapping[str, Any], y: np.ndarray) -> "SharingMechanism":
        """Per mode, the parameters of lowest error: time-slicing and the hogging MPS form by
        mean absolute error (Nelder-Mead, a few starts), the priority MPS form by _fit_mps."""
        x = self._inputs(d)
        y = np.asarray(y, float)
        self.params_: dict[str, Any] = {}
        steps = np.concatenate([x["self_step"], x["partner_step"]])
        steps = steps[np.isfinite(steps)]
        if len(steps):
            self.params_["timeslice_step_s"] = float(np.median(steps))
        for mode in MODES:
            rows = (x["sharing"] == mode) & np.isfinite(y) & ~np.isnan(x["self_u"]) \
                & ~np.isnan(x["partner_u"])
            if not self._legacy(mode):  # a side without kernels is 1.0 whatever the parameters
                rows &= x["self_kernels"] & x["partner_kernels"]
            if rows.sum() < self.min_rows:
                continue
            sub = {k: v[rows] for k, v in x.items()}
            target = y[rows]
            if mode == "mps" and self.mps_form in ("priority", "conserve"):
                self.params_[mode] = self._fit_mps(sub, target)
                continue
            best = None
            starts = list(_STARTS[mode])
            if mode == "timeslice" and self.ts_form == "conserve":
                starts = [[*p, 0.95] for p in starts]
            if mode == "timeslice":  # ceil() makes the loss a staircase in T: grid, then refine
                grid = [(t, c) for t in np.geomspace(0.1, 50, 40) for c in (0.0, 0.1, 0.3, 1.0)]
                if self.ts_form == "conserve":
                    grid = [(*g, o) for g in grid for o in (0.9, 0.95)]
                loss = [np.mean(np.abs(self._speed(sub, mode, np.array(g)) - target)) for g in grid]
                starts.append(list(grid[int(np.argmin(loss))]))
            for start in starts:
                r = minimize(lambda p: float(np.mean(np.abs(self._speed(sub, mode, p) - target))),
                             np.asarray(start, float), method="Nelder-Mead",
                             options={"maxiter": 1500, "xatol": 1e-4, "fatol": 1e-6})
                if best is None or r.fun < best.fun:
                    best = r
            self.params_[mode] = [float(v) for v in best.x]
        return self

    @property
    def modes_(self) -> list[str]:
        return [m for m in MODES if m in getattr(self, "params_", {})]

    def predict(self, d: Mapping[str, Any]) -> np.ndarray:
        x = self._inputs(d)
        out = np.full(len(x["sharing"]), np.nan)
        for mode in self.modes_:
            rows = (x["sharing"] == mode) & ~np.isnan(x["self_u"]) & ~np.isnan(x["partner_u"])
            if rows.any():
                sub = {k: v[rows] for k, v in x.items()}
                out[rows] = self._speed(sub, mode, np.asarray(self.params_[mode]))
        return np.clip(out, 0.01, 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"min_rows": self.min_rows, "mps_form": self.mps_form, "ts_form": self.ts_form,
                "params": self.params_}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "SharingMechanism":
        params = dict(body["params"])
        old = len(params.get("mps", ())) == 5  # saved before mps_form existed
        m = cls(min_rows=int(body.get("min_rows", 6)),
                mps_form=str(body.get("mps_form", "hogging" if old else "priority")),
                ts_form=str(body.get("ts_form", "busy")))
        m.params_ = params
        return m
