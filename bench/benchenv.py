"""What every benchmark result records about the machine it ran on."""
from __future__ import annotations

import os
import platform


def machine() -> str:
    """Cores, memory, platform, Python, and the load average (these machines are shared)."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} cores, {mem:.0f} GiB memory, {platform.machine()}, "
            f"{platform.platform()}, Python {platform.python_version()}; load average {load} "
            f"(1/5/15 min; shared machine: other processes compete for the cores)")
