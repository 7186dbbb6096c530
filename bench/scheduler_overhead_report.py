"""The table bench/scheduler_overhead.py writes: its rows (one per cluster size) as markdown,
with the run's command, machine, commit and kube-scheduler configuration."""
from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scheduler_hook.kube_local import SCHEDULER_CONFIG  # noqa: E402

TARGET = {1000: 0.25, 5000: 0.5}


def report(rows: list[dict], args: argparse.Namespace, machine_text: str) -> str:
    cmd = ".venv/bin/python bench/scheduler_overhead.py " + " ".join(sys.argv[1:])
    lines = [
        "# Extender overhead inside a real kube-scheduler v1.34", "",
        f"- Command: `{cmd}`",
        f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine_text}",
        f"- Commit: `{_git_head()}`",
        f"- {args.rounds} rounds x {args.pods} pods per scheduler per size (plus one warm-up "
        "round), each scheduler going first in turn, pods created one after another by one "
        f"client. {'Five' if args.compare else 'Three'} kube-schedulers run at once against "
        "the same apiserver, from `deploy/kube-scheduler-config.yaml` (extender verbs: "
        f"{_verbs(SCHEDULER_CONFIG)}; profile "
        f"percentageOfNodesToScore: {_percentage(args.percentage)}): without the "
        "extender stanza, with it pointed at `bench/echo_extender.py` (passes every node, "
        "scores 0: what any extender costs kube-scheduler itself, same HTTP stack), and with "
        "it pointed at `foresight serve --only extender` (fallback scoring, no models), which "
        "watches the cluster as deployed"
        + (f"; the fourth and fifth from commit `{args.compare}`'s config (extender verbs: "
           f"{_verbs(args.base_config)}), pointed at Foresight run from that commit and at "
           "the echo extender" if args.compare else "")
        + ". Medians over rounds of each round's per-pod mean.",
        "- Own time = kube-scheduler's `scheduler_scheduling_algorithm_duration_seconds` "
        "(filter + score of one pod, extender calls included); added = median over rounds of "
        "the paired per-round difference; attempt = "
        "`scheduler_scheduling_attempt_duration_seconds{result=\"scheduled\"}` (the same plus "
        "the binding API call, so it carries the apiserver's latency on this machine); CPU = "
        "process CPU seconds per pod scheduled (less sensitive to the other tenants' load).",
        "",
            "| nodes | own ms/pod alone | with echo extender | with Foresight | added by Foresight "
        "| added / own | target | of which any extender (echo) | Foresight beyond echo | "
        "attempt ms alone / echo / Foresight | sched CPU ms alone / echo / Foresight | "
        "extender CPU ms/pod | Foresight answer filter / prioritize (ms) |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tgt = TARGET.get(r["nodes"])
        ok = "" if tgt is None else (f"<= {tgt}x " + ("met" if r["ratio"] <= tgt else "MISSED"))
        lines.append(
            f"| {r['nodes']:,} | {r['plain_algo_ms']:.2f} | {r['echo_algo_ms']:.2f} | "
            f"{r['ext_algo_ms']:.2f} | {r['added_ms']:.2f} | {r['ratio']:.2f}x | {ok} | "
            f"{r['echo_added_ms']:.2f} | {r['beyond_echo_ms']:.2f} | "
            f"{r['plain_attempt_ms']:.1f} / {r['echo_attempt_ms']:.1f} / "
            f"{r['ext_attempt_ms']:.1f} | {r['plain_sched_cpu_ms']:.1f} / "
            f"{r['echo_sched_cpu_ms']:.1f} / {r['ext_sched_cpu_ms']:.1f} | "
            f"{r['ext_extender_cpu_ms']:.1f} | {r.get('ext_filter_ms', float('nan')):.2f} / "
            f"{r.get('ext_prioritize_ms', float('nan')):.2f} |")
    lines += ["", "The same runs by the scheduling-attempt histogram, the measure issue 30's "
              "own 1.4x came from (a pod's whole attempt: filter, score, extender, binding); "
              "added = median over rounds of the paired difference:", "",
              "| nodes | attempt ms alone | added by Foresight | added / own | target | "
              "added by echo |", "|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        tgt = TARGET.get(r["nodes"])
        ok = "" if tgt is None else (f"<= {tgt}x "
                                     + ("met" if r["attempt_ratio"] <= tgt else "MISSED"))
        lines.append(f"| {r['nodes']:,} | {r['plain_attempt_ms']:.1f} | "
                     f"{r['ext_attempt_added_ms']:.2f} | {r['attempt_ratio']:.2f}x | {ok} | "
                     f"{r['echo_attempt_added_ms']:.2f} |")
    if args.compare:
        lines += ["", f"Paired against Foresight at `{args.compare}` (`base-scheduler`, a fourth "
                  "kube-scheduler in the same rounds; now minus then = median over rounds of the "
                  "paired difference):", "",
                  "| nodes | added then | added now | added / own then | added / own now | "
                  "now minus then (ms) | answer filter / prioritize then | now | extender CPU "
                  "ms/pod then / now |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(
                f"| {r['nodes']:,} | {r['base_added_ms']:.2f} | {r['added_ms']:.2f} | "
                f"{r['base_ratio']:.2f}x | {r['ratio']:.2f}x | {r['now_minus_base_ms']:+.2f} | "
                f"{r.get('base_filter_ms', float('nan')):.2f} / "
                f"{r.get('base_prioritize_ms', float('nan')):.2f} | "
                f"{r.get('ext_filter_ms', float('nan')):.2f} / "
                f"{r.get('ext_prioritize_ms', float('nan')):.2f} | "
                f"{r['base_extender_cpu_ms']:.1f} / {r['ext_extender_cpu_ms']:.1f} |")
    lines += ["", "What an extender that decides nothing costs (the floor), in parts: CPU per pod "
              "that the stanza adds to kube-scheduler (encoding the pod and node names, HTTP, "
              "decoding, scoring what passed), the echo server's CPU per pod, and the rest: "
              "waiting (two processes taking turns on busy cores). Medians over rounds; CPU "
              "clocks tick at 10 ms and run partly in parallel: the parts are indicative.", "",
              "| nodes | extender verbs | echo adds (ms) | kube-scheduler CPU added (ms) | "
              "echo server CPU (ms) | rest: waiting (ms) |", "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        for key, cfg in (("echo", SCHEDULER_CONFIG), ("echo2", args.base_config)):
            if f"{key}_added_ms" in r and cfg is not None:
                added, go, py = (r[f"{key}_{m}"] for m in ("added_ms", "sched_cpu_added_ms",
                                                           "extender_cpu_ms"))
                lines.append(f"| {r['nodes']:,} | {_verbs(cfg)} | {added:.2f} | {go:.2f} | "
                             f"{py:.2f} | {added - go - py:.2f} |")
    lines += ["", "Per-round own ms/pod (alone | echo | Foresight"
              + (f" | Foresight at {args.compare} | echo under {args.compare}'s config"
                 if args.compare else "") + "):", ""]
    for r in rows:
        lines.append(f"- {r['nodes']:,} nodes: {r['plain_rounds']} | {r['echo_rounds']} | "
                     f"{r['ext_rounds']}"
                     + (f" | {r['base_rounds']} | {r['echo2_rounds']}" if "base_rounds" in r
                        else "") + " "
                     f"({r['prefill']:,} pods bound beforehand; nodes and those pods "
                     f"created in {r['create_s']:.0f} s)")
    return "\n".join(lines) + "\n"


def _verbs(config: Path) -> str:
    """The extender stanza's verbs, e.g. `filter-best` or `filter + prioritize`."""
    import yaml

    ext = (yaml.safe_load(config.read_text()).get("extenders") or [{}])[0]
    return " + ".join(f"`{ext[k]}`" for k in ("filterVerb", "prioritizeVerb", "bindVerb")
                      if ext.get(k))


def _percentage(override: int | None) -> str:
    """The profile's percentageOfNodesToScore, the shipped one unless --percentage says
    ('unset': kube-scheduler's adaptive default, 50 - nodes/125 percent, at least 5%)."""
    import yaml

    if override is not None:
        return f"{override} (--percentage)" if override else "unset (--percentage 0)"
    cfg = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    prof = (cfg.get("profiles") or [{}])[0]
    value = prof.get("percentageOfNodesToScore", cfg.get("percentageOfNodesToScore"))
    return "unset" if value is None else str(value)


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"

