"""Model predictions the scores read, behind small interfaces other packages implement.

The hot path only calls these in-memory objects; a background loop (or a test) swaps them.
Each slot records when it was loaded and how old it may get; a missing, stale or crashed
provider puts the hook in fallback mode (allocation-based packing), never in a failing one.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

log = logging.getLogger("foresight.extender")


@runtime_checkable
class InterferenceProvider(Protocol):
    def speeds(self, workload: str, others: Sequence[str], sharing: str
               ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted co-located/solo speed of `workload` beside each of `others`, and of each
        of `others` beside `workload` (1.0 = no slowdown). NaN where unknown."""


@runtime_checkable
class FingerprintProvider(Protocol):
    def peak_fb_mib(self, workloads: Sequence[str]) -> np.ndarray:
        """Predicted peak framebuffer (MiB) of each workload, NaN where unknown."""

    def power_w(self, workloads: Sequence[str]) -> np.ndarray:
        """Predicted mean power draw (W) of each workload per GPU, NaN where unknown."""


@runtime_checkable
class DemandForecaster(Protocol):
    def shape_mix(self) -> dict[tuple[int, int], float]:
        """Forecast share of each pod shape (gpus, milli per GPU) over the next horizon."""

    def reserved_whole_gpus(self) -> float:
        """Forecast high-priority / gang demand, in whole free GPUs to keep on empty nodes."""


@runtime_checkable
class CarbonProvider(Protocol):
    def intensity(self, regions: Sequence[str]) -> np.ndarray:
        """Grid carbon intensity (gCO2/kWh) now for each region, NaN where unknown."""


@runtime_checkable
class RuntimeProvider(Protocol):
    def runtime_s(self, pod: Any) -> float | None:
        """Predicted run time (s) of a pending pod at the configured quantile, None unknown."""


#: Slots whose absence means "no model-based scoring": the fallback trigger.
MODEL_SLOTS = ("interference", "fingerprint")
ALL_SLOTS = ("interference", "fingerprint", "demand", "carbon", "runtime")


@dataclass
class Slot:
    provider: Any = None
    loaded_at: float = 0.0
    max_age_s: float = 3600.0
    error: str = ""

    def status(self, now: float) -> str:
        if self.provider is None:
            return "missing"
        return "stale" if now - self.loaded_at > self.max_age_s else "fresh"


@dataclass
class ProviderSet:
    """The providers in service. Scores are cached per `version`: replace a provider through
    `set` (a new object or a reloaded one) rather than mutating it in place."""

    slots: dict[str, Slot] = field(default_factory=lambda: {s: Slot() for s in ALL_SLOTS})
    version: int = 0

    def set(self, slot: str, provider: Any, max_age_s: float = 3600.0,
            loaded_at: float | None = None) -> None:
        self.slots[slot] = Slot(provider, time.time() if loaded_at is None else loaded_at,
                                max_age_s)
        self.version += 1

    def fresh(self, slot: str) -> Any:
        """The provider if loaded and not stale, else None: stale predictions are not used."""
        s = self.slots.get(slot)
        return s.provider if s is not None and s.status(time.time()) == "fresh" else None

    def status(self) -> dict[str, dict[str, str]]:
        now = time.time()
        return {k: {"status": s.status(now), **({"error": s.error} if s.error else {})}
                for k, s in self.slots.items()}

    @property
    def fallback(self) -> bool:
        return any(self.fresh(s) is None for s in MODEL_SLOTS)


def _call(fn: Any, registry: str, cfg: dict[str, Any]) -> Any:
    """fn(registry, cfg) when the loader takes the config too, else fn(registry)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn(registry)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_cfg = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
    return fn(registry, cfg) if takes_cfg else fn(registry)


def load_registry(registry: str | None, loaders: dict[str, str], max_age_s: float,
                  providers: ProviderSet | None = None, cfg: dict[str, Any] | None = None
                  ) -> ProviderSet:
    """Call each configured `module:function(registry_dir[, cfg])` loader; a loader that is
    absent or raises leaves its slot missing (or its previous provider in place) with the error
    recorded. Never raises."""
    providers = providers or ProviderSet()
    if not registry:
        for slot in providers.slots.values():
            slot.error = slot.error or "no --registry given"
        return providers
    for slot, target in loaders.items():
        try:
            mod, _, fn = target.partition(":")
            provider = _call(getattr(importlib.import_module(mod), fn), registry, cfg or {})
            if provider is None:
                raise LookupError("loader found no model")
            providers.set(slot, provider, max_age_s)
        except Exception as exc:  # noqa: BLE001 - a broken loader must not take the hook down
            log.warning("provider %s not loaded from %s: %s", slot, registry, exc)
            providers.slots.setdefault(slot, Slot()).error = f"{type(exc).__name__}: {exc}"[:200]
    return providers
