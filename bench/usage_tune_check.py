"""Why `--preset serving` cost MAE on the synthetic fleet, and what its `tune` keeps where.

    nice .venv/bin/python bench/usage_tune_check.py

1. Synthetic fleet (bench/usage_backtest.py's data: seed 3, 6 days, 8 nodes; SM activity,
   10-min horizon, with the phase): `plain` (the constructor defaults), then each of the
   serving preset's changes added alone on top of it, then the preset itself without and with
   `tune`. MAE on the same test days.
2. GenAI 2026 trace (bench/usage_genai.py's split): the serving preset fitted on *all* pods'
   bins before test_start, the final stage's fits, training data only (no test origin is
   scored). Which tree settings `tune` keeps, and the validation MAE.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fingerprint_common import RESULTS, ROOT, header, table  # noqa: E402

from features.demand_series import parse_freq, read_series_csv, regularize  # noqa: E402
from features.genai_trace import UPPER, read_genai_metric  # noqa: E402
from features.usage_series import attach_phases, read_phases  # noqa: E402
from forecaster.usage.model import UsageForecaster, preset  # noqa: E402
from usage_backtest import METRICS as SIM_METRICS, TEST_START  # noqa: E402
from usage_genai import HORIZONS, METRICS, TEST, TRACE  # noqa: E402

FS = str(ROOT / ".venv" / "bin" / "foresight")
ONE_CHANGE = {"small trees": {"num_leaves": 7, "min_child_samples": 200, "learning_rate": 0.03},
              "4 h recency weights": {"half_life": 240}, "fleet load": {"fleet": True},
              "hurdle": {"hurdle": True},
              "re-pick": {"recent_window": 6, "recent_unit": "horizons",
                          "recent_scope": "fleet"}}


def synthetic(tmp: Path) -> list[dict]:
    sim = ["simulate", "--out", str(tmp / "sim"), "--seed", "3", "--days", "6", "--step", "60",
           "--nodes", "8", "--metrics", ",".join(SIM_METRICS.values())]
    subprocess.run([FS, *sim], check=True, capture_output=True)
    subprocess.run([FS, "usage", "series", "--data", str(tmp / "sim"), "--metric", "sm",
                    "--freq", "1min", "--out", str(tmp / "sm.csv")], check=True,
                   capture_output=True)
    df = attach_phases(regularize(read_series_csv(tmp / "sm.csv"), "1min", agg="mean"),
                       read_phases(tmp / "sim" / "truth" / "phases.parquet"), "1min")
    start = pd.Timestamp(TEST_START)
    serving = preset("serving", parse_freq("1min"))
    runs = {"plain": {}, **{f"plain + {k}": v for k, v in ONE_CHANGE.items()},
            "serving without tune": {k: v for k, v in serving.items() if k != "tune"},
            "serving (tune)": serving}
    rows = []
    for name, kw in runs.items():
        m = UsageForecaster(horizon=10, **kw).fit(df[df["ds"] < start])
        p = m.predict_origins(df, start)
        rows.append({"configuration": name,
                     "MAE": float(np.mean(np.abs(p["p50"] - p["y_true"]))),
                     "kept tree settings": str(getattr(m, "params_", {}) or "own")
                     if "tune" in kw else ""})
        print(rows[-1], flush=True)
    return rows


def genai() -> list[dict]:
    series = {m: read_genai_metric(TRACE, m) for m in METRICS}
    end = max(s["ds"].max() for s in series.values()) + pd.Timedelta("1min")
    test_start = end - TEST
    kw = preset("serving", parse_freq("1min"))
    rows = []
    for metric, df in series.items():
        for h, H in HORIZONS.items():
            m = UsageForecaster(horizon=H, y_max=UPPER[metric], **kw)
            m.fit(df[df["ds"] < test_start])
            rows.append({"metric": metric, "horizon": h,
                         "kept tree settings": str(m.params_ or "own (small, 4 h recency)"),
                         "validation MAE (model)": m.val_scores_["model"]})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        syn = synthetic(Path(tmp))
    gen = genai() if TRACE.is_dir() else []
    fmt = [{k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in r.items()}
           for r in syn]
    lines = header("The serving preset's tree settings: synthetic cost and what `tune` keeps",
                   "nice .venv/bin/python bench/usage_tune_check.py",
                   [f"wall {time.time() - t0:.0f} s; deterministic fits (LightGBM seed 0)"])
    lines += ["## Synthetic fleet: SM activity, 10 min, with the phase (test days of "
              "bench/usage_backtest.py)", ""] + table(fmt)
    if gen:
        lines += ["", "## GenAI 2026: the final stage's fits, training data only "
                  "(all pods' bins before test_start; no test origin scored)", ""]
        lines += table([{k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in r.items()}
                        for r in gen])
    else:
        lines += ["", f"GenAI part skipped: {TRACE} absent."]
    (RESULTS / "usage_tune_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
