"""Carbon-intensity provider: grid intensity per region from a small CSV of time windows.

Columns `ts` (ISO time or epoch seconds), `g_per_kwh` (gCO2/kWh) and optionally `region`
(a row without one applies to every region). A row holds from its `ts` until the next row of
its region, the last one for `hold_s` more seconds; outside any window the intensity is
unknown (NaN: the carbon score stays neutral). The file is re-read when it changes, checked at
most every `recheck_s`, so an operator or a cron job can keep appending forecasts to it.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ground.errors import ForesightError

log = logging.getLogger("foresight.extender")


def read_windows(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """region ('' = every region) -> (window starts in epoch s, sorted; gCO2/kWh)."""
    p = Path(path)
    try:
        df = pd.read_csv(p, dtype={"region": str})
    except FileNotFoundError:
        raise ForesightError(f"carbon intensity file not found: {p}") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ForesightError(f"carbon intensity file {p}: {str(exc).splitlines()[0]}") from None
    missing = {"ts", "g_per_kwh"} - set(df.columns)
    if missing:
        raise ForesightError(f"carbon intensity file {p}: missing column(s) {sorted(missing)}")
    ts = pd.to_numeric(df["ts"], errors="coerce")
    if ts.isna().any():  # rows that are not epoch seconds: ISO times (naive ones are UTC)
        dt = pd.to_datetime(df["ts"].astype(str), utc=True, errors="coerce", format="ISO8601")
        ts = ts.fillna((dt - pd.Timestamp(0, tz="UTC")).dt.total_seconds())
    val = pd.to_numeric(df["g_per_kwh"], errors="coerce")
    bad = ts.isna() | val.isna() | (val < 0)
    if bad.any():
        raise ForesightError(f"carbon intensity file {p}: row {int(np.flatnonzero(bad)[0]) + 2} "
                             f"has no valid ts or g_per_kwh")
    region = df["region"].fillna("") if "region" in df else pd.Series("", index=df.index)
    out = {}
    for r, g in pd.DataFrame({"ts": ts, "v": val, "r": region}).groupby("r"):
        g = g.sort_values("ts", kind="stable")
        out[str(r)] = (g["ts"].to_numpy(float), g["v"].to_numpy(float))
    return out


class CarbonWindows:
    """CarbonProvider over read_windows(path), re-read when the file changes."""

    def __init__(self, path: str | Path, hold_s: float = 3600.0, recheck_s: float = 30.0,
                 clock: Any = time.time) -> None:
        self.path, self.hold_s, self.recheck_s, self.clock = Path(path), hold_s, recheck_s, clock
        self._mtime = self.path.stat().st_mtime if self.path.exists() else None
        self._windows = read_windows(self.path)  # a bad file at start is the operator's error
        self._checked = time.monotonic()

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.recheck_s:
            return
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._mtime:
                self._windows, self._mtime = read_windows(self.path), mtime
        except (OSError, ForesightError) as exc:  # keep the last good windows
            log.warning("carbon intensity file not reloaded: %s", exc)

    def at(self, region: str, t: float) -> float:
        for key in (region, ""):
            w = self._windows.get(key)
            if w is None:
                continue
            i = int(np.searchsorted(w[0], t, side="right")) - 1
            if i >= 0 and (i + 1 < len(w[0]) or t - w[0][i] <= self.hold_s):
                return float(w[1][i])
        return float("nan")

    def intensity(self, regions: Sequence[str]) -> np.ndarray:
        self._refresh()
        t = float(self.clock())
        return np.array([self.at(str(r), t) for r in regions], float)


def install(providers: Any, cfg: dict[str, Any]) -> None:
    """Put a CarbonWindows in the `carbon` slot when `carbon.intensity_file` is configured."""
    c = cfg.get("carbon") or {}
    if c.get("intensity_file"):
        providers.set("carbon", CarbonWindows(c["intensity_file"], float(c.get("hold_s", 3600))),
                      max_age_s=float("inf"))  # freshness is per window, inside the provider
    elif providers.slots["carbon"].provider is None:  # not a registry model: say what is off
        providers.slots["carbon"].error = "no carbon.intensity_file configured"
