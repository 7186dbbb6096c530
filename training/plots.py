"""Small drawing helpers the kinds' report plots share: bands kept to the metric's physical
range, titles that wrap instead of being cut, and the numbers of a one-line reading."""
from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd


def band(ax, t, lo, hi, low: float | None = 0.0, high: float | None = None,
         label: str = "p10-p90") -> None:
    """A quantile band clipped to [low, high]: a duty cycle never exceeds 100 %, demand is
    never negative, whatever a conformal interval says."""
    lo = np.clip(np.asarray(lo, float), low, high)
    hi = np.clip(np.asarray(hi, float), low, high)
    ax.fill_between(t, lo, hi, alpha=0.25, label=label)


def title(ax, text: str, width: int = 62) -> None:
    """The whole title, wrapped onto as many lines as it needs."""
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize=9)


def inside(y, lo, hi) -> float:
    """Share of actuals inside [lo, hi]."""
    y = np.asarray(y, float)
    return float(np.mean((y >= np.asarray(lo, float)) & (y <= np.asarray(hi, float))))


def mae(a, b) -> float:
    return float(np.mean(np.abs(np.asarray(a, float) - np.asarray(b, float))))


def forecast_panel(ax, p: pd.DataFrame, baseline: str, baseline_label: str, ylabel: str,
                   low: float | None = 0.0, high: float | None = None) -> None:
    """Actual, p50, one baseline and the clipped band of one series over its origins."""
    t = pd.to_datetime(p["origin"])
    band(ax, t, p["p10"], p["p90"], low, high)
    ax.plot(t, p["y_true"], "k-", lw=1.1, label="actual")
    ax.plot(t, p["p50"], "-", lw=1.1, label="forecast p50")
    if baseline in p:
        ax.plot(t, p[baseline], ":", lw=1, label=baseline_label)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
