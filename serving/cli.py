"""Wiring for `foresight serve`: the model store, its reload loop and the API app."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ground.errors import ForesightError


def build_api(only: str, hook: Any, registry: Path | None, reload_s: float,
              token_file: Path | None, demand_series: Path | None, max_body: int
              ) -> tuple[Any, Any]:
    """(app or None for the extender alone, poller or None). Loads the models once now."""
    from serving.app import Settings, create_api
    from serving.demand import DemandService
    from artifacts.adapters import install
    from serving.security import read_token
    from serving.store import ModelStore, Poller

    if registry is not None and not registry.is_dir():
        raise ForesightError(f"registry is not a directory: {registry}")
    if reload_s <= 0:
        raise ForesightError(f"--reload-s {reload_s}: must be > 0")
    if demand_series is not None and not demand_series.is_file():
        raise ForesightError(f"demand series not found: {demand_series}")
    store = ModelStore(str(registry) if registry else None)
    if hook is not None:
        install(store, hook.providers, float(hook.cfg["model_max_age_s"]))
    store.refresh()
    poller = None
    if registry is not None:
        poller = Poller(store, reload_s)
        poller.start()
    if only == "extender":
        return None, poller
    settings = Settings(token=read_token(token_file), max_body_bytes=max_body,
                        extender=only == "all")
    return create_api(store, hook, settings, DemandService(demand_series)), poller
