"""Interference estimators: `from forecaster.interference import InterferenceModel` (loaded on first use)."""
from forecaster.lazy import lazy_exports

__all__ = ["InterferenceModel"]
__getattr__ = lazy_exports(__name__, "model", __all__)
