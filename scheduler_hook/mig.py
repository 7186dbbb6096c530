"""MIG slice model and geometry catalog (A100/H100/H200 class GPUs).

A GPU has 7 compute slices and 8 memory slices. A profile `<c>g.<m>gb` takes `c` compute slices
and a fixed run of memory slices that may start only at given positions (NVIDIA's MIG user
guide; table in data/mig/README.md's source, ../shared/mig/README.md):

    1g, one memory slice: 0-6 | 1g, two: 0,2,4,6 | 2g: 0,2,4 | 3g: 0,4 | 4g: 0 | 7g: 0

A geometry (profile -> instances per GPU) is valid when every instance gets a start position
with no two memory runs overlapping and at most 7 compute slices in use. The named geometries
come from NVIDIA mig-parted's `config-default.yaml` (copy in data/mig/), filtered per GPU model
by PCI device id where the file gives one, else by whether the model has every profile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import yaml

CONFIG_PATH = Path(__file__).resolve().parent.parent / "data" / "mig" / "config-default.yaml"
COMPUTE_SLICES, MEMORY_SLICES = 7, 8
# (compute slices, memory slices) -> allowed start positions on the memory-slice axis
STARTS: dict[tuple[int, int], tuple[int, ...]] = {
    (1, 1): (0, 1, 2, 3, 4, 5, 6), (1, 2): (0, 2, 4, 6), (2, 2): (0, 2, 4),
    (3, 4): (0, 4), (4, 4): (0,), (7, 8): (0,),
}
_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(?:([+-])(me|gfx|me\.all))?$")
Geometry = dict[str, int]  # profile -> instances per GPU


class MigError(ValueError):
    """A profile, GPU model or geometry outside the slice model (message names it)."""


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model: its total memory and the PCI ids mig-parted filters on."""

    name: str
    memory_gb: float
    device_ids: tuple[str, ...]
    profiles: tuple[str, ...]  # NVIDIA's list for the model; names alone are ambiguous

    @property
    def slice_gb(self) -> float:
        return self.memory_gb / MEMORY_SLICES


# Only the 7/8-slice GPUs (A30 has 4 slices and is left out on purpose).
_P80 = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_P96 = ("1g.12gb", "1g.24gb", "2g.24gb")
MODELS: dict[str, GpuModel] = {m.name: m for m in (
    GpuModel("A100-40GB", 40, ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
             ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    GpuModel("A100-80GB", 80, ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"), _P80),
    GpuModel("H100-80GB", 80, ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"), _P80),
    GpuModel("H100-94GB", 94, ("0x232110DE", "0x233A10DE"),
             (*_P96, "3g.47gb", "4g.47gb", "7g.94gb")),
    GpuModel("H100-96GB", 96, ("0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"),
             (*_P96, "3g.48gb", "4g.48gb", "7g.96gb")),
    GpuModel("H200-141GB", 141, ("0x233510DE", "0x233B10DE"),
             ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
)}


@dataclass(frozen=True)
class Profile:
    name: str          # as in the resource name, e.g. "3g.20gb" or "1g.5gb+me"
    compute: int       # compute slices
    memory: int        # memory slices
    memory_gb: int     # as named
    media: bool        # "+me": the GPU's only media-extension instance

    @property
    def starts(self) -> tuple[int, ...]:
        return STARTS[(self.compute, self.memory)]


@lru_cache(maxsize=1024)
def profile(name: str, model: GpuModel | str) -> Profile:
    """The slice shape of `name` on `model`; MigError when the model has no such profile."""
    m = MODELS[model] if isinstance(model, str) else model
    hit = _PROFILE.match(name)
    if not hit:
        raise MigError(f"MIG profile {name!r}: expected <c>g.<m>gb[+me]")
    c, gb, ext = int(hit.group(1)), int(hit.group(2)), hit.group(4)
    mem = round(gb / m.slice_gb)  # 1g comes in one- and two-slice sizes; others are fixed
    if f"{c}g.{gb}gb" not in m.profiles or (c, mem) not in STARTS:
        raise MigError(f"MIG profile {name!r} does not exist on {m.name}")
    if ext is not None and (ext != "me" or hit.group(3) != "+" or mem != 1):
        # media extensions exist only on single-memory 1g instances; +gfx/-me are Blackwell's
        raise MigError(f"MIG profile {name!r} does not exist on {m.name}")
    return Profile(name, c, mem, gb, ext == "me")


def profile_gb(name: str) -> int:
    """Memory of a profile as named (`3g.20gb` -> 20), model-free; 0 when unreadable."""
    hit = _PROFILE.match(name)
    return int(hit.group(2)) if hit else 0


def profile_compute(name: str) -> int:
    """Compute slices of a profile as named (`3g.20gb` -> 3), model-free; 0 when unreadable."""
    hit = _PROFILE.match(name)
    return int(hit.group(1)) if hit else 0


def place(geometry: Geometry, model: GpuModel | str) -> list[tuple[str, int]] | None:
    """Start position of every instance of `geometry` on one GPU, or None when none exists.

    Backtracking over at most 7 instances and 8 positions, largest instances first (they have
    the fewest starts), so it answers in microseconds. MigError for a profile the model lacks.
    """
    profs = sorted((profile(n, model) for n, k in geometry.items() for _ in range(int(k))),
                   key=lambda p: (-p.memory, -p.compute, p.name))
    if sum(p.compute for p in profs) > COMPUTE_SLICES or sum(p.media for p in profs) > 1:
        return None
    used = [False] * MEMORY_SLICES
    out: list[tuple[str, int]] = []

    def go(i: int) -> bool:
        if i == len(profs):
            return True
        p = profs[i]
        lo = out[-1][1] if i and profs[i - 1].name == p.name else -1  # same profile: no repeats
        for s in p.starts:
            if s <= lo or any(used[s:s + p.memory]):
                continue
            used[s:s + p.memory] = [True] * p.memory
            out.append((p.name, s))
            if go(i + 1):
                return True
            out.pop()
            used[s:s + p.memory] = [False] * p.memory
        return False

    return sorted(out, key=lambda x: x[1]) if go(0) else None


def is_valid(geometry: Geometry, model: GpuModel | str) -> bool:
    """Can one GPU of `model` be split into `geometry`? (unknown profiles: no)"""
    try:
        return place(geometry, model) is not None
    except MigError:
        return False


def stranded_compute(geometry: Geometry, model: GpuModel | str) -> int:
    """Compute slices of one GPU that no instance of `geometry` uses (e.g. 1 for 3g+3g)."""
    return COMPUTE_SLICES - sum(profile(n, model).compute * int(k) for n, k in geometry.items())


def geometry_label(geometry: Geometry) -> str:
    """`2x1g.5gb+1x3g.20gb`, largest profile last; `-` for an empty geometry."""
    parts = sorted(geometry.items(), key=lambda kv: (profile_compute(kv[0]), kv[0]))
    return "+".join(f"{k}x{n}" for n, k in parts if k) or "-"


# ---- GPU model of a node -------------------------------------------------------------------
def model_of(product: str, memory_mib: float = 0.0) -> GpuModel | None:
    """The MIG model of a `nvidia.com/gpu.product` value (`-MIG-<profile>` suffix ignored),
    using `nvidia.com/gpu.memory` (MiB of a whole GPU) where the name does not say; None when
    the product is not a MIG-capable GPU this catalog knows."""
    p = re.sub(r"-MIG-.*$", "", product.upper())
    gb = re.search(r"(\d+)\s*GB", p)
    mem = float(gb.group(1)) if gb else memory_mib / 1024.0
    if "A100" in p or "A800" in p:
        return MODELS["A100-80GB" if mem > 60 else "A100-40GB"] if mem > 0 else None
    if "H200" in p and "GH200" not in p:
        return MODELS["H200-141GB"]
    if "H100" in p or "H800" in p:
        if "NVL" in p:
            return MODELS["H100-94GB"]
        return MODELS["H100-96GB" if mem > 90 else "H100-80GB"]
    return None


# ---- named geometries from mig-parted's config-default.yaml -------------------------------
@dataclass(frozen=True)
class NamedConfig:
    name: str
    geometry: tuple[tuple[str, int], ...]  # per GPU, every GPU of the node ("devices: all")
    mig_enabled: bool = True

    @property
    def as_dict(self) -> Geometry:
        return dict(self.geometry)


def _ids(entry: dict) -> tuple[str, ...] | None:
    f = entry.get("device-filter")
    if f is None:
        return None
    return tuple(str(x).upper().replace("0X", "0x") for x in ([f] if isinstance(f, str) else f))


@lru_cache(maxsize=8)
def _raw_configs(path: str) -> dict[str, list[dict]]:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise MigError(f"MIG config file not found: {path}") from None
    configs = (doc or {}).get("mig-configs")
    if not isinstance(configs, dict):
        raise MigError(f"{path}: no mig-configs mapping")
    return configs


def configs_for(model: GpuModel | str, path: str | Path = CONFIG_PATH) -> dict[str, NamedConfig]:
    m = MODELS[model] if isinstance(model, str) else model
    return dict(_configs_for(m.name, str(path)))


@lru_cache(maxsize=64)
def _configs_for(model: str, path: str) -> dict[str, NamedConfig]:
    """The named configurations that apply to `model`, in file order.

    An entry with a `device-filter` applies when it lists one of the model's PCI ids; one
    without applies when the model has all of its profiles (the file only says which GPUs it
    means in comments). A config whose applicable entry is not valid under the slice model is
    still returned: `is_valid` is the check, and the tests run it on every one.
    """
    m = MODELS[model]
    out: dict[str, NamedConfig] = {}
    for name, entries in _raw_configs(path).items():
        chosen = None
        for e in entries or []:
            ids = _ids(e)
            if ids is not None:
                if set(ids) & set(m.device_ids):
                    chosen = e
                    break
            elif chosen is None and _all_profiles_exist(e.get("mig-devices") or {}, m):
                chosen = e
        if chosen is not None:
            devs = chosen.get("mig-devices") or {}
            out[name] = NamedConfig(name, tuple((str(k), int(v)) for k, v in devs.items()),
                                    bool(chosen.get("mig-enabled", False)))
    return out


def _all_profiles_exist(devices: dict, m: GpuModel) -> bool:
    try:
        for name in devices:
            profile(str(name), m)
    except MigError:
        return False
    return True


def maximal_geometries(model: GpuModel | str) -> list[Geometry]:
    """Every valid geometry of one GPU to which no further instance can be added (the
    candidates beyond the named ones; a few dozen per model)."""
    m = MODELS[model] if isinstance(model, str) else model
    return [dict(g) for g in _maximal(m.name)]


@lru_cache(maxsize=16)
def _maximal(model: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    m = MODELS[model]
    names = [n for n in _base_profiles(m)]
    found: set[tuple[tuple[str, int], ...]] = set()

    def grow(geo: Geometry, start: int) -> None:
        extended = False
        for i in range(start, len(names)):
            g2 = dict(geo)
            g2[names[i]] = g2.get(names[i], 0) + 1
            if is_valid(g2, m):
                extended = True
                grow(g2, i)
        if not extended and geo:
            if all(not is_valid({**geo, n: geo.get(n, 0) + 1}, m) for n in names):
                found.add(tuple(sorted(geo.items())))
    grow({}, 0)
    return tuple(sorted(found))


def _base_profiles(m: GpuModel) -> list[str]:
    """The profiles of `m`, media extensions left out, smallest first."""
    return sorted(m.profiles, key=lambda n: (profile(n, m).compute, profile(n, m).memory))


def parse_geometry(text: str | Iterable[str]) -> Geometry:
    """`"3g.20gb=2,1g.5gb=1"` (or a list of `profile=count`) -> {profile: count}."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: Geometry = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, _, count = item.partition("=")
        if not count.strip().isdigit():
            raise MigError(f"geometry item {item!r}: expected <profile>=<count>")
        out[name.strip()] = out.get(name.strip(), 0) + int(count)
    return out
