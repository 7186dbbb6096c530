"""Extender configuration: the packaged defaults, overlaid by a user YAML file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ground.errors import ForesightError
from scheduler_hook.topology import check_config as check_topology

DEFAULT_PATH = Path(__file__).with_name("default_config.yaml")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) \
            else v
    return out


# sections whose keys are all in default_config.yaml (weights have their own message,
# topology its own check, loaders and power.rack_caps_w are open maps)
FIXED_SECTIONS = ("runtime", "power", "carbon", "demand", "fragmentation")


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """Defaults merged with `path`; unknown weight names or negative weights are user errors."""
    cfg = yaml.safe_load(DEFAULT_PATH.read_text())
    if path is None:
        return cfg
    try:
        user = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ForesightError(f"config not found: {path}") from None
    except OSError as exc:  # a directory, no permission: the user's to fix
        raise ForesightError(f"cannot read config {path}: "
                             f"{exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError as exc:
        raise ForesightError(f"config {path} is not UTF-8 text ({exc.reason} at offset "
                             f"{exc.start})") from None
    except yaml.YAMLError as exc:
        raise ForesightError(f"config {path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(user, dict):
        raise ForesightError(f"config {path}: expected a mapping at top level")
    unknown = sorted(map(str, set(user) - set(cfg)))
    if unknown:  # a misspelt key would otherwise leave its default silently in force
        raise ForesightError(f"config {path}: unknown key {unknown[0]!r} (known: "
                             f"{', '.join(sorted(cfg))})")
    _check_sections(cfg, user, f"config {path}")
    for sec in FIXED_SECTIONS:  # a misspelt key inside one is as silent as at top level
        extra = sorted(map(str, set(user.get(sec) or {}) - set(cfg[sec])))
        if extra:
            raise ForesightError(f"config {path}: unknown key {sec}.{extra[0]} (known: "
                                 f"{', '.join(sorted(cfg[sec]))})")
    merged = _merge(cfg, user)
    for key in ("weights", "fallback_weights"):
        for name, w in merged[key].items():
            if name not in cfg[key]:
                raise ForesightError(f"config {path}: unknown score component {name!r} in {key}")
            if not isinstance(w, (int, float)) or w < 0:
                raise ForesightError(f"config {path}: {key}.{name} must be a number >= 0")
    frag = merged.get("fragmentation") or {}
    for name, lo, hi in (("residue_weight", 0.0, float("inf")), ("residue_share", 0.0, 1.0)):
        v = frag.get(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
            raise ForesightError(f"config {path}: fragmentation.{name} must be a number in "
                                 f"[{lo:g}, {hi:g}]")
    check_topology(merged, f"config {path}")
    _check_drain(merged, f"config {path}")
    _check_demand(merged, f"config {path}")
    return merged


def _check_sections(base: dict, over: dict, where: str, prefix: str = "") -> None:
    """A section that is a mapping by default must stay one: `weights: 5` would otherwise
    replace it and fail later as an AttributeError (null too: it drops every default)."""
    for key, v in over.items():
        if not isinstance(base.get(key), dict):
            continue
        if not isinstance(v, dict):
            raise ForesightError(f"{where}: {prefix}{key} must be a mapping, got {v!r:.60} "
                                 f"(leave it out to keep the defaults)")
        _check_sections(base[key], v, where, f"{prefix}{key}.")


def _check_demand(cfg: dict, where: str) -> None:
    """The reservation's inputs, checked at start rather than at the first reload (where a
    bad one would only be a warning in the log, each time)."""
    import re

    from features.ingest import parse_duration

    d = cfg.get("demand") or {}
    q = d.get("reserve_quantile")
    if q not in ("p10", "p50", "p90"):
        raise ForesightError(f"{where}: demand.reserve_quantile must be p10, p50 or p90, "
                             f"got {q!r}")
    queues = d.get("reserve_queues")
    if not isinstance(queues, list) or not all(isinstance(x, str) and x for x in queues):
        raise ForesightError(f"{where}: demand.reserve_queues must be a list of queue names")
    url = d.get("prometheus_url")
    if url is not None and not (isinstance(url, str) and re.match(r"^https?://[^/\s]+", url)):
        raise ForesightError(f"{where}: demand.prometheus_url {url!r}: expected "
                             "http(s)://host:port")
    if url is not None and d.get("series") is not None:
        raise ForesightError(f"{where}: demand.prometheus_url and demand.series: give one")
    try:
        if parse_duration(str(d.get("history"))).total_seconds() <= 0:
            raise ValueError
    except (ForesightError, ValueError):
        raise ForesightError(f"{where}: demand.history {d.get('history')!r}: a duration such "
                             "as 8d or 36h") from None


def _check_drain(cfg: dict, where: str) -> None:
    """The drain component's and run-time provider's keys (issue 28): one-line errors."""
    for name, lo in (("drain_max_hold_s", 0.0), ("drain_big_gpus", 1.0),
                     ("drain_replan_s", 0.0), ("drain_big_order", 0.0)):
        v = cfg.get(name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < lo:
            raise ForesightError(f"{where}: {name} must be a number >= {lo:g}")
    q = (cfg.get("runtime") or {}).get("quantile") if isinstance(cfg.get("runtime"), dict) \
        else None
    if q not in ("p10", "p50", "p90"):
        raise ForesightError(f"{where}: runtime.quantile must be p10, p50 or p90, got {q!r}")
