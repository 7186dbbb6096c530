"""What a cluster operator reads off one policy's replay, and which policy to pick.

Per policy: queueing delay p50/p95 (min) over all jobs, per size class (the timeline's
`summarize`) and per queue; mean GPU allocation; GPU-hours idle while jobs waited (per sample,
the smaller of the free GPUs and the GPUs the queue asked, summed over time: GPUs that sat idle
while at least that much was asked); jobs blocked by fragmentation; gang deadlocks.
"""
from __future__ import annotations

import numpy as np

from simulator.timeline.engine import SAMPLE_S, TimelineResult
from simulator.timeline.metrics import delays, summarize
from simulator.timeline.workload import CLASSES


def _pct(x: np.ndarray) -> dict:
    if not len(x):
        return {"n": 0, "p50_min": None, "p95_min": None, "mean_min": None}
    return {"n": int(len(x)), "p50_min": round(float(np.percentile(x, 50)) / 60, 2),
            "p95_min": round(float(np.percentile(x, 95)) / 60, 2),
            "mean_min": round(float(np.mean(x)) / 60, 2)}


def idle_while_waiting(res: TimelineResult, capacity: int, t1: float) -> float:
    s = res.samples
    w = (s["t"] >= 0) & (s["t"] < t1)
    free = capacity * (1.0 - s["alloc"][w] / 100.0)
    idle = np.minimum(np.maximum(free, 0.0), s["queue_gpus"][w])
    return round(float(idle[s["queue"][w] > 0].sum()) * SAMPLE_S / 3600.0, 1)


def policy_row(inp, res: TimelineResult) -> dict:
    jobs, t1 = inp.jobs, inp.t_end
    row = summarize(jobs, res, 0.0, t1)
    m, d = delays(jobs, res, 0.0, t1)
    row["all"] = _pct(d[m])
    row["queues"] = {q: _pct(d[m & (jobs.tenant == i)]) for i, q in enumerate(jobs.tenants)}
    row["idle_gpu_h_waiting"] = idle_while_waiting(res, int(inp.nodes.gpus.sum()), t1)
    row["unstarted"] = int((~np.isfinite(res.start[m])).sum())
    return row


def recorded_row(inp) -> dict:
    """The history's own queueing delay (created -> started), where it was recorded."""
    m = (inp.jobs.arrival >= 0) & (inp.jobs.arrival < inp.t_end)
    w = inp.recorded_wait[m]
    return {"all": _pct(w[np.isfinite(w)]), "unknown": int((~np.isfinite(w)).sum())}


def _p95(r: dict) -> float:
    v = r["all"]["p95_min"]
    return float("inf") if v is None else v


def pick(rows: list[dict], baseline: str) -> dict:
    """The policy with the lowest p95 delay over all jobs (then mean delay, then allocation),
    and who pays for it: the size classes and queues whose p95 is longer than under the
    baseline."""
    best = min(rows, key=lambda r: (_p95(r), r["all"]["mean_min"] or 0.0, -r["alloc_mean"]))
    same = [r["policy"] for r in rows if r is not best and r["all"] == best["all"]
            and r["alloc_mean"] == best["alloc_mean"]]
    out = {"policy": best["policy"], "tied": same, "p95_min": best["all"]["p95_min"],
           "mean_min": best["all"]["mean_min"], "alloc_mean": best["alloc_mean"],
           "worse": []}
    base = next((r for r in rows if r["policy"] == baseline), None)
    if base is None:
        return out
    out.update(baseline=baseline, baseline_p95_min=base["all"]["p95_min"],
               baseline_mean_min=base["all"]["mean_min"], baseline_alloc=base["alloc_mean"])
    groups = [(f"size {c}", best[c], base[c]) for c in CLASSES] + \
        [(f"queue {q}", best["queues"][q], base["queues"][q]) for q in best["queues"]]
    for name, a, b in groups:
        if not a["n"] or a["p95_min"] is None or b["p95_min"] is None:
            continue
        if a["p95_min"] > b["p95_min"] + max(1.0, 0.1 * b["p95_min"]):
            out["worse"].append({"who": name, "jobs": a["n"], "p95_min": a["p95_min"],
                                 "baseline_p95_min": b["p95_min"]})
    return out


def pick_sentence(p: dict) -> list[str]:
    """The pick and its cost in plain words (one sentence a line)."""
    lines = [f"Pick {p['policy']}: p95 queueing delay {p['p95_min']} min"
             + (f" against {p['baseline_p95_min']} min with {p['baseline']}"
                f" (mean {p['mean_min']} vs {p['baseline_mean_min']} min; GPU allocation "
                f"{p['alloc_mean']:.1f}% vs {p['baseline_alloc']:.1f}%)." if "baseline" in p
                else ".")]
    if p.get("tied"):
        lines.append(f"Tied with {p['policy']} on this history: {', '.join(p['tied'])}.")
    if p.get("baseline") == p["policy"]:
        lines.append("No policy beats the default scoring on this history: keep it.")
    elif p["worse"]:
        who = "; ".join(f"{w['who']} ({w['jobs']} jobs) p95 {w['baseline_p95_min']} -> "
                        f"{w['p95_min']} min" for w in p["worse"])
        lines.append(f"The cost: these wait longer than with {p['baseline']}: {who}.")
    elif "baseline" in p:
        lines.append(f"The cost: no size class or queue waits longer at p95 than with "
                     f"{p['baseline']}.")
    return lines
