"""`foresight whatif` on real histories and at scale (issue 29).

    nice .venv/bin/python bench/whatif_bench.py openb   # bench/results/whatif_openb.md
    nice .venv/bin/python bench/whatif_bench.py openb-small  # .../whatif_openb-small.md
    nice .venv/bin/python bench/whatif_bench.py dlrm    # bench/results/whatif_dlrm.md
    nice .venv/bin/python bench/whatif_bench.py speed   # bench/results/whatif_speed.md

Each run writes the jobs/nodes CSVs it replays (under --work), runs the CLI on them exactly as
a user would, and writes the results file with the terminal summary, the command, the
machine, and the report's plots (bench/results/whatif_<name>/*.png).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchenv import machine  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
RESULTS = ROOT / "bench" / "results"


def openb(work: Path) -> tuple[Path, Path, list[str], str]:
    """The openb pod list as published (creation / scheduled / deletion times) on its GPU
    node list; LS pods are priority 1 (as the timeline replay reads qos)."""
    csv = TRACES / "openb-2023" / "csv"
    p = pd.read_csv(csv / "openb_pod_list_default.csv")
    p["priority"] = (p["qos"] == "LS").astype(int)
    jobs = work / "openb_jobs.csv"
    p.to_csv(jobs, index=False)
    # every pod of the list is alive on day 115 or later: the replay starts there (the pods
    # created before and alive then are on the cluster at the start)
    return jobs, csv / "openb_node_list_gpu_node.csv", ["--warmup", "115d"], (
        "openb_pod_list_default.csv (priority 1 for qos LS) on openb_node_list_gpu_node.csv")


def openb_small(work: Path) -> tuple[Path, Path, list[str], str]:
    """The same pods on a slice of the node list sized to their demand: the recorded history
    keeps at most 64 GPUs busy at once (0.6 % of the 6,212), so on the whole list no policy
    can matter; here nodes of a seeded shuffle of the list are taken until they hold 56 GPUs
    (about the 99th percentile of GPUs busy at once)."""
    jobs, nodes, extra, _ = openb(work)
    n = pd.read_csv(nodes).sample(frac=1.0, random_state=0)
    n = n[n["gpu"].cumsum().shift(fill_value=0) < 56]
    small = work / "openb_small_nodes.csv"
    n.to_csv(small, index=False)
    return jobs, small, extra, (f"openb_pod_list_default.csv (priority 1 for qos LS) on {len(n)}"
                                f" nodes / {int(n['gpu'].sum())} GPUs of "
                                "openb_node_list_gpu_node.csv (a seeded shuffle's first nodes)")


def dlrm(work: Path) -> tuple[Path, Path, list[str], str]:
    """GPU-node (HN) instances of the DLRM trace (1 GPU each): creation / scheduled /
    deletion times over 31 days; queue and workload = app_name. Instances that existed before
    the window (no creation_time) arrive at -1 day (they are running when it opens). No node
    list is published: 8-GPU nodes, as many as the trace's peak concurrent GPUs need."""
    d = pd.read_csv(TRACES / "dlrm-2025" / "disaggregated_DLRM_trace.csv")
    h = d[d["role"] == "HN"].copy()
    before = h["creation_time"].isna()
    h.loc[before, "creation_time"] = -86400.0
    h.loc[before, "scheduled_time"] = -86400.0
    out = pd.DataFrame({"job": h["instance_sn"], "arrival": h["creation_time"],
                        "start": h["scheduled_time"], "finish": h["deletion_time"],
                        "gpus": h["gpu_request"], "queue": h["app_name"],
                        "workload": h["app_name"]})
    jobs = work / "dlrm_jobs.csv"
    out.to_csv(jobs, index=False)
    t = np.arange(0, 31 * 86400, 600)
    c, e = out["arrival"].to_numpy(float), out["finish"].fillna(np.inf).to_numpy(float)
    peak = max(int(out["gpus"][(c <= x) & (e > x)].sum()) for x in t)
    n = int(np.ceil(peak / 8))
    nodes = work / "dlrm_nodes.csv"
    pd.DataFrame({"node": [f"hn-{i:04d}" for i in range(n)], "gpus": 8}).to_csv(nodes,
                                                                              index=False)
    return jobs, nodes, ["--warmup", "3d"], (
        f"dlrm-2025 HN instances ({before.sum()} existed before the window: arrival -1 day) "
        f"on {n} 8-GPU nodes (the trace's peak of {peak} concurrent GPUs)")


def speed(work: Path, nodes_n: int = 2000, jobs_n: int = 100_000, days: float = 7.0
          ) -> tuple[Path, Path, list[str], str]:
    """2,000 nodes (openb's node mix, resampled) and 100,000 jobs over 7 replayed days (the
    timeline's helios profile at load 0.9, one warm-up day before; drawn for the capacity,
    then thinned evenly to 100,000 with run times stretched to keep the load) as CSVs."""
    from simulator.timeline.workload import generate_jobs

    rng = np.random.default_rng(0)
    src = pd.read_csv(TRACES / "openb-2023" / "csv" / "openb_node_list_gpu_node.csv")
    pick = src.iloc[rng.choice(len(src), nodes_n)]
    nodes = work / "speed_nodes.csv"
    pd.DataFrame({"node": [f"n{i:05d}" for i in range(nodes_n)], "gpus": pick["gpu"].values,
                  "model": pick["model"].values}).to_csv(nodes, index=False)
    cap = int(pick["gpu"].sum())
    j = generate_jobs("helios", 1, days=days, history_days=1.0, load=0.9, capacity_gpus=cap)
    keep = np.flatnonzero(j.arrival >= -86400.0)
    stretch = 1.0
    want = int(jobs_n * (days + 1) / days)  # jobs_n in the replayed days, and the warm-up's
    if len(keep) > want:  # thin evenly, run times stretched to keep the offered load
        stretch = len(keep) / want
        keep = keep[np.linspace(0, len(keep) - 1, want).astype(int)]
    t0 = pd.Timestamp("2026-01-05", tz="UTC")
    arr = t0 + pd.to_timedelta(j.arrival[keep], unit="s")
    out = pd.DataFrame({"job": [f"j{i}" for i in keep],
                        "arrival": arr.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                        "runtime_s": (j.duration[keep] * stretch).round(1),
                        "gpus": np.where(j.milli[keep] < 1000, j.milli[keep] / 1000.0,
                                         j.gpus[keep]),
                        "pods": j.pods[keep], "queue": np.asarray(j.tenants)[j.tenant[keep]],
                        "priority": j.priority[keep],
                        "gang": np.where(j.pods[keep] > 1, [f"g{i}" for i in keep], "")})
    jobs = work / "speed_jobs.csv"
    out.to_csv(jobs, index=False)
    return jobs, nodes, ["--warmup", "1d", "--end", (t0 + pd.Timedelta(days=days)).isoformat()
                         ], (f"{nodes_n} nodes / {cap} GPUs, {len(out)} jobs (helios profile, "
                             f"load 0.9, {days:g} replayed days after 1 warm-up day)")


def run(name: str, work: Path, right_size: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    jobs, nodes, extra, what = {"openb": openb, "openb-small": openb_small, "dlrm": dlrm,
                             "speed": speed}[name](work)
    out = work / f"out_{name}"
    cmd = [str(ROOT / ".venv" / "bin" / "foresight"), "whatif", "--jobs", str(jobs), "--nodes",
           str(nodes), "--out", str(out), "--right-size", str(right_size), *extra]
    shown = " ".join(["foresight", *cmd[1:]]).replace(str(work), "WORK")
    w = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - w
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    cpu_s = sum(float(x.split()[-1]) for x in r.stderr.splitlines()
                if x.strip().startswith(("User time", "System time")))
    rss = next((int(x.split()[-1]) for x in r.stderr.splitlines()
                if "Maximum resident set size" in x), 0) / 1024
    doc = json.loads((out / "whatif.json").read_text())
    pngs = RESULTS / f"whatif_{name}"
    if name != "speed":
        from simulator.whatif.report import plots_to_dir

        shutil.rmtree(pngs, ignore_errors=True)
        readings = plots_to_dir(out / "report.html", pngs)
    else:
        readings = []
    lines = [f"# What-if replay: {name} (issue 29)", "",
             f"- history: {what}",
             f"- command: `nice .venv/bin/python bench/whatif_bench.py {name}`, which runs "
             f"`{shown}`",
             f"- machine: {machine()}",
             f"- date: {pd.Timestamp.now(tz='UTC'):%Y-%m-%d %H:%M} UTC; git rev "
             f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}",
             f"- wall time {wall:.0f} s, CPU time {cpu_s:.0f} s (user + sys; the replays "
             f"{doc['seconds']:.0f} s wall, of which forecasts {doc['forecast_seconds']:.0f} s);"
             f" peak resident memory {rss:.0f} MB (`/usr/bin/time -v`)",
             "- per policy, replay wall / CPU seconds (forecasts not included): " + ", ".join(
                 f"{k} {v:.0f} / {doc['replay_cpu_seconds'][k]:.0f}"
                 for k, v in doc["replay_seconds"].items()), "",
             "## Terminal summary", "", "```", r.stdout.rstrip(), "```", ""]
    if name == "speed":
        lines += where_time_goes(doc, wall, cpu_s, rss)
    if readings:
        lines += ["## Plots (from report.html), with their readings", ""]
        lines += [f"![{n}](whatif_{name}/{n}.png)  \n{t}\n" for n, t in readings]
    (RESULTS / f"whatif_{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def lpt(costs: list[float], workers: int) -> float:
    """Makespan of the costs on ``workers`` processes, longest first (what the pool does)."""
    load = [0.0] * workers
    for c in sorted(costs, reverse=True):
        load[load.index(min(load))] += c
    return max(load)


def where_time_goes(doc: dict, wall: float, cpu_s: float, rss: float) -> list[str]:
    rep = doc["replay_cpu_seconds"]
    replay_cpu = sum(rep.values())
    fc = doc["forecast_seconds"]
    rest = max(cpu_s - replay_cpu - fc, 0.0)  # the pool's children are in the CPU time
    span = lpt(list(rep.values()), doc["workers"])
    ideal = fc + rest + span
    return ["## Where the time goes", "",
            f"- CPU seconds: replays {replay_cpu:.0f} (" + ", ".join(
                f"{k} {v:.0f}" for k, v in rep.items()) + f"), forecasts {fc:.0f} (the demand "
            "forecaster refit once a replayed day, one fit shared by the reserve and backfill "
            f"policies, and the run-time predictor), the rest {rest:.0f} (right-sizing's extra "
            "replays of the pick when --right-size is on, reading and checking the CSVs, the "
            "per-policy summaries, report.html's plots).",
            f"- On 2 dedicated cores, with the replays split over {doc['workers']} processes "
            f"longest first: forecasts + rest + the longer process's replays = {fc:.0f} + "
            f"{rest:.0f} + {span:.0f} = **{ideal:.0f} s ({ideal / 60:.1f} min)** against the "
            f"5-minute target; one process would take {fc + rest + replay_cpu:.0f} s.",
            f"- Measured wall time here: {wall:.0f} s ({wall / 60:.1f} min), under `nice` on the "
            "shared machine (its load average above says how busy it was): "
            + ("within" if wall <= 300 else "over") + " the 5-minute target.",
            f"- Peak resident memory: {rss:.0f} MB for the command (`/usr/bin/time -v`, the "
            f"largest of the processes), {doc['peak_rss_mb']:.0f} MB in the main process, "
            f"{doc['peak_rss_worker_mb']:.0f} MB in the largest replay process; with "
            f"{doc['workers']} replay processes at once the machine holds about "
            f"{doc['peak_rss_mb'] + doc['workers'] * doc['peak_rss_worker_mb']:.0f} MB at most "
            "(copy-on-write pages shared with the main process counted twice).", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name", choices=["openb", "openb-small", "dlrm", "speed"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/whatif_bench"))
    ap.add_argument("--right-size", type=int, default=3)
    a = ap.parse_args()
    run(a.name, a.work, a.right_size)


if __name__ == "__main__":
    main()
