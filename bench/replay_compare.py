"""Policies x traces x seeds on openb, beside the published FGD (ATC'23) numbers.

Usage: nice .venv/bin/python bench/replay_compare.py --traces all --policies fgd,foresight \
           --seeds 42-51 --workers 2
Finished runs are cached in bench/results/replay_runs.jsonl (one JSON line per run) so a long
grid can be run in pieces; the markdown table is rebuilt from every cached run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_common import current_runs, header, input_digest, write  # noqa: E402

from simulator.replay import POLICIES  # noqa: E402
from simulator.replay.compare import (SHARED_TRACES, load_published, parse_seeds,  # noqa: E402
                                      run_grid, shared_traces_dir, summary)

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="default")
    ap.add_argument("--policies", default="all")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--until", type=int, default=100, help="stop each replay at this load %%")
    ap.add_argument("--cache", default=str(RESULTS / "replay_runs.jsonl"))
    ap.add_argument("--out", default=str(RESULTS / "replay_compare.md"))
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from the cache")
    a = ap.parse_args()
    traces = list(SHARED_TRACES) if a.traces == "all" else a.traces.split(",")
    pols = list(POLICIES) if a.policies == "all" else a.policies.split(",")
    cache = Path(a.cache)
    base = shared_traces_dir()
    csv_dir = base / "openb-2023" / "csv"
    runs = [json.loads(x) for x in cache.read_text().splitlines()] if cache.exists() else []
    runs = current_runs(runs, csv_dir)
    done = {(r["trace"], r["policy"], r["seed"], r.get("until", 100)) for r in runs}
    for t in traces:
        digest = input_digest(csv_dir, t)
        for p in pols:
            todo = [s for s in parse_seeds(a.seeds) if (t, p, s, a.until) not in done]
            if not todo or a.table_only:
                continue

            def keep(r: dict) -> None:
                r = {k: v for k, v in r.items() if k != "alloc_curve"} | {"until": a.until,
                    "alloc_curve": {k: r["alloc_curve"][k] for k in ("50", "90", "100")},
                    "digest": digest}
                runs.append(r)
                with cache.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{r['trace']} {r['policy']} {r['seed']}: {r['alloc_at_100']:.2f} "
                      f"({r['seconds']:.1f} s)", flush=True)

            run_grid([t], [p], todo, csv_dir, 1.3,
                     max(1, min(a.workers, 2)), keep, until=a.until)
    table = summary(runs, load_published(base / "fgd-atc23-results"))
    lines = header("openb replay vs published FGD (ATC'23): allocated GPU % at 100% arrived load",
                   "nice .venv/bin/python bench/replay_compare.py " + " ".join(sys.argv[1:]))
    lines += ["Protocol of ../shared/traces/README.md (openb-2023), tune 1.3, no departures. "
              "`ours` = mean over the seeds run here (42-51 = the published seeds); "
              "`published` = mean of the published rows for the same policy; "
              "`vs FGD` = ours - published FGD mean. `foresight` learns the shape mix only from "
              "pods already arrived; `fgd` uses the whole trace's shape frequencies, as published.",
              "", "| trace | policy | seeds | ours mean | ours std | published mean | "
              "published FGD | ours vs published FGD |", "|---|---|---|---|---|---|---|---|"]
    order = {p: i for i, p in enumerate(POLICIES)}
    table = table.sort_values(["trace", "policy"], key=lambda s: s.map(order) if s.name ==
                              "policy" else s.map({t: i for i, t in enumerate(SHARED_TRACES)}))
    for r in table.itertuples(index=False):
        pub = "" if r.published_mean != r.published_mean else f"{r.published_mean:.2f}"
        lines.append(f"| {r.trace} | {r.policy} | {r.seeds} | {r.ours_mean:.2f} | "
                     f"{r.ours_std:.2f} | {pub} | {r.published_fgd:.2f} | "
                     f"{r.vs_published_fgd:+.2f} |")
    lines += ["", "## Done-when checks (computed from the table above)", ""]
    fgd = table[(table.trace == "default") & (table.policy == "fgd")]
    if len(fgd):
        d = float(fgd.iloc[0].vs_published_fgd)
        lines.append(f"- our `fgd` on `default` vs published FGD: {d:+.2f} points "
                     f"({'within' if abs(d) <= 1 else 'NOT within'} 1 point; "
                     f"{int(fgd.iloc[0].seeds)} seeds)")
    fs = table[table.policy == "foresight"]
    for r in fs.itertuples(index=False):
        ok = "no published curve" if r.published_fgd != r.published_fgd else \
            "meets" if r.vs_published_fgd >= 0 else "BELOW"
        lines.append(f"- `foresight` on `{r.trace}`: {r.ours_mean:.2f} vs published FGD "
                     f"{r.published_fgd:.2f} ({r.vs_published_fgd:+.2f}, {ok}; {r.seeds} seeds)")
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
