"""`foresight` against `memaware` (issue 19) in the co-location / memory-fit replay.

Usage: nice .venv/bin/python bench/memaware.py --seeds 42-46 --workers 2
Writes bench/results/memaware.md. The replay is bench/replay_colocation.py's (openb `default`,
Gavel V100 truth, synthetic per-workload peak/declared memory ratios; see
simulator/replay/colocation.py): both policies see the same telemetry, the memory the running
pods show; `foresight` also predicts the incoming pod's peak from its workload's history.
No tuning happens here: both policies run as committed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_colocation import KEYS, _run  # noqa: E402
from replay_common import header, write  # noqa: E402

from simulator.replay.compare import parse_seeds  # noqa: E402

POLICIES = ("bestfit", "fgd", "memaware", "foresight")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seeds", default="42-46")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "memaware.md"))
    a = ap.parse_args()
    seeds = parse_seeds(a.seeds)
    jobs = [(a.trace, p, s, True) for p in POLICIES for s in seeds]
    with ProcessPoolExecutor(max(1, min(a.workers, 2))) as ex:
        runs = list(ex.map(_run, jobs))
    mean = statistics.mean
    lines = header(f"Memory-aware placement (memaware) vs foresight, co-location replay on "
                   f"`{a.trace}` (state at 100% arrived load)",
                   "nice .venv/bin/python bench/memaware.py " + " ".join(sys.argv[1:]))
    lines += ["`memaware`: the 2024 paper's memory-aware extender named in issue 19, ranking by "
              "`(1 - GPU memory used share) * (1 - GPU idle-time share)` from what the GPUs "
              "show (simulator/replay/memaware.py). `mem overflow`: pods on a shared GPU whose "
              "summed true peak memory exceeds it; `slow pairs`: co-located pairs with a true "
              f"V100 speed < 0.85. Means over seeds {a.seeds} ({len(seeds)} seeds); per-seed "
              "values in the second table.", "",
              "| policy | alloc at 100% | sharing pods | co-located pairs | slow pairs | "
              "mem overflow pods |", "|---|---|---|---|---|---|"]
    for pol in POLICIES:
        rs = [r for r in runs if r[0] == pol]
        m = {k: mean(r[4][k] for r in rs) for k in KEYS}
        lines.append(f"| {pol} | {mean(r[3] for r in rs):.2f} | {m['sharing_pods']:.0f} | "
                     f"{m['colocated_pairs']:.0f} | {m['slow_pairs']:.1f} | "
                     f"{m['memory_overflow_pods']:.1f} |")
    lines += ["", "| seed | " + " | ".join(f"{p} overflow / alloc" for p in POLICIES) + " |",
              "|---|" + "---|" * len(POLICIES)]
    for s in seeds:
        cells = []
        for p in POLICIES:
            r = next(r for r in runs if r[0] == p and r[1] == s)
            cells.append(f"{r[4]['memory_overflow_pods']} / {r[3]:.2f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    get = lambda p, k: mean(r[4][k] if k != "alloc" else r[3] for r in runs if r[0] == p)  # noqa: E731
    fo, ma = get("foresight", "memory_overflow_pods"), get("memaware", "memory_overflow_pods")
    fa, maa = get("foresight", "alloc"), get("memaware", "alloc")
    lines += ["", f"- memory overflows: foresight {fo:.1f} vs memaware {ma:.1f}: "
              f"{'fewer' if fo < ma else 'NOT fewer'}",
              f"- allocation at 100 %: foresight {fa:.2f} vs memaware {maa:.2f}: "
              f"{'no lower' if fa >= maa else f'lower by {maa - fa:.2f} points'}"]
    write(Path(a.out), lines)


if __name__ == "__main__":
    main()
