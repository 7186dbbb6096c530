"""Issue 28, sixth look: residents' predicted ends given their age (`--resident-quantile`),
against the third try's fixed ends, from the cached runs (no replay here).

Runs: nice .venv/bin/python bench/replay_timeline.py --phase dev28f --days 2 \
          --runtime-quantile p90 --max-hold 1800 --resident-quantile Q [--resident-floor] \
          --profiles dlrm,helios \
          --seeds 0-2 --policies foresight-drain,drain-flat   (and --phase final28f --seeds
          100-104 for the chosen Q). `drain-oracle` plans with the true run times, so the
          resident quantile does not reach it: it and `fgd` are read from the earlier phases
          (dev: dev28e / dev28b; final: final28c / final28, final28b), as are the fixed-end
          rows (dev28e; final28c).
Table: nice .venv/bin/python bench/replay_timeline_sixth.py --phase dev28f  (prints markdown)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

CACHE = Path(__file__).parent / "results" / "replay_timeline_runs.jsonl"
SMALL = ("frac", "1", "2-4")
# phase -> (phase of the fixed-end rows, of drain-oracle, of fgd (in order of preference))
EARLIER = {"dev28f": ("dev28e", "dev28e", ("dev28b",)),
           "final28f": ("final28c", "final28c", ("final28", "final28b"))}


def p95(r: dict, g: str) -> float:
    v = r[g]["p95_min"]
    return float(v) if v is not None else 0.0


def pick(runs: list[dict], phases, policy: str, prof: str, seed: int, rq="any") -> dict | None:
    for ph in (phases,) if isinstance(phases, str) else phases:
        got = [r for r in runs if r["phase"] == ph and r["policy"] == policy
               and r["profile"] == prof and r["seed"] == seed and r["days"] == 2.0
               and r["gang_semantics"] and (policy == "fgd" or (  # fgd reads neither
                   r.get("max_hold_s") == 1800.0 and r.get("runtime_quantile") == "p90"))
               and (rq == "any" or (r.get("resident_quantile"),
                                    r.get("resident_floor", False)) == rq)]
        if got:
            return got[-1]
    return None


def table(runs: list[dict], phase: str) -> list[str]:
    fixed_ph, oracle_ph, fgd_ph = EARLIER[phase]
    mine = [r for r in runs if r["phase"] == phase]
    out = []
    for prof in sorted({r["profile"] for r in mine}):
        seeds = sorted({r["seed"] for r in mine if r["profile"] == prof})
        qs = sorted({(r.get("resident_quantile"), r.get("resident_floor", False))
                     for r in mine if r["profile"] == prof})
        out += [f"### {prof}, seeds {seeds}", "",
                "| residents' ends | drain-flat | foresight-drain | drain-oracle | "
                "flat -> oracle closed | per seed (flat / drain / oracle) | 1-GPU p95 | "
                "frac p95 | bound (max(2x fgd, 15)) 1-GPU / frac | small unstarted (fgd) | "
                "alloc % (fgd) |", "|---" * 11 + "|"]
        settings = [(None, fixed_ph)] + [(q, phase) for q in qs]
        for q, ph in settings:
            rows = {}
            for s in seeds:
                rq = q
                flat = pick(runs, ph, "drain-flat", prof, s, rq if ph == phase else "any")
                new = pick(runs, ph, "foresight-drain", prof, s, rq if ph == phase else "any")
                orc = pick(runs, oracle_ph, "drain-oracle", prof, s)
                fgd = pick(runs, fgd_ph, "fgd", prof, s)
                if None not in (flat, new, orc, fgd):
                    rows[s] = (flat, new, orc, fgd)
            if not rows:
                continue
            m = lambda i, g: float(np.mean([p95(v[i], g) for v in rows.values()]))  # noqa
            f, n, o = m(0, "8+gang"), m(1, "8+gang"), m(2, "8+gang")
            # a gap of a few minutes makes the share meaningless (its sign flips on noise)
            closed = f"{(f - n) / (f - o):.0%}" if f - o >= 5.0 else \
                f"no gap (flat - oracle {f - o:+.1f} min)"
            per = ", ".join(f"{p95(v[0], '8+gang'):.1f} / {p95(v[1], '8+gang'):.1f} / "
                            f"{p95(v[2], '8+gang'):.1f}" for v in rows.values())
            bound = [max(2 * m(3, g), 15.0) for g in ("1", "frac")]
            un = [sum(sum(v[i][g]["unstarted"] for g in SMALL) for v in rows.values())
                  for i in (1, 3)]
            al = [float(np.mean([v[i]["alloc_mean"] for v in rows.values()])) for i in (1, 3)]
            label = (f"fixed: start + p90 ({fixed_ph})" if q is None else
                     f"given age, q = {q[0]:g}" + (", no earlier than start + p90"
                                                    if q[1] else ""))
            miss = "" if len(rows) == len(seeds) else f" (seeds {sorted(rows)})"
            out.append(f"| {label}{miss} | {f:.1f} | {n:.1f} | {o:.1f} | {closed} | {per} | "
                       f"{m(1, '1'):.1f} | {m(1, 'frac'):.1f} | {bound[0]:.1f} / "
                       f"{bound[1]:.1f} | {un[0]} ({un[1]}) | {al[0]:.2f} ({al[1]:.2f}) |")
        out.append("")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=tuple(EARLIER), default="dev28f")
    a = ap.parse_args()
    runs = [json.loads(x) for x in CACHE.read_text().splitlines()] if CACHE.exists() else []
    print("\n".join(table(runs, a.phase)))


if __name__ == "__main__":
    main()
