"""Demand estimators: `from forecaster.demand import DemandForecaster` (loaded on first use)."""
from forecaster.lazy import lazy_exports

__all__ = ["DemandForecaster"]
__getattr__ = lazy_exports(__name__, "model", __all__)
