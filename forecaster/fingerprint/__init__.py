"""Fingerprint estimators: `from forecaster.fingerprint import FingerprintModel` (loaded on first use)."""
from forecaster.lazy import lazy_exports

__all__ = ["FingerprintModel"]
__getattr__ = lazy_exports(__name__, "model", __all__)
