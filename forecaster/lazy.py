"""Estimators of a family package loaded on first use (PEP 562): importing a light module of the
family (its features, its shapes) then does not import LightGBM."""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, module: str, names: list[str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that takes `names` from `package.module` when asked."""
    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(import_module(f"{package}.{module}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
