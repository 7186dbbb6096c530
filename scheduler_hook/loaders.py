"""The default provider loaders (`loaders:` in default_config.yaml): the model in service in a
registry, behind the narrow interfaces of scheduler_hook.providers.

Interference and fingerprint models are wrapped by the same adapters the REST API uses
(artifacts.adapters), so the extender and the API score with the same numbers. Each loader
raises when the registry has nothing usable; load_registry records why and the slot stays
missing (fallback scoring).
"""
from __future__ import annotations

from typing import Any


def _current(registry: str, kind: str) -> tuple[Any, str]:
    """(model, version) of the version `current` points at, verified by the registry."""
    from artifacts.models import load_model
    from artifacts.registry import Registry

    reg = Registry(registry)
    version = reg.current(kind)
    if version is None:
        raise LookupError(f"no {kind} model published in {registry}")
    path, _ = reg.fetch(kind, version)
    return load_model(kind, path), version


def interference(registry: str) -> Any:
    """InterferenceProvider over the registry's interference model."""
    from artifacts.adapters import InterferenceAdapter

    return InterferenceAdapter(_current(registry, "interference")[0])


def fingerprint(registry: str) -> Any:
    """FingerprintProvider over the registry's fingerprint bundle."""
    from artifacts.adapters import FingerprintAdapter

    return FingerprintAdapter(_current(registry, "fingerprint")[0])


def demand(registry: str, cfg: dict[str, Any]) -> Any:
    """DemandForecaster over the registry's demand model (see scheduler_hook.demand)."""
    from scheduler_hook.demand import DemandProvider

    model, version = _current(registry, "demand")
    return DemandProvider.from_model(model, version, cfg.get("demand") or {})


def runtime(registry: str, cfg: dict[str, Any]) -> Any:
    """RuntimeProvider over the registry's runtime model, at ``runtime.quantile`` (the
    reservation's backfill and the drain plan read it), as the API's store serves it."""
    from artifacts.adapters import RuntimeAdapter

    q = str((cfg.get("runtime") or {}).get("quantile", "p50"))
    if q not in ("p10", "p50", "p90"):
        raise ValueError(f"runtime.quantile must be p10, p50 or p90, got {q!r}")
    return RuntimeAdapter(_current(registry, "runtime")[0], q)
