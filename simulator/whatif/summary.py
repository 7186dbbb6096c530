"""The what-if terminal summary: plain text, at most 80 columns, the same on a terminal and in
a pipe (no table that a narrow terminal cuts into one-word columns)."""
from __future__ import annotations

import textwrap

import pandas as pd

from simulator.timeline.workload import CLASSES
from simulator.whatif.metrics import pick_sentence

WIDTH = 80
SHORT = {"kube-default": "kube", "foresight-reserve": "reserve",
         "foresight-backfill": "backfill", "foresight-flat": "flat", "backfill-flat": "bf-flat"}
MAX_QUEUES = 12


def _v(x) -> str:
    return "-" if x is None else (f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}")


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH - 1, initial_indent=indent,
                         subsequent_indent=indent + "  ") or [""]


def when(t0: pd.Timestamp, s: float) -> str:
    return f"{t0 + pd.Timedelta(seconds=s):%Y-%m-%d %H:%M}"


def summary_lines(doc: dict) -> list[str]:
    """``doc``: the what-if JSON document (see foresight/commands/whatif.py)."""
    w = doc["window"]
    out = _wrap(f"What-if replay of {doc['source']}")
    out += _wrap(f"History {w['history_start']} .. {w['history_end']} UTC; replayed "
                 f"{w['replay_start']} .. {w['history_end']} ({w['replay_days']:.1f} days, "
                 f"{w['jobs']:,} jobs) on {w['nodes']:,} nodes / {w['gpus']:,} GPUs after "
                 f"{w['warmup_days']:g} day(s) of warm-up (forecaster history).")
    if doc["notes"]:
        out += ["", "Input (nothing left out unsaid):"]
        for line in doc["notes"]:
            out += _wrap(line, "  ")
    out += ["", "Queueing delay in minutes (all jobs; p95 of jobs of 8+ GPUs or gangs):",
            f"{'policy':<20}{'p50':>6}{'p95':>7}{'mean':>7}{'8+ p95':>8}{'alloc%':>7}"
            f"{'idle':>7}{'frag':>7}{'never':>6}",
            f"{'':<20}{'':>6}{'':>7}{'':>7}{'':>8}{'':>7}{'GPU-h':>7}{'-blk':>7}{'start':>6}"]
    for r in doc["policies"]:
        out.append(f"{r['policy'][:19]:<20}{_v(r['all']['p50_min']):>6}"
                   f"{_v(r['all']['p95_min']):>7}{_v(r['all']['mean_min']):>7}"
                   f"{_v(r['8+gang']['p95_min']):>8}"
                   f"{r['alloc_mean']:>7.1f}{r['idle_gpu_h_waiting']:>7.0f}"
                   f"{r['frag_blocked_jobs']:>7}{r['unstarted']:>6}")
    rec = doc.get("recorded")
    if rec and rec["all"]["n"]:
        out.append(f"{'as recorded':<20}{_v(rec['all']['p50_min']):>6}"
                   f"{_v(rec['all']['p95_min']):>7}{_v(rec['all']['mean_min']):>7}")
    out += ["", "p95 delay (min) by size class:",
            f"{'policy':<20}" + "".join(f"{c:>10}" for c in CLASSES)]
    for r in doc["policies"]:
        out.append(f"{r['policy'][:19]:<20}" + "".join(f"{_v(r[c]['p95_min']):>10}"
                                                       for c in CLASSES))
    out.append(f"{'(jobs)':<20}" + "".join(f"{doc['policies'][0][c]['n']:>10}"
                                             for c in CLASSES))
    pols = [r["policy"] for r in doc["policies"]][:6]
    queues = sorted(doc["policies"][0]["queues"],
                    key=lambda q: -doc["policies"][0]["queues"][q]["n"])
    out += ["", "p95 delay (min) by queue:",
            f"{'queue':<12}{'jobs':>6}" + "".join(f"{SHORT.get(p, p)[:9]:>10}" for p in pols)]
    by = {r["policy"]: r for r in doc["policies"]}
    for q in queues[:MAX_QUEUES]:
        out.append(f"{q[:11]:<12}{by[pols[0]]['queues'][q]['n']:>6}" +
                   "".join(f"{_v(by[p]['queues'][q]['p95_min']):>10}" for p in pols))
    if len(queues) > MAX_QUEUES:
        out.append(f"({len(queues) - MAX_QUEUES} smaller queues in report.html and whatif.json)")
    out.append("")
    for s in pick_sentence(doc["pick"]):
        out += _wrap(s)
    rs = doc["right_size"]
    if rs.get("tried"):
        out += _wrap(f"Right-sizing: with {rs['policy']} the cluster could have done without "
                     f"{rs['spare_gpus']:,} of its {rs['gpus']:,} GPUs at the p95 delay "
                     f"{_v(rs['target_p95_min'])} min that kube-default gives on all of them "
                     f"({len(rs['tried'])} replays on fewer nodes).")
    elif rs.get("reason"):
        out += _wrap(f"Right-sizing: {rs['reason']}.")
    g = doc.get("gang_baseline")
    if g and not g["deadlocks"]:
        out += _wrap("Gangs: placed pod by pod (stock kube-scheduler, no coscheduling), no "
                     f"deadlock on this history ({g['gang_restarts']} gang restart(s)).")
    elif g:
        out += _wrap(f"Gangs: placed pod by pod (stock kube-scheduler, no coscheduling), "
                     f"{g['deadlocks']} deadlock episode(s) and {g['gang_restarts']} gang "
                     "restart(s); every policy above places gangs all-or-nothing: those "
                     "deadlocks are avoided.")
    workers = doc.get("workers", 1)
    out += [""] + _wrap(f"Replays took {doc['seconds']:.0f} s in {workers} process(es); peak "
                        f"memory {doc['peak_rss_mb']:.0f} MB" + (
                            f" here and {doc['peak_rss_worker_mb']:.0f} MB in the largest "
                            "replay process" if doc.get("peak_rss_worker_mb") else "") + ".")
    if doc.get("report"):
        out += _wrap(f"Report: {doc['report']}")
    return out
