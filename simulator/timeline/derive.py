"""Build data/seeds/timeline.json from ../shared/traces (run once; the file is committed).

- Helios Earth (SC'21), per VC: new GPU jobs = positive minute-to-minute increments of
  `total_job_num_noless_8` / `total_job_num_less_8` (and the GPU columns), May 2020. Gives the
  share of new jobs asking >= 8 GPUs and their mean GPU count, per VC and over all VCs.
- DLRM (NSDI'25): GPU-node (`role == HN`) instance creations per hour over the 31 days: the
  second arrival profile, used as a relative rate (mean 1).

    python -m simulator.timeline.derive [--traces ../shared/traces]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parents[2] / "data" / "seeds" / "timeline.json"


def helios_sizes(earth_vcs: Path, vcs: list[str]) -> dict:
    per_vc, tot = {}, np.zeros(4)
    for f in sorted(earth_vcs.glob("*.csv")):
        v = pd.read_csv(f)
        inc = [float(v[c].diff().clip(lower=0).sum()) for c in (
            "total_job_num_noless_8", "total_gpu_num_noless_8",
            "total_job_num_less_8", "total_gpu_num_less_8")]
        tot += inc
        if f.stem in vcs:
            jobs = inc[0] + inc[2]
            per_vc[f.stem] = {"big_job_share": round(inc[0] / jobs, 5) if jobs else 0.0,
                              "new_jobs": int(jobs)}
    return {"per_vc": per_vc,
            "big_job_share": round(tot[0] / (tot[0] + tot[2]), 5),
            "big_mean_gpus": round(tot[1] / tot[0], 3),
            "small_mean_gpus": round(tot[3] / tot[2], 3)}


def dlrm_hourly(trace: Path) -> list[float]:
    d = pd.read_csv(trace, usecols=["role", "creation_time"])
    t = d.loc[(d["role"] == "HN") & d["creation_time"].notna(), "creation_time"].to_numpy()
    n = np.bincount((t // 3600).astype(int), minlength=31 * 24)[: 31 * 24].astype(float)
    return [round(x, 3) for x in n / n.mean()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--traces", default=str(Path(__file__).resolve().parents[3] / "shared" /
                                            "traces"))
    a = ap.parse_args(argv)
    root = Path(a.traces)
    vcs = [p["vc"] for p in json.loads((OUT.parent / "arrivals.json").read_text())["profiles"]]
    out = {"helios_sizes": helios_sizes(root / "helios-earth" / "Earth_vcs", vcs),
           "dlrm_hourly_rate": dlrm_hourly(root / "dlrm-2025" / "disaggregated_DLRM_trace.csv"),
           "provenance": {
               "helios_sizes": "helios-earth/Earth_vcs/<vc>.csv (S-Lab-System-Group/"
                               "HeliosArtifact @ bdaae109): positive minute increments of "
                               "total_{job,gpu}_num_{noless,less}_8, May 2020",
               "dlrm_hourly_rate": "dlrm-2025/disaggregated_DLRM_trace.csv (alibaba/clusterdata"
                                   " @ 7a6c496e): HN (GPU) instance creations per hour, 31 days,"
                                   " divided by the mean"}}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
