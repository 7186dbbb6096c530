"""Topology from node labels, and where a gang should go in it.

A topology is an ordered list of node-label keys (levels). The defaults cover the conventions in
use: GPU feature discovery's NVLink clique (`nvidia.com/gpu.clique`), NVIDIA topograph /
Koordinator (`network.topology.nvidia.com/{accelerator,block,spine}`), the Kueue / KAI examples
(`cloud.provider.com/topology-{rack,block}`) and the node itself (`kubernetes.io/hostname`,
falling back to the node name). A domain of a level is the set of nodes sharing that label's
value; nodes without the label are in no domain of it. Nesting is read from the data (a level is
inside another when each of its domains lies in one domain of the other), so the list need not be
ordered coarse to fine for placement; the order is only the tie-break and the gauges' order.

A pod asks for a level with Kueue's `kueue.x-k8s.io/podset-{required,preferred}-topology` or
KAI's `kai.scheduler/topology-{required,preferred}-placement` annotations; both name a node
label key. Gang size: Kueue's `kueue.x-k8s.io/pod-group-total-count` or our `foresight.io/gang-size`
annotation, else the PodGroup's minMember (scheduler-plugins, Volcano, KAI; known when listed),
else the members the state has seen.

Everything here is plain arrays over rows, so the extender's state and the replays share it:
`encode` turns a list of label dicts into domain codes, `plan_gang` picks the domain.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HOSTNAME = "kubernetes.io/hostname"
DEFAULT_LEVELS = (
    "nvidia.com/gpu.clique",                       # GFD: NVLink domain across nodes (GB200 NVL72)
    "network.topology.nvidia.com/accelerator",     # topograph: NVLink / accelerator domain
    "network.topology.nvidia.com/block",           # topograph: leaf-switch block
    "network.topology.nvidia.com/spine",           # topograph: spine
    "cloud.provider.com/topology-rack",            # Kueue / KAI documentation levels
    "cloud.provider.com/topology-block",
    HOSTNAME,
)
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KUEUE_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
GANG_SIZE_ANNOTATION = "foresight.io/gang-size"
GANG_MIN_ANNOTATION = "foresight.io/gang-min"  # elastic gangs (PyTorch elastic min nodes)


def _int(v: Any) -> int:
    try:
        return max(0, int(str(v).strip()))
    except (TypeError, ValueError):
        return 0  # unreadable: the size falls back to the PodGroup or the members seen


def gang_min(ann: dict) -> int:
    """An elastic gang's minimum size (`foresight.io/gang-min`), 0 when not elastic."""
    return _int(ann.get(GANG_MIN_ANNOTATION))


def pod_topology(labels: dict, ann: dict) -> tuple[int, str, str]:
    """(gang size or 0, required level or "", preferred level or "") from a pod's metadata."""
    size = _int(ann.get(GANG_SIZE_ANNOTATION)) or _int(ann.get(KUEUE_GROUP_TOTAL))
    req = str(ann.get(KUEUE_REQUIRED) or ann.get(KAI_REQUIRED) or "").strip()
    pref = str(ann.get(KUEUE_PREFERRED) or ann.get(KAI_PREFERRED) or "").strip()
    return size, req, pref


def levels_of(cfg_or_state: Any) -> tuple[str, ...]:
    """Configured levels: from a config dict (`topology.levels`) or a state `configure` set."""
    if isinstance(cfg_or_state, dict):
        lv = (cfg_or_state.get("topology") or {}).get("levels")
        return tuple(lv) if lv else DEFAULT_LEVELS
    return getattr(cfg_or_state, "topology_levels", DEFAULT_LEVELS)


def configure(state: Any, cfg: dict) -> None:
    """Give the state the configured levels (the indicators read them from there)."""
    state.topology_levels = levels_of(cfg)


@dataclass
class Domains:
    """Per level present on some node: a domain code per row (-1: none) and the values."""

    levels: tuple[str, ...]
    codes: dict[str, np.ndarray]
    values: dict[str, list[str]]
    _nested: dict[tuple[str, str], bool] = field(default_factory=dict)

    def nested(self, inner: str, outer: str) -> bool:
        """Does every domain of `inner` lie inside one domain of `outer`?"""
        key = (inner, outer)
        if key not in self._nested:
            a, b = self.codes[inner], self.codes[outer]
            m = a >= 0
            ok = bool(m.any()) and not (b[m] < 0).any()
            if ok:
                pairs = np.unique(a[m].astype(np.int64) * (len(self.values[outer]) + 1) + b[m])
                ok = len(pairs) == len(np.unique(a[m]))
            self._nested[key] = ok
        return self._nested[key]

    def name(self, level: str, code: int) -> str:
        return self.values[level][code] if code >= 0 else "(none)"


def encode(labels: list[dict | None], levels: tuple[str, ...], names: list[str] | None = None
           ) -> Domains:
    """Domain codes of each row for each level some row carries. `labels[r]` None: no node.
    The hostname level falls back to `names[r]` (the node name)."""
    codes: dict[str, np.ndarray] = {}
    values: dict[str, list[str]] = {}
    for level in levels:
        index: dict[str, int] = {}
        arr = np.full(len(labels), -1, np.int32)
        for r, lab in enumerate(labels):
            if lab is None:
                continue
            v = lab.get(level) or (names[r] if level == HOSTNAME and names else "")
            if v:
                arr[r] = index.setdefault(str(v), len(index))
        if index:
            codes[level], values[level] = arr, list(index)
    return Domains(tuple(lv for lv in levels if lv in codes), codes, values)


def state_domains(state: Any, levels: tuple[str, ...] | None = None) -> Domains:
    """Domains of a ClusterState's rows, cached until a node is added, removed or relabelled
    (caller holds state.lock)."""
    levels = tuple(levels) if levels else levels_of(state)
    key = (state.index_version, getattr(state, "labels_version", 0), levels)
    hit = state.__dict__.get("_topology_domains")
    if hit is not None and hit[0] == key:
        return hit[1]
    n = len(state.gpu_count)
    labels: list[dict | None] = [None] * n
    names = [""] * n
    for name, row in state.index.items():
        info = state.nodes.get(name)
        if info is not None:
            labels[row], names[row] = getattr(info, "labels", None) or {}, name
    dom = encode(labels, levels, names)
    state.__dict__["_topology_domains"] = (key, dom)
    return dom


@dataclass
class GangPlan:
    """Where the next pod of a gang should go, per row: `value` in [0, 1], `allowed` under a
    required level, and what it was decided from (for the reasons)."""

    level: str
    remaining: int
    value: np.ndarray
    allowed: np.ndarray
    domain_cap: np.ndarray          # per row: gang pods its `level` domain can take now
    anchor: int = -1                # `level` code of the gang-mates' domain, -1: none placed
    anchor_pods: int = 0
    target: tuple[str, int] | None = None  # smallest domain that holds the rest of the gang
    target_cap: int = 0
    best_cap: int = 0               # most gang pods any `level` domain can take now


def slots_per_row(free_milli: np.ndarray, usable: np.ndarray, ok_rows: np.ndarray,
                  gpus: int, need: np.ndarray) -> np.ndarray:
    """Copies of a pod (``gpus`` GPUs at ``need`` milli each, per row) each row can take now."""
    fits = usable & (free_milli >= need[:, None] - 1e-9)
    if gpus == 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(fits, np.floor(free_milli / np.maximum(need[:, None], 1.0)), 0)
        n = per.sum(axis=1)
    else:
        n = fits.sum(axis=1) // max(gpus, 1)
    return np.where(ok_rows, n, 0).astype(np.int64)


def _mates_domain(dom: Domains, level: str, slots: np.ndarray, gpus_total: np.ndarray,
                  remaining: int, member_rows: np.ndarray) -> tuple[str, int] | None:
    """The smallest domain nested in `level` that holds every placed gang-mate and has room
    for the `remaining` pods, if any."""
    best: tuple[float, tuple[str, int]] | None = None
    for lv in dom.levels:
        if lv == level or not dom.nested(lv, level):
            continue
        c = dom.codes[lv]
        mc = np.unique(c[member_rows])
        if len(mc) != 1 or mc[0] < 0:
            continue
        inside = c == mc[0]
        if slots[inside].sum() >= remaining:
            size = float(gpus_total[inside].sum())
            if best is None or size < best[0]:
                best = (size, (lv, int(mc[0])))
    return best[1] if best else None


def plan_gang(dom: Domains, level: str, slots: np.ndarray, gpus_total: np.ndarray,
              remaining: int, member_rows: np.ndarray, sticky: tuple[str, int] | None = None,
              min_remaining: int | None = None) -> GangPlan | None:
    """The domain for the next pod of a gang at `level` (None: no node carries `level`).

    Gang-mates placed: their (majority) `level` domain, nothing else, and in it first the
    smallest nested domain that holds all of them and has room for the rest. None placed: the smallest
    domain (by GPUs; `level` or a level nested in it) that can take the `remaining` pods now
    scores 1 (best fit: whole big domains stay free for the gangs to come); other `level`
    domains that can hold them score by how tightly (0.3-0.8); those that cannot, 0. An elastic
    gang (``min_remaining``) that no domain holds whole is planned at the largest size one
    domain holds now, if that is at least its minimum (`GangPlan.remaining` says which)."""
    codes = dom.codes.get(level)
    if codes is None:
        return None
    m = codes >= 0
    nl = len(dom.values[level])
    cap = np.bincount(codes[m], weights=slots[m], minlength=nl).astype(np.int64)
    row_cap = np.where(m, cap[np.maximum(codes, 0)], 0)
    mc = codes[member_rows] if len(member_rows) else codes[:0]
    mc = mc[mc >= 0]
    if len(mc):
        counts = np.bincount(mc, minlength=nl)
        anchor = int(np.argmax(counts))
        allowed = codes == anchor
        value = np.where(allowed & (slots > 0), 0.7, 0.0)
        inner = _mates_domain(dom, level, slots, gpus_total, remaining, member_rows)
        if inner is not None:  # the gang-mates share a smaller domain with room: there first
            value = np.where((dom.codes[inner[0]] == inner[1]) & (slots > 0), 1.0, value)
        return GangPlan(level, remaining, value, allowed, row_cap, anchor, int(counts[anchor]),
                        target=inner, best_cap=int(cap.max()))
    most = int(cap.max()) if len(cap) else 0
    if min_remaining is not None and min_remaining <= most < remaining:
        remaining = most  # elastic gang: the largest size one domain holds now, >= its minimum
    fits = cap >= remaining
    allowed = m & fits[np.maximum(codes, 0)]
    with np.errstate(divide="ignore", invalid="ignore"):
        tight = np.where(allowed, 0.3 + 0.5 * remaining / np.maximum(row_cap, 1), 0.0)
    best: tuple[tuple, tuple[str, int], int] | None = None
    if sticky is not None and sticky[0] in dom.codes and sticky[1] < len(dom.values[sticky[0]]):
        c = dom.codes[sticky[0]]
        scap = int(slots[c == sticky[1]].sum())
        if scap >= remaining:
            best = ((), sticky, scap)
    for order, lv in enumerate(dom.levels if level in dom.levels else (*dom.levels, level)):
        if best is not None and best[0] == ():
            break
        if lv != level and not dom.nested(lv, level):
            continue
        c = dom.codes[lv]
        cm = c >= 0
        k = len(dom.values[lv])
        lcap = np.bincount(c[cm], weights=slots[cm], minlength=k)
        size = np.bincount(c[cm], weights=gpus_total[cm], minlength=k)
        ok = np.flatnonzero(lcap >= remaining)
        if len(ok):  # the level's best: fewest GPUs, then least room, then first seen
            code = int(ok[np.lexsort((lcap[ok], size[ok]))[0]])
            rank = (float(size[code]), float(lcap[code]), order)
            if best is None or rank < best[0]:
                best = (rank, (lv, code), int(lcap[code]))
    value = tight
    if best is not None:
        lv, code = best[1]
        value = np.where((dom.codes[lv] == code) & (slots > 0), 1.0, tight)
    return GangPlan(level, remaining, value, allowed, row_cap,
                    target=best[1] if best else None, target_cap=best[2] if best else 0,
                    best_cap=int(cap.max()) if len(cap) else 0)


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
CONFIG_KEYS = {"levels", "default_level", "remember", "keep_level", "soon_s", "spread_slowdown",
               "pack", "pack_gpus", "elastic_wait", "pack_level", "pack_gang_pods"}


def label_key_error(key: Any) -> str:
    """Why ``key`` is not a Kubernetes label key ("" when it is one): [prefix/]name, the
    prefix a DNS subdomain of at most 253 characters, the name at most 63."""
    if not isinstance(key, str) or not key:
        return f"{key!r} is not a label key (a non-empty string)"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (key.count("/") and not prefix):
        return f"{key!r} is not a label key ([prefix/]name)"
    if prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        return f"{key!r}: prefix {prefix!r} is not a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return f"{key!r}: name {name!r} is not a label name (63 characters at most, " \
               "alphanumerics, '-', '_', '.')"
    return ""


def check_config(cfg: dict, where: str = "config") -> None:
    """Raise ForesightError (one line) when the `topology` section is unusable: levels not a
    non-empty list of distinct label keys, a level key malformed, an unknown key, or numbers
    out of range."""
    from ground.errors import ForesightError

    sec = cfg.get("topology")
    if sec is None:
        return
    if not isinstance(sec, dict):
        raise ForesightError(f"{where}: topology must be a mapping")
    unknown = sorted(set(sec) - CONFIG_KEYS)
    if unknown:
        raise ForesightError(f"{where}: unknown key topology.{unknown[0]} (known: "
                             f"{', '.join(sorted(CONFIG_KEYS))})")
    levels = sec.get("levels")
    if not isinstance(levels, list) or not levels:
        raise ForesightError(f"{where}: topology.levels must be a non-empty list of node-label "
                             f"keys, got {levels!r}")
    for i, lv in enumerate(levels):
        err = label_key_error(lv)
        if err:
            raise ForesightError(f"{where}: topology.levels[{i}]: {err}")
    dup = sorted({lv for lv in levels if levels.count(lv) > 1})
    if dup:
        raise ForesightError(f"{where}: topology.levels lists {dup[0]!r} twice")
    for k in ("default_level", "keep_level", "pack_level"):
        if sec.get(k) is not None and label_key_error(sec[k]):
            raise ForesightError(f"{where}: topology.{k}: {label_key_error(sec[k])}")
    for k in ("pack", "elastic_wait"):
        if not isinstance(sec.get(k, False), bool):
            raise ForesightError(f"{where}: topology.{k} must be true or false, got "
                                 f"{sec[k]!r}")
    for k, lo in (("remember", 1.0), ("soon_s", 0.0), ("spread_slowdown", 1.0),
                  ("pack_gpus", 1.0), ("pack_gang_pods", 1.0)):
        v = sec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not v >= lo):
            raise ForesightError(f"{where}: topology.{k} must be a number >= {lo:g}, got {v!r}")
