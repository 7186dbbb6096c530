"""Issue 28's table: reservation with predicted backfill against fgd, the fence, the flat
input at equal mean and the oracle, with the "Done when" checks computed from the runs.

Runs (third try, targeted draining, phase final28c): nice .venv/bin/python \
          bench/replay_timeline.py --phase final28c --seeds 100-104 --profiles dlrm --days 2 \
          --policies foresight-drain,drain-pending,drain-flat,drain-oracle [choices: see
          bench/replay_timeline_backfill_notes.md]  (and helios); `fgd` / `foresight-flat`
          are read from final28 / final28b (unchanged policies).
Runs (second try, phase final28b): nice .venv/bin/python bench/replay_timeline.py \
          --phase final28b --seeds 100-104 --profiles dlrm --days 2 --runtime-quantile p50 \
          --policies foresight-backfill,backfill-flat,oracle  (and helios); `fgd` and
          `foresight-flat` are not changed by the second try (tests/test_timeline_pin.py), so
          their final28 runs of the same seeds are read (a seed without one is run there).
First try: the same with --phase final28 and every policy.
Table: nice .venv/bin/python bench/replay_timeline_backfill.py [--notes FILE]
Runs (seventh look, phases dev28g / final28g): the third try's command with --big-order A
          [--big-order-area] (dev seeds 0-2, A = 0, 1, 3, 10, 100; final seeds: A = 10,
          --policies foresight-drain,drain-flat,drain-oracle).
Reads the cached runs (bench/results/replay_timeline_runs.jsonl, phases dev28, final28,
dev28b, final28b, dev28c, final28c, dev28g, final28g) and writes
bench/results/replay_timeline_backfill.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from benchenv import machine  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CACHE = RESULTS / "replay_timeline_runs.jsonl"
ACC = RESULTS / "replay_timeline_backfill_accuracy.json"
POLS = ("fgd", "foresight-flat", "foresight-backfill", "backfill-flat", "oracle")
# the third try (phases dev28c / final28c): targeted draining; its new policy, the same fed a
# flat level of equal mean and fed the truth, per try
DRAIN_POLS = ("fgd", "foresight-flat", "foresight-drain", "drain-pending", "drain-flat",
              "drain-oracle", "drain-oracle-pred")
ROLES = {"b": ("foresight-backfill", "backfill-flat", "oracle", POLS),
         "c": ("foresight-drain", "drain-flat", "drain-oracle", DRAIN_POLS)}
DRAIN_DEV = ("dev28c", "dev28d", "dev28e", "dev28g")  # dev phases of the drain policies
CLASSES = ("frac", "1", "2-4", "8", "gang")
SMALL = ("frac", "1", "2-4")


def _m(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def p95(r: dict, g: str) -> float:
    v = r[g]["p95_min"]
    return float(v) if v is not None else 0.0


def unstarted(r: dict) -> int:
    return sum(r[g]["unstarted"] for g in SMALL)


def roles(phase: str) -> tuple:
    return ROLES["c"] if phase.endswith(("28c", "28d", "28e", "28g")) else ROLES["b"]


def table(runs: list[dict], phase: str) -> list[str]:
    out = []
    pols = roles(phase)[3]
    for prof in sorted({r["profile"] for r in runs}):
        rs = [r for r in runs if r["profile"] == prof]
        seeds = sorted({r["seed"] for r in rs})
        by = {(r["policy"], r["seed"]): r for r in rs}
        out += [f"### {prof}: seeds {seeds}, {sorted({r['days'] for r in rs})} measured days "
                f"({phase})", "",
                "p95 queueing delay (min), mean over seeds; `unstarted` = small jobs (< 8 GPUs) "
                "not started at the end, summed over seeds (`big unstarted`: 8-GPU and gang jobs, "
                "summed); `backfilled / overran` = small pods "
                "placed on lent reserved nodes / of them, those that outlived the lease (not "
                "preempted), summed; run-time MAE (min) and [p10, p90] coverage of the online "
                "predictor over the small jobs of the measured window.", "",
                "| policy | " + " | ".join(CLASSES) + " | 8+gang | mean over classes | "
                "unstarted | big unstarted | alloc % | reserved GPUs | backfilled / overran / "
                "aged (took) | run-time MAE, coverage | runs |", "|---" * 15 + "|"]
        for p in pols:
            xs = [by[(p, s)] for s in seeds if (p, s) in by]
            if not xs:
                continue
            bf = [x.get("backfill") or {} for x in xs]
            acc = [x.get("runtime_accuracy") or {} for x in xs]
            out.append(
                f"| {p} | " + " | ".join(f"{_m([p95(x, g) for x in xs]):.1f}" for g in CLASSES)
                + f" | {_m([p95(x, '8+gang') for x in xs]):.1f}"
                f" | {_m([np.mean([p95(x, g) for g in CLASSES]) for x in xs]):.1f}"
                f" | {sum(unstarted(x) for x in xs)}"
                f" | {sum(x['8+gang']['unstarted'] for x in xs)}"
                f" | {_m([x['alloc_mean'] for x in xs]):.2f}"
                f" | {_m([x['reserved_mean'] for x in xs]):.0f}"
                + (f" | {sum(b.get('jobs', 0) for b in bf)} / "
                   f"{sum(b.get('overran', 0) for b in bf)}"
                   + (f" / {sum(b.get('aged', 0) for b in bf)} "
                      f"({sum(b.get('aged_took', 0) for b in bf)})"
                      if any('aged' in b for b in bf) else "") if any(bf) else " | ")
                + (f" | {_m([a.get('mae_min') for a in acc]):.0f}, "
                   f"{_m([a.get('coverage') for a in acc]):.3f}" if any(acc) else " | ")
                + f" | {len(xs)} |")
        out += ["", *checks(by, seeds, phase), ""]
    return out


def checks(by: dict, seeds: list[int], phase: str = "final28b") -> list[str]:
    """The issue's bounds, per seed and on the means, from the cached runs."""
    new, flat, oracle, _ = roles(phase)
    both = [s for s in seeds if ("fgd", s) in by and (new, s) in by]
    if not both:
        return ["(no seed with both fgd and the new policy yet)"]
    f = [by[("fgd", s)] for s in both]
    n = [by[(new, s)] for s in both]
    mean = lambda xs, g: _m([p95(x, g) for x in xs])  # noqa: E731
    big = mean(n, "8+gang"), mean(f, "8+gang")
    lines = [f"Checks over seeds {both} (means over seeds; per seed in brackets):", ""]
    per = ", ".join(f"{p95(a, '8+gang'):.1f}/{p95(b, '8+gang'):.1f}" for a, b in zip(n, f))
    lines.append(f"- 8+gang p95 <= 0.3 x fgd: {big[0]:.1f} vs {0.3 * big[1]:.1f} "
                 f"({'holds' if big[0] <= 0.3 * big[1] else 'FAILS'}; new/fgd per seed {per})")
    for g in ("1", "frac"):
        a, b = mean(n, g), mean(f, g)
        bound = max(2 * b, 15.0)
        seeds_ok = sum(p95(x, g) <= max(2 * p95(y, g), 15.0) for x, y in zip(n, f))
        lines.append(f"- {g} p95 <= max(2 x fgd, 15 min): {a:.1f} vs {bound:.1f} "
                     f"({'holds' if a <= bound else 'FAILS'}; {seeds_ok}/{len(both)} seeds)")
    un = sum(unstarted(x) for x in n), sum(unstarted(x) for x in f)
    lines.append(f"- small jobs unstarted at the end <= fgd's: {un[0]} vs {un[1]} "
                 f"({'holds' if un[0] <= un[1] else 'FAILS'})")
    al = _m([x["alloc_mean"] for x in n]), _m([x["alloc_mean"] for x in f])
    lines.append(f"- allocation >= fgd's: {al[0]:.2f} vs {al[1]:.2f} % "
                 f"({'holds' if al[0] >= al[1] - 1e-9 else 'FAILS'})")
    every = [s for s in both if all((p, s) in by for p in ("foresight-flat", flat, oracle))]
    if not every:
        return lines + [f"- forecast / oracle lines: no seed with {flat} and {oracle} run"]
    if every != both:  # the forecast lines on the seeds where every policy ran
        n = [by[(new, s)] for s in every]
        big = mean(n, "8+gang"), big[1]
        lines.append(f"- (the lines below: seeds {every}, where every policy ran)")
    fl = [by[("foresight-flat", s)] for s in every]
    bfl = [by[(flat, s)] for s in every]
    o = [by[(oracle, s)] for s in every]
    mc = lambda xs: _m([np.mean([p95(x, g) for g in CLASSES]) for x in xs])  # noqa: E731
    res = _m([x["reserved_mean"] for x in n]), _m([x["reserved_mean"] for x in bfl])
    lines.append(f"- forecast vs flat at equal mean reserved GPUs ({res[0]:.0f} vs {res[1]:.0f}):"
                 f" mean-over-classes p95 {mc(n):.1f} vs {mc(bfl):.1f} min "
                 f"({'forecast better' if mc(n) < mc(bfl) else 'forecast NOT better'})")
    for name, ref in (("foresight-flat", fl), (flat, bfl)):
        gap = mean(ref, "8+gang") - mean(o, "8+gang")
        closed = (mean(ref, "8+gang") - big[0]) / gap if gap > 0 else float("nan")
        lines.append(f"- share of the {name} -> oracle gap on 8+gang p95 closed: "
                     f"({mean(ref, '8+gang'):.1f} - {big[0]:.1f}) / ({mean(ref, '8+gang'):.1f}"
                     f" - {mean(o, '8+gang'):.1f}) = {closed:.0%}" + (
                         " (>= 50 %: holds)" if closed >= 0.5 else " (< 50 %: FAILS)"
                         if closed == closed else " (no gap)"))
    return lines + split_oracle(by, every, new, flat, mean)


def split_oracle(by: dict, seeds: list[int], new: str, flat: str, mean) -> list[str]:
    """drain-oracle's lead over the new policy on 8+gang p95, split: the oracle's pre-drain
    with predicted run times (drain-oracle-pred) against the new policy is the timing's share,
    drain-oracle against drain-oracle-pred the true run times'; and the share of the flat ->
    drain-oracle-pred gap (both plan with the predicted run times) the forecast closes."""
    s = [x for x in seeds if ("drain-oracle-pred", x) in by and ("drain-oracle", x) in by]
    if not s:
        return []
    n, op, o = ([by[(p, x)] for x in s] for p in (new, "drain-oracle-pred", "drain-oracle"))
    a, b, c = mean(n, "8+gang"), mean(op, "8+gang"), mean(o, "8+gang")
    per = ", ".join(f"{p95(x, '8+gang'):.1f}/{p95(y, '8+gang'):.1f}/{p95(z, '8+gang'):.1f}"
                    for x, y, z in zip(n, op, o))
    f = mean([by[(flat, x)] for x in s], "8+gang")
    gap = f"{(f - a) / (f - b):.0%}" if f > b else "no gap: the flat level is not behind it"
    return [f"- drain-oracle's lead on 8+gang p95 split (seeds {s}): {new} {a:.1f}, oracle "
            f"pre-drain with predicted run times {b:.1f}, drain-oracle {c:.1f}: pre-drain "
            f"timing {a - b:+.1f} min, true run times {b - c:+.1f} min (per seed new / "
            f"oracle-pred / oracle: {per})",
            f"- share of the {flat} -> drain-oracle-pred gap on 8+gang p95 closed (same "
            f"predicted run times): ({f:.1f} - {a:.1f}) / ({f:.1f} - {b:.1f}) = {gap}"]


def reused(runs: list[dict], new: list[dict], phases=("final28",)) -> list[dict]:
    """The earlier tries' `fgd` and `foresight-flat` runs of the seeds a later try ran and did
    not rerun them (those policies are unchanged: tests/test_timeline_pin.py)."""
    have = {(r["profile"], r["seed"], r["days"], r["policy"]) for r in new}
    cases = {(r["profile"], r["seed"], r["days"]) for r in new}
    return [r for r in runs if r["phase"] in phases and r["gang_semantics"]
            and r["policy"] in ("fgd", "foresight-flat")
            and (r["profile"], r["seed"], r["days"]) in cases
            and (r["profile"], r["seed"], r["days"], r["policy"]) not in have]


def recompute_accuracy(runs: list[dict]) -> None:
    """The online run-time predictor's accuracy per final case, measured again with the
    tolerance `simulator.timeline.runtime.accuracy` has now (runs cached before it counted a
    bound a few ulps off the clip floor as a miss); predictions only, no replay."""
    from simulator.replay.compare import shared_traces_dir
    from simulator.replay.data import load_nodes
    from simulator.timeline.run import WARMUP_S, CaseConfig, case_jobs
    from simulator.timeline.runtime import accuracy, predicted_runtimes

    got = json.loads(ACC.read_text()) if ACC.exists() else {}
    nodes = load_nodes(shared_traces_dir() / "openb-2023" / "csv" /
                       "openb_node_list_gpu_node.csv")
    for prof, seed, days in sorted({(r["profile"], r["seed"], r["days"]) for r in runs
                                    if r["phase"] == "final28"}):
        key = f"{prof}/{seed}/{days}"
        if key in got:
            continue
        j = case_jobs(nodes, CaseConfig(profile=prof, seed=seed, days=days))
        t1 = days * 86400.0
        pred = predicted_runtimes(j, -WARMUP_S, t1)
        got[key] = accuracy(j, pred, (j.arrival >= 0) & (j.arrival < t1) & ~j.big)
        ACC.write_text(json.dumps(got, indent=1))
        print(key, got[key], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=Path)
    ap.add_argument("--accuracy", action="store_true",
                    help="(re)measure the run-time predictor's accuracy per final case")
    a = ap.parse_args()
    runs = [json.loads(x) for x in CACHE.read_text().splitlines()]
    if a.accuracy:
        recompute_accuracy(runs)
    acc = json.loads(ACC.read_text()) if ACC.exists() else {}
    for r in runs:  # the re-measured accuracy replaces the cached one
        k = f"{r['profile']}/{r['seed']}/{r['days']}"
        if r["phase"] in ("final28", "final28b") and k in acc and r.get("runtime_accuracy"):
            r["runtime_accuracy"] = acc[k]
    out = ["# Timeline replay: reservation with predicted backfill (issue 28)", "",
           "- command: `nice .venv/bin/python bench/replay_timeline_backfill.py "
           + " ".join(sys.argv[1:]) + "` (runs: see the script's docstring)",
           f"- machine: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", ""]
    if a.notes and a.notes.exists():
        out += [a.notes.read_text().rstrip(), ""]
    for phase, title in (("final28g", "Final seeds, seventh look (big jobs shortest predicted "
                                      "first, aged: --big-order 10)"),
                         ("dev28g", "Dev seeds, seventh look (choices: --big-order)"),
                         ("dev28e", "Dev seeds, fifth look (drain-oracle's lead split: the "
                                    "oracle's pre-drain with predicted run times; no policy "
                                    "changed)"),
                         ("dev28d", "Dev seed, fourth try (2-4 GPU hold bound, head jobs "
                                    "kept; not taken, no final runs)"),
                         ("final28c", "Final seeds, third try (targeted draining)"),
                         ("dev28c", "Dev seeds, third try (choices)"),
                         ("final28b", "Final seeds, second try (open lent nodes, hold bound)"),
                         ("dev28b", "Dev seeds, second try (choices)"),
                         ("final28", "Final seeds, first try"),
                         ("dev28", "Dev seeds, first try (choices)")):
        rs = [r for r in runs if r["phase"] == phase and r["gang_semantics"]]
        if phase == "final28b":
            rs += reused(runs, rs)
        elif phase in ("final28c", "final28g"):
            rs += reused(runs, rs, ("final28", "final28b"))
        elif phase in DRAIN_DEV:
            rs += reused(runs, rs, ("dev28b",))
        if phase.startswith("dev"):
            var = lambda r: (r.get("runtime_quantile", "p90"), r.get("quantile", "p90"),  # noqa
                             r.get("max_hold_s"), r.get("drain_jobs", "all"),
                             r.get("hold_multi", 1.0), r.get("protect_jobs", 0),
                             r.get("big_order", 0.0), r.get("big_order_area", False))
            ref = ("fgd", "foresight-flat") if phase in DRAIN_DEV else ("fgd",)
            for v in sorted({var(r) for r in rs if r["policy"] not in ref}, key=str):
                sub = [r for r in rs if var(r) == v or r["policy"] in ref]
                label = f"run-time quantile {v[0]}" if phase == "dev28" else \
                    f"run-time {v[0]}, forecast {v[1]}, hold bound {v[2]} s" + (
                        f", drain for {v[3]} pending big jobs" if phase == "dev28c" else "") + (
                        f", 2-4 GPU hold x {v[4]:g}, aged pods kept off the first {v[5]} big "
                        f"jobs' nodes" if phase == "dev28d" else "") + (
                        f", big jobs queued by arrival + {v[6]:g} x predicted run time"
                        + (" x pods" if v[7] else "") if phase == "dev28g" else "")
                out += [f"## {title}: {label}", "", *table(sub, phase)]
        elif rs:
            out += [f"## {title}", "", *table(rs, phase)]
    (RESULTS / "replay_timeline_backfill.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
