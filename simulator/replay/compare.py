"""Run policies x seeds x traces and set the results beside the published FGD (ATC'23) numbers."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from ground.errors import ForesightError
from simulator.replay.data import load_nodes, load_trace
from simulator.replay.engine import replay

PUBLISHED_NAMES = {"01-Random": "random", "02-DotProd": "dotprod",
                   "03-GpuClustering": "gpuclustering", "04-GpuPacking": "gpupacking",
                   "05-BestFit": "bestfit", "06-FGD": "fgd"}
SHARED_TRACES = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
                 "multigpu20", "multigpu30", "multigpu40", "multigpu50")


def shared_traces_dir() -> Path:
    """../shared/traces beside the repository checkout."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def load_published(results_dir: Path) -> pd.DataFrame:
    """Published allocation at N% arrived load: columns trace, policy, seed, N -> value (long)."""
    path = Path(results_dir) / "analysis_allo_discrete.csv"
    if not path.is_file():
        raise ForesightError(f"published results not found: {path}")
    df = pd.read_csv(path)
    df["trace"] = df["workload"].str.replace("openb_pod_list_", "", regex=False)
    df["policy"] = df["sc_policy"].map(PUBLISHED_NAMES).fillna(df["sc_policy"])
    return df


@dataclass(frozen=True)
class Job:
    trace: str
    policy: str
    seed: int
    csv_dir: str
    tune: float
    until: int = 130


def _run(job: Job) -> dict:
    nodes = load_nodes(Path(job.csv_dir) / "openb_node_list_gpu_node.csv")
    pods = load_trace(job.csv_dir, job.trace)
    r = replay(nodes, pods, job.policy, job.seed, job.tune, until=job.until)
    return {"trace": job.trace, **r.to_json()}


def run_grid(traces: Iterable[str], policies: Iterable[str], seeds: Iterable[int],
             csv_dir: Path, tune: float = 1.3, workers: int = 1,
             progress: Callable[[dict], None] | None = None, until: int = 130) -> list[dict]:
    """Every (trace, policy, seed) replay; ``workers`` > 1 uses that many processes."""
    jobs = [Job(t, p, s, str(csv_dir), tune, until) for t in traces for p in policies
            for s in seeds]
    out: list[dict] = []
    if workers <= 1:
        for j in jobs:
            out.append(_run(j))
            if progress:
                progress(out[-1])
        return out
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for r in ex.map(_run, jobs):
            out.append(r)
            if progress:
                progress(r)
    return out


def summary(results: list[dict], published: pd.DataFrame | None, n: int = 100) -> pd.DataFrame:
    """Mean/std of alloc at N% per trace x policy, ours beside the published mean."""
    ours = pd.DataFrame([{"trace": r["trace"], "policy": r["policy"], "seed": r["seed"],
                          "ours": r["alloc_curve"][str(n)]} for r in results])
    table = ours.groupby(["trace", "policy"])["ours"].agg(["mean", "std", "count"]).reset_index()
    table = table.rename(columns={"mean": "ours_mean", "std": "ours_std", "count": "seeds"})
    if published is not None:
        pub = published.groupby(["trace", "policy"])[str(n)].mean().rename("published_mean")
        fgd = published[published["policy"] == "fgd"].groupby("trace")[str(n)].mean()
        table = table.merge(pub.reset_index(), on=["trace", "policy"], how="left")
        table["published_fgd"] = table["trace"].map(fgd)
        table["vs_published_fgd"] = table["ours_mean"] - table["published_fgd"]
    return table.round(3)


MAX_SEEDS = 1000


def parse_seeds(text: str) -> list[int]:
    """'42-51' or '1,2,5' -> list of seeds."""
    try:
        seeds: list[int] = []
        for part in text.split(","):
            if "-" in part.strip()[1:]:
                a, b = part.split("-", 1)
                if int(b) < int(a):
                    raise ForesightError(f"bad --seeds {text!r}: range {part.strip()} runs "
                                         "backwards (write low-high)")
                if int(b) - int(a) >= MAX_SEEDS:
                    raise ForesightError(f"--seeds {text!r}: range {part.strip()} names "
                                         f"over {MAX_SEEDS:,} seeds, the most per run")
                seeds += list(range(int(a), int(b) + 1))
            elif part.strip():
                seeds.append(int(part))
    except ValueError:
        raise ForesightError(f"bad --seeds {text!r}: use e.g. 42-51 or 1,2,3") from None
    if not seeds:
        raise ForesightError("--seeds is empty")
    if min(seeds) < 0:
        raise ForesightError(f"bad --seeds {text!r}: seeds are integers >= 0")
    if len(seeds) > MAX_SEEDS:  # 0-10000 for 0-10 would run for days
        raise ForesightError(f"--seeds {text!r} names {len(seeds):,} seeds; at most "
                             f"{MAX_SEEDS:,} per run")
    return seeds

