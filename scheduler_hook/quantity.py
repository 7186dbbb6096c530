"""Device counts in Kubernetes quantities (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`).

Extended resources are whole numbers (the API server refuses `1.5` or `-1` for them). The
extender also hears from tests, replays and hand-written snapshots, so it checks the same:
a count that is not finite, not whole, negative or absurd is the caller's error, not a 500.
"""
from __future__ import annotations

from decimal import InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

# Far above any node's devices (8 GPUs x time-slicing replicas x MIG slices) and far below
# what a JSON answer's 64-bit integers hold.
MAX_DEVICES = 1 << 20


def device_count(value: Any, what: str) -> int:
    """The whole number of devices ``value`` says; ValueError naming ``what`` otherwise."""
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        raise ValueError(f"{what}: not a Kubernetes quantity: {value!r}") from None
    if not q.is_finite() or q != q.to_integral_value() or not 0 <= q <= MAX_DEVICES:
        raise ValueError(f"{what}: a device count must be a whole number from 0 to "
                         f"{MAX_DEVICES}, got {value!r}")
    return int(q)
