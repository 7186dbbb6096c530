"""The development comparison behind bench/fingerprint_newjob.py's training set (dev seeds only).

    nice .venv/bin/python bench/fingerprint_newjob_dev.py

Seeds 2-11 were looked at while the new-job peak-framebuffer bound was built; this records
what was measured there: one training seed (1) against two (0, 1), at the product default
(95 % quantile, 95 % confidence) and two other settings. The reported test seeds (12-16)
are not read here.
"""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import machine  # noqa: E402
from fingerprint_newjob import runs  # noqa: E402

from forecaster.fingerprint.predict import NewJobPredictor  # noqa: E402

DEV_SEEDS = tuple(range(2, 12))
OUT = Path(__file__).resolve().parent / "results" / "fingerprint_newjob_dev.md"


def main() -> None:
    t0 = time.time()
    data = {s: runs(s) for s in (0, 1, *DEV_SEEDS)}
    test = pd.concat([data[s] for s in DEV_SEEDS], ignore_index=True)
    act = test["peak_fb_mib"].to_numpy()
    rows = ["| training seeds | training runs | quantile | confidence | coverage | "
            "mean over-reservation |", "|---|---|---|---|---|---|"]
    for seeds in ((1,), (0, 1)):
        tr = pd.concat([data[s] for s in seeds], ignore_index=True)
        for cov in (0.95, 0.97):
            for conf in (None, 0.95):
                up = NewJobPredictor(coverage=cov, confidence=conf).fit(tr).predict(test)
                up = up["peak_fb_upper_mib"].to_numpy()
                rows.append(f"| {seeds} | {len(tr)} | {cov} | {conf or 'none'} | "
                            f"{np.mean(up >= act):.3f} | {np.mean((up - act) / act):.3f} |")
    lines = ["# New-job peak framebuffer: development comparison on dev seeds 2-11", "",
             "- command: `nice .venv/bin/python bench/fingerprint_newjob_dev.py`",
             f"- machine: {machine()}",
             f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- test: every run of seeds 2-11 ({len(test)} runs), the same selection as "
             "bench/fingerprint_newjob.py; wall {:.0f} s".format(time.time() - t0), "",
             *rows, "",
             "The product default (95 % quantile, 95 % confidence) was kept; the training set "
             "went from seed 1 to seeds 0-1 on this comparison, before seeds 12-16 were run."]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
