"""Usage estimators: `from forecaster.usage import UsageForecaster` (loaded on first use)."""
from forecaster.lazy import lazy_exports

__all__ = ["UsageForecaster"]
__getattr__ = lazy_exports(__name__, "model", __all__)
