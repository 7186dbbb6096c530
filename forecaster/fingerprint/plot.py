"""Picture of one workload's fingerprint: phase timeline of its longest run + per-phase profile."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLORS = {"startup": "#8c8c8c", "compute": "#1f77b4", "eval": "#2ca02c",
          "checkpoint": "#d62728", "stall": "#ff7f0e", "idle": "#e0e0e0",
          "serving_busy": "#9467bd", "serving_idle": "#c5b0d5"}


def plot_fingerprint(name: str, fp: dict, out: str | Path) -> None:
    """Write a PNG: top, SM activity / power / framebuffer of the example run over its phase
    bands; bottom, per-phase time share, mean SM activity and power (p50 with p95 whiskers)."""
    ex = fp["example_run"]
    phases = list(fp["phases"])
    fig = plt.figure(figsize=(12, 7.5), constrained_layout=True)
    gs = fig.add_gridspec(2, 3, height_ratios=[1.4, 1])
    ax = fig.add_subplot(gs[0, :])
    hours = 3600.0
    for ph, t0, d in ex["segments"]:
        ax.axvspan(t0 / hours, (t0 + d) / hours, color=COLORS.get(ph, "#ffffff"), alpha=0.35,
                   lw=0)
    s = ex["series"]
    t = [x / hours for x in s["t_s"]]
    if "sm" in s:
        ax.plot(t, s["sm"], color="black", lw=0.9, label="SM active")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("SM active (fraction)")
    ax.set_xlabel(f"hours since start of {ex['pod']} (first hours of the longest run; shaded: detected phases)")
    lines = list(ax.get_lines())
    if "power" in s:
        ax2 = ax.twinx()
        ax2.plot(t, s["power"], color="#b8860b", lw=0.8, alpha=0.8, label="power (W)")
        ax2.set_ylabel("power (W)", color="#b8860b")
        lines += ax2.get_lines()
    if "fb" in s:
        ax3 = ax.twinx()
        ax3.spines["right"].set_position(("axes", 1.07))
        ax3.plot(t, [v / 1024 for v in s["fb"]], color="#555555", lw=1.2, ls="--",
                 label="framebuffer (GiB)")
        ax3.set_ylabel("framebuffer (GiB)", color="#555555")
        lines += ax3.get_lines()
    handles = [Patch(color=COLORS.get(p, "#fff"), alpha=0.5, label=p) for p in phases]
    ax.legend(handles=handles + lines, loc="upper center", ncol=min(11, len(handles) + 3),
              fontsize=8, bbox_to_anchor=(0.5, 1.13), frameon=False)
    per = fp.get("iteration_period_s")
    pk = fp["peak_fb_mib"]
    ax.set_title(f"{name}: {fp['runs']} runs, step {fp['sample_step_s']:g} s, iteration period "
                 f"{per if per is not None else 'none'}"
                 f"{' s' if per is not None else ''}, peak framebuffer p95 "
                 f"{(pk['p95'] or 0) / 1024:.1f} GiB (max {(pk['max'] or 0) / 1024:.1f})",
                 fontsize=10, pad=28)
    # per-phase profile
    colors = [COLORS.get(p, "#999") for p in phases]
    a1 = fig.add_subplot(gs[1, 0])
    a1.bar(phases, [fp["phases"][p]["time_share"] * 100 for p in phases], color=colors)
    a1.set_ylabel("time share (%)")
    for axx, metric, label in ((fig.add_subplot(gs[1, 1]), "sm", "SM active p50 (p95)"),
                               (fig.add_subplot(gs[1, 2]), "power", "power W p50 (p95)")):
        st = [fp["phases"][p]["metrics"].get(metric, {}) for p in phases]
        p50 = [x.get("p50") or 0 for x in st]
        p95 = [x.get("p95") or 0 for x in st]
        axx.bar(phases, p50, color=colors,
                yerr=[[0] * len(p50), [max(b - a, 0) for a, b in zip(p50, p95)]], capsize=3)
        axx.set_ylabel(label)
    for axx in fig.axes[-3:]:
        axx.tick_params(axis="x", rotation=35, labelsize=8)
    fig.savefig(out, dpi=110)
    plt.close(fig)
