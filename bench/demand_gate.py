"""The retraining gate in `foresight demo` (what `make demo` runs) and `foresight train
--synthetic`: per kind, status, backtest metric, the best baseline on the same window, what is
served, and whether anything published is worse than that baseline.
    nice .venv/bin/python bench/demand_gate.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchenv import machine  # noqa: E402

FS = str(ROOT / ".venv" / "bin" / "foresight")


def table(doc: dict, registry: Path) -> tuple[list[str], bool]:
    from artifacts.registry import Registry

    reg = Registry(registry)
    rows = ["| kind | status | version in service | backtest MAE | best baseline (same window) "
            "| served | p10-p90 coverage | published model's MAE (manifest) | reason |",
            "|---|---|---|---|---|---|---|---|---|"]
    ok = True
    for kind, k in doc["kinds"].items():
        name, base = k["best_baseline"] or ("-", float("nan"))
        cur = reg.current(kind)
        pub = reg.manifest(kind, cur)["metrics"]["mae"] if cur else None
        if pub is not None and pub > base * (1 + 1e-6):
            ok = False
        served = ", ".join(f"{a} {b}" for a, b in (k["backtest"].get("served") or {}).items()) or "-"
        rows.append(f"| {kind} | {k['status']} | {cur or '-'} | {k['backtest'].get('mae', float('nan')):.4g} "
                    f"| {name} {base:.4g} | {served} | {k['backtest'].get('p10_p90_coverage', '-')} "
                    f"| {'-' if pub is None else f'{pub:.4g}'} "
                    f"| {k['reason']} |")
    return rows, ok


def main() -> None:
    lines = ["# The retraining gate in `foresight demo` and `foresight train --synthetic`", "",
             "- command: `nice .venv/bin/python bench/demand_gate.py` (runs `foresight demo --out "
             "TMP` and `foresight train --synthetic --registry TMP/reg --out TMP/rep`)",
             f"- machine: {machine()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"git {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             ""]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        runs = {"foresight demo (second run on the same history)":
                ([FS, "demo", "--out", str(t / "demo")], t / "demo" / "report", t / "demo" / "registry"),
                "foresight train --synthetic":
                ([FS, "train", "--synthetic", "--registry", str(t / "reg"), "--out", str(t / "rep")],
                 t / "rep", t / "reg")}
        for title, (cmd, rep, reg) in runs.items():
            t0 = time.time()
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
            doc = json.loads((rep / "metrics.json").read_text())
            rows, ok = table(doc, reg)
            lines += [f"## {title} ({time.time() - t0:.0f} s)", "", *rows, "",
                      f"**no published kind worse than its best baseline: {ok}**", ""]
            print("\n".join(lines[-len(rows) - 4:]), flush=True)
    (ROOT / "bench" / "results" / "demand_gate.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
