"""GPU fragmentation measure of FGD ("Beware of Fragmentation", USENIX ATC'23), vectorized.

A node's free GPU milli are *fragments* with respect to a pod shape when that shape cannot use
them: all of the node's free GPU milli when the shape asks no GPU, is not allowed on the node's
GPU model, lacks CPU there, or finds fewer than ``num_gpu`` GPUs with ``gpu_milli`` free;
otherwise only the free milli of the GPUs that individually hold less than ``gpu_milli``. The
fragmentation of a node is the expectation of that amount over a *shape mix* (shape -> share).
FGD places a pod where it increases fragmentation least. The published FGD takes the mix from
the whole trace; the Foresight hook passes a forecast or the mix of pods seen so far
(`ShapeMixTracker`), never the future.

API (all arrays numpy; N nodes, G GPU slots per node, K shapes, M distinct per-GPU milli):
- ``ShapeMix(cpu_milli, gpu_milli, num_gpu, freq, models)`` — the mix; ``ShapeMix.from_pods``
  builds one from request columns, keeping the most frequent shapes up to ``coverage``.
  ``mix.access(node_models)`` -> (N, K) bool: may shape k run on node n's GPU model.
- ``node_fragmentation(gpu_free_milli, shapes, cpu_free_milli=None, access=None)`` -> float for
  one node (``gpu_free_milli`` of shape (G,)) or (N,) for many ((N, G)). Padding GPU slots of
  nodes with fewer GPUs hold 0 free milli and so never count.
- ``fragmentation_increase(gpu_free_milli, cpu_free_milli, shapes, access, pod_cpu_milli,
  pod_gpu_milli, pod_num_gpu, stats=None, nodes=None)`` -> (N, G) float: the fragmentation
  increase of placing the pod with its (first) GPU on slot g of node n; ``inf`` where that GPU
  cannot take it (and on nodes outside the optional ``nodes`` mask). For pods of whole GPUs or
  no GPU every feasible slot of a node holds the same value. CPU/memory feasibility is the
  caller's filter; this only scores. ``FGD score = -increase`` (the published plugin maps it
  to int(100 * sigmoid(-increase / 1000))).
- ``level_stats(gpu_free, mix_levels(shapes))`` -> (cnt, small), both (N, M): what the two
  functions above derive from the GPUs; a caller placing pods one by one may cache it and
  refresh only the row of the node it changed (pass it as ``stats``).
- ``ShapeMixTracker(half_life)`` — exponentially weighted counts of observed shapes;
  ``observe(cpu, gpu_milli, num_gpu, spec, weight=1)`` then ``mix()``.

Cost: O(N x G x M) per call, ~1 ms for 1,213 nodes x 8 GPUs (shared-GPU pods are evaluated
once per distinct free value per node).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

MILLI_PER_GPU = 1000


@dataclass(frozen=True)
class ShapeMix:
    """A distribution over pod shapes: per-GPU milli, GPU count, CPU milli, allowed GPU models."""

    cpu_milli: np.ndarray
    gpu_milli: np.ndarray  # per GPU: < 1000 for a shared GPU, 1000 for whole GPUs, 0 for none
    num_gpu: np.ndarray
    freq: np.ndarray
    models: tuple[frozenset[str] | None, ...] = ()  # None = any GPU model

    def __post_init__(self) -> None:
        if not self.models:
            object.__setattr__(self, "models", (None,) * len(self.freq))

    def __len__(self) -> int:
        return len(self.freq)

    @classmethod
    def from_pods(cls, cpu_milli: Sequence[float], gpu_milli: Sequence[float],
                  num_gpu: Sequence[float], gpu_spec: Sequence[str | None] | None = None,
                  weights: Sequence[float] | None = None, coverage: float = 1.0) -> ShapeMix:
        """Shape frequencies of a set of pods; keep the most frequent covering ``coverage``."""
        n = len(cpu_milli)
        specs = [_spec_key(s) for s in gpu_spec] if gpu_spec is not None else [""] * n
        w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
        counts: dict[tuple, float] = {}
        for c, g, k, s, wi in zip(np.asarray(cpu_milli), np.asarray(gpu_milli),
                                  np.asarray(num_gpu), specs, w):
            key = (int(c), int(g) if k > 0 else 0, int(k), s)
            counts[key] = counts.get(key, 0.0) + wi
        return cls.from_counts(counts, coverage)

    @classmethod
    def from_counts(cls, counts: dict[tuple, float], coverage: float = 1.0) -> ShapeMix:
        """From {(cpu_milli, gpu_milli, num_gpu, spec): weight}; ``spec`` '' or 'A|B'."""
        items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        total = sum(v for _, v in items) or 1.0
        kept, acc = [], 0.0
        for key, v in items:
            if acc >= coverage * total - 1e-9:
                break
            kept.append((key, v))
            acc += v
        freq = np.array([v for _, v in kept], dtype=float)
        freq = freq / freq.sum() if len(freq) else freq
        return cls(
            cpu_milli=np.array([k[0] for k, _ in kept], dtype=np.int64),
            gpu_milli=np.array([k[1] for k, _ in kept], dtype=np.int64),
            num_gpu=np.array([k[2] for k, _ in kept], dtype=np.int64),
            freq=freq,
            models=tuple(frozenset(k[3].split("|")) if k[3] else None for k, _ in kept),
        )

    def access(self, node_models: Sequence[str]) -> np.ndarray:
        """(N, K) bool: shape k may use node n's GPU model."""
        # per distinct model, then gathered: a cluster has a handful of models and many nodes
        uniq, inv = np.unique(np.asarray(list(node_models), dtype=str), return_inverse=True)
        table = np.ones((len(uniq), len(self)), dtype=bool)
        for k, allowed in enumerate(self.models):
            if allowed is not None:
                table[:, k] = [m in allowed for m in uniq.tolist()]
        return table[inv.ravel()]


def _spec_key(spec: object) -> str:
    if spec is None or (isinstance(spec, float) and np.isnan(spec)) or str(spec).strip() == "":
        return ""
    return "|".join(sorted(s.strip() for s in str(spec).split("|") if s.strip()))


def _as_2d(a: np.ndarray | Sequence, dtype=np.int64) -> tuple[np.ndarray, bool]:
    arr = np.asarray(a, dtype=dtype)
    return (arr[None, :], True) if arr.ndim == 1 else (arr, False)


class _Compiled:
    """The mix regrouped for speed: GPU shapes grouped by (per-GPU milli, GPU count, models).

    frag = total - sum_j [access_j and cnt(level_j) >= num_j] * W_j(cpu) * (total - small(level_j))
    where W_j(cpu) is the frequency of group j's shapes whose CPU fits in ``cpu``; shapes that ask
    no GPU see all free milli as fragments and so only contribute to ``total``.
    """

    def __init__(self, mix: ShapeMix) -> None:
        gpu = np.flatnonzero(mix.num_gpu > 0)
        keys: dict[tuple, int] = {}
        group = np.empty(len(gpu), dtype=np.int64)
        for i, k in enumerate(gpu):
            key = (int(mix.gpu_milli[k]), int(mix.num_gpu[k]), mix.models[k])
            group[i] = keys.setdefault(key, len(keys))
        _, first = np.unique(group, return_index=True)
        self.first_shape = gpu[first].astype(np.int64)
        gm = np.array([k[0] for k in keys], dtype=np.int64)
        self.num = np.array([k[1] for k in keys], dtype=np.int64)
        self.levels, self.level_of = np.unique(gm, return_inverse=True)
        self.cpu_steps = np.unique(mix.cpu_milli[gpu]) if len(gpu) else np.zeros(0, np.int64)
        wtab = np.zeros((len(self.cpu_steps) + 1, len(keys)))
        rank = np.searchsorted(self.cpu_steps, mix.cpu_milli[gpu])  # exact position
        np.add.at(wtab, (rank + 1, group), mix.freq[gpu])
        self.wtab = np.cumsum(wtab, axis=0)  # row r: shapes with cpu <= cpu_steps[r-1]

    def weights(self, cpu: np.ndarray | None, n: int) -> np.ndarray:
        if cpu is None:
            return np.broadcast_to(self.wtab[-1], (n, len(self.num)))
        return self.wtab[np.searchsorted(self.cpu_steps, cpu, side="right")]

    def group_access(self, access: np.ndarray | None, n: int) -> np.ndarray | None:
        """(N, J) bool, or None when every group may use every node (the common case)."""
        if access is None:
            return None
        cached = getattr(self, "_acc", None)
        if cached is not None and cached[0] is access:
            return cached[1]
        acc = np.asarray(access, dtype=bool).reshape(n, -1)[:, self.first_shape]
        out = None if acc.all() else acc
        self._acc = (access, out)  # keeps ``access`` alive, so the identity check is sound
        return out

    def frag(self, total: np.ndarray, cnt: np.ndarray, small: np.ndarray,
             weights: np.ndarray, gaccess: np.ndarray) -> np.ndarray:
        """Rows of level stats (P, M) -> fragmentation (P,)."""
        cnt_j, small_j = cnt[:, self.level_of], small[:, self.level_of]
        usable = cnt_j >= self.num
        if gaccess is not None:
            usable &= gaccess
        gain = np.where(usable, weights * (total[:, None] - small_j), 0.0)
        return total - gain.sum(axis=1)


def _compiled(shapes: ShapeMix) -> _Compiled:
    comp = shapes.__dict__.get("_compiled")
    if comp is None:  # cached on the (frozen) mix: it never changes
        comp = _Compiled(shapes)
        shapes.__dict__["_compiled"] = comp
    return comp


def mix_levels(shapes: ShapeMix) -> np.ndarray:
    """Distinct per-GPU milli of the mix's GPU shapes (the levels of ``level_stats``)."""
    return _compiled(shapes).levels


def level_stats(gpu_free: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node and milli level m: count of GPUs with >= m free, and free milli of those < m."""
    fits = gpu_free[:, :, None] >= levels[None, None, :]  # (N, G, M)
    cnt = fits.sum(axis=1)
    small = np.where(fits, 0, gpu_free[:, :, None]).sum(axis=1)
    return cnt, small


def node_fragmentation(gpu_free_milli: np.ndarray, shapes: ShapeMix,
                       cpu_free_milli: np.ndarray | float | None = None,
                       access: np.ndarray | None = None) -> float | np.ndarray:
    """Expected fragment milli of one node ((G,) -> float) or of many ((N, G) -> (N,))."""
    free, single = _as_2d(gpu_free_milli)
    n = free.shape[0]
    comp = _compiled(shapes)
    cpu = None if cpu_free_milli is None else np.broadcast_to(
        np.asarray(cpu_free_milli, dtype=np.int64), (n,))
    cnt, small = level_stats(free, comp.levels)
    out = comp.frag(free.sum(axis=1).astype(float), cnt, small, comp.weights(cpu, n),
                    comp.group_access(access, n))
    return float(out[0]) if single else out


def fragmentation_increase(gpu_free_milli: np.ndarray, cpu_free_milli: np.ndarray,
                           shapes: ShapeMix, access: np.ndarray | None, pod_cpu_milli: int,
                           pod_gpu_milli: int, pod_num_gpu: int,
                           stats: tuple[np.ndarray, np.ndarray] | None = None,
                           nodes: np.ndarray | None = None) -> np.ndarray:
    """(N, G) increase in fragmentation of placing the pod on (node, first GPU); inf = no fit.

    ``stats`` may pass cached ``level_stats(gpu_free, mix_levels(shapes))``; ``nodes`` (bool
    (N,)) limits the work to the nodes that passed the caller's filter.
    """
    free, _ = _as_2d(gpu_free_milli)
    n, g = free.shape
    cpu = np.asarray(cpu_free_milli, dtype=np.int64).reshape(n)
    comp = _compiled(shapes)
    cnt, small = stats if stats is not None else level_stats(free, comp.levels)
    gacc = comp.group_access(access, n)
    out = np.full((n, g), np.inf)
    every = nodes is None or bool(np.all(nodes))
    rows = np.arange(n) if every else np.flatnonzero(nodes)
    sel = slice(None) if every else rows  # views, not copies, when no node was filtered out
    sub = free[sel]
    total = sub.sum(axis=1).astype(float)
    cnt_r, small_r = cnt[sel], small[sel]
    gacc_r = None if gacc is None else gacc[sel]
    before = comp.frag(total, cnt_r, small_r, comp.weights(cpu[sel], len(rows)), gacc_r)
    w_after = comp.weights(cpu[sel] - pod_cpu_milli, len(rows))
    if pod_num_gpu == 0:
        out[sel] = (comp.frag(total, cnt_r, small_r, w_after, gacc_r) - before)[:, None]
        return out
    if pod_num_gpu > 1 or pod_gpu_milli >= MILLI_PER_GPU:
        # whole GPUs: they take fully free GPUs, which leave every count they were in
        used = MILLI_PER_GPU * pod_num_gpu
        lv = comp.levels  # each taken GPU goes from 1000 free to 0 free
        after = comp.frag(total - used, cnt_r - pod_num_gpu * ((MILLI_PER_GPU >= lv) & (lv > 0)),
                          small_r, w_after, gacc_r)
        whole = sub >= MILLI_PER_GPU
        ok = whole & (whole.sum(axis=1) >= pod_num_gpu)[:, None]
        out[sel] = np.where(ok, (after - before)[:, None], np.inf)
        return out
    # a shared GPU: one evaluation per (node, distinct free milli) that can take the pod
    r, c = np.nonzero(sub >= pod_gpu_milli)
    if len(r) == 0:
        return out
    key = r * (4 * MILLI_PER_GPU) + sub[r, c]
    uniq, inv = np.unique(key, return_inverse=True)
    ur, v = uniq // (4 * MILLI_PER_GPU), (uniq % (4 * MILLI_PER_GPU))[:, None]
    w = v - pod_gpu_milli
    lv = comp.levels
    cnt_p = cnt_r[ur] - (v >= lv) + (w >= lv)
    small_p = small_r[ur] - np.where(v < lv, v, 0) + np.where(w < lv, w, 0)
    after = comp.frag(total[ur] - pod_gpu_milli, cnt_p, small_p, w_after[ur],
                      None if gacc_r is None else gacc_r[ur])
    out[rows[r], c] = (after - before[ur])[inv.ravel()]
    return out


@dataclass
class ShapeMixTracker:
    """Exponentially weighted counts of the shapes seen so far (no look-ahead).

    ``half_life`` is in observed pods: a shape seen ``half_life`` pods ago weighs half.
    """

    half_life: float = 5000.0
    coverage: float = 1.0
    _counts: dict[tuple, float] = field(default_factory=dict)
    _scale: float = 1.0  # weights are stored divided by the running decay to keep updates O(1)

    def observe(self, cpu_milli: int, gpu_milli: int, num_gpu: int, spec: object = "",
                weight: float = 1.0) -> None:
        """Count one arrived pod (``weight`` e.g. its GPU request to weigh shapes by volume)."""
        self._scale *= 2.0 ** (1.0 / self.half_life)
        key = (int(cpu_milli), int(gpu_milli) if num_gpu > 0 else 0, int(num_gpu), _spec_key(spec))
        self._counts[key] = self._counts.get(key, 0.0) + self._scale * weight
        if self._scale > 1e100:  # renormalise before overflow
            self._counts = {k: v / self._scale for k, v in self._counts.items()}
            self._scale = 1.0

    def mix(self) -> ShapeMix:
        return ShapeMix.from_counts(self._counts, self.coverage)

    def __len__(self) -> int:
        return len(self._counts)
