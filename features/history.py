"""A recorded job history as the what-if replay reads it: one tidy jobs table, one nodes table,
and the notes that say what was inferred and what was wrong with the input.

Both sources (`history_csv`: a jobs CSV and a nodes CSV; `history_ingest`: an ingest
directory) first build a *pod table* (one row per pod or per job: ``job``, ``gang``,
``arrival``, ``start``, ``finish``, ``runtime_s`` (s, NaN unknown), ``pods``, ``gpus`` (GPUs
per pod, a number: below 1 is a share of one GPU), ``mig_g`` (MIG compute slices, 0 none),
``queue``, ``namespace``, ``priority``, ``workload``, ``node``; times are seconds, any origin)
and a node table (``node``, ``gpus``, ``model``); `jobs_from_pods` turns the first into jobs the
same way for both, so that one history gives one result whichever way it came in.

Nothing is dropped silently: every row left out or changed is counted in a line of `Notes`
(``problem``: the input was wrong; ``inferred``: the input lacked it and a value was chosen).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MILLI = 1000
SHARE_STEP = 10  # shares are rounded to 1/100 GPU: FGD's cost grows with the number of shapes
JOB_COLUMNS = ["job", "arrival", "runtime_s", "pods", "gpus", "milli", "queue", "priority",
               "workload", "wait_s"]


@dataclass
class Notes:
    """Lines for the user: ``(kind, count, text)``, kind ``problem`` or ``inferred``."""

    lines: list[tuple[str, int, str]] = field(default_factory=list)

    def problem(self, count: int, text: str) -> None:
        if count:
            self.lines.append(("problem", int(count), text))

    def inferred(self, count: int, text: str) -> None:
        if count:
            self.lines.append(("inferred", int(count), text))

    def render(self) -> list[str]:
        return [f"{k}: {n:,} {t}" for k, n, t in self.lines]


@dataclass
class History:
    jobs: pd.DataFrame  # JOB_COLUMNS, sorted by arrival
    nodes: pd.DataFrame  # node, gpus, model
    start: float  # first time of the history (s)
    end: float  # end of the history (s)
    t0: pd.Timestamp  # wall-clock time of second 0
    notes: Notes
    source: str = ""


def _sample(names, k: int = 3) -> str:
    names = [str(x) for x in list(dict.fromkeys(names))[:k]]
    return ", ".join(names) + (", ..." if len(names) == k else "")


def runtimes(p: pd.DataFrame, end: float, notes: Notes) -> np.ndarray:
    """Run time per row: ``runtime_s``, else finish - start (start: arrival if unknown);
    still running at the end: at least the time so far, and the median of its workload's
    finished runs when longer; never started or negative: that median (all rows' median when
    the workload has none)."""
    start = p["start"].where(p["start"].notna(), p["arrival"])
    rt = p["runtime_s"].where(p["runtime_s"].notna(), p["finish"] - start).to_numpy(float)
    neg = np.isfinite(rt) & (rt < 0)
    notes.problem(int(neg.sum()), f"rows finish before they start (negative run time, e.g. "
                  f"{_sample(p['job'][neg])}): run time inferred as for unknown ones")
    rt[neg] = np.nan
    ok = np.isfinite(rt)
    med_all = float(np.median(rt[ok])) if ok.any() else 3600.0
    wl = p["workload"].astype(str).to_numpy()
    med = pd.Series(rt[ok]).groupby(wl[ok]).median()
    guess = pd.Series(wl).map(med).fillna(med_all).to_numpy(float)
    running = ~ok & p["start"].notna().to_numpy() & p["finish"].isna().to_numpy()
    so_far = np.maximum(end - start.to_numpy(float), 0.0)
    rt[running] = np.maximum(so_far[running], guess[running])
    notes.inferred(int(running.sum()), "rows still running at the end of the history: run "
                   "time = the longer of its time so far and its workload's median run time")
    rest = ~np.isfinite(rt)
    notes.inferred(int(rest.sum()), f"rows without a run time (never started, or no finish; "
                   f"e.g. {_sample(p['job'][rest])}): run time = its workload's median "
                   f"({med_all / 60:.0f} min over all rows where the workload has none)")
    rt[rest] = guess[rest]
    return np.maximum(rt, 1.0)


def shapes(p: pd.DataFrame, max_gpus: int, notes: Notes) -> tuple[np.ndarray, np.ndarray,
                                                                     np.ndarray]:
    """(whole GPUs per pod, milli per GPU, keep) from ``gpus`` / ``mig_g``."""
    g = p["gpus"].to_numpy(float)
    mig = p["mig_g"].fillna(0).to_numpy(float)
    has_mig = mig > 0
    notes.inferred(int(has_mig.sum()), "rows ask a MIG profile: replayed as a share g/7 of one "
                   "GPU (the replay packs shares, not MIG layouts)")
    g = np.where(has_mig, np.minimum(mig, 7) / 7.0, g)
    bad = ~np.isfinite(g) | (g < 0)
    notes.problem(int(bad.sum()), f"rows with no readable GPU request (e.g. "
                  f"{_sample(p['job'][bad])}): left out")
    zero = ~bad & (g == 0)
    notes.problem(int(zero.sum()), "rows ask no GPU: left out (the replay is of GPUs)")
    over1 = ~bad & (g > 1) & (g != np.round(g))
    notes.inferred(int(over1.sum()), "rows ask more than one GPU, not a whole number: "
                   "rounded up to whole GPUs")
    whole = np.where(g >= 1, np.ceil(np.nan_to_num(g) - 1e-9), 1).astype(np.int64)
    milli = np.where(g >= 1, MILLI, np.clip(np.round(np.nan_to_num(g) * MILLI / SHARE_STEP)
                                            * SHARE_STEP, SHARE_STEP, MILLI)).astype(np.int64)
    big = ~bad & ~zero & (whole > max_gpus)
    notes.problem(int(big.sum()), f"rows ask more GPUs per pod than any node has ({max_gpus}; "
                  f"e.g. {_sample(p['job'][big])}): left out (they could never start)")
    return whole, milli, ~bad & ~zero & ~big


def jobs_from_pods(p: pd.DataFrame, nodes: pd.DataFrame, end: float, notes: Notes
                   ) -> pd.DataFrame:
    """The jobs table (JOB_COLUMNS) from a pod table: run times and shapes read or inferred,
    pods of one gang joined into one job (all-or-nothing in the replay)."""
    p = p.reset_index(drop=True)
    q = p["queue"].astype(str)
    noq = q.eq("")
    from_ns = noq & p["namespace"].astype(str).ne("")
    notes.inferred(int(from_ns.sum()), "rows have no queue: their namespace is taken as queue")
    q = q.mask(from_ns, p["namespace"].astype(str))
    notes.inferred(int((noq & ~from_ns).sum()), "rows have neither queue nor namespace: "
                   "queue 'default'")
    q = q.mask(q.eq(""), "default")
    known = set(nodes["node"].astype(str))
    ran = p["node"].astype(str)
    stray = ran.ne("") & ~ran.isin(known)
    notes.problem(int(stray.sum()), f"rows ran on nodes missing from the node list ("
                  f"{_sample(ran[stray])}): replayed on the listed nodes")
    rt = runtimes(p, end, notes)
    whole, milli, keep = shapes(p, int(nodes["gpus"].max()), notes)
    wait = (p["start"] - p["arrival"]).to_numpy(float)
    df = pd.DataFrame({"job": p["job"].astype(str), "gang": p["gang"].astype(str),
                       "arrival": p["arrival"].to_numpy(float), "runtime_s": rt,
                       "pods": p["pods"].fillna(1).astype(np.int64), "gpus": whole,
                       "milli": milli, "queue": q, "priority": p["priority"].astype(np.int64),
                       "workload": p["workload"].astype(str), "wait_s": wait})[keep]
    solo = df[df["gang"].eq("")]
    grp = df[df["gang"].ne("")]
    if len(grp):
        g = grp.groupby("gang", sort=False)
        mixed = int((g["gpus"].nunique() > 1).sum() + (g["milli"].nunique() > 1).sum())
        notes.inferred(mixed, "gangs have pods of different sizes: every pod takes the largest")
        gangs = g.agg(job=("gang", "first"), arrival=("arrival", "min"),
                      runtime_s=("runtime_s", "max"), pods=("pods", "sum"),
                      gpus=("gpus", "max"), milli=("milli", "max"), queue=("queue", "first"),
                      priority=("priority", "max"), workload=("workload", "first"),
                      wait_s=("wait_s", "max")).reset_index(drop=True)
        solo = pd.concat([solo, gangs], ignore_index=True)
    out = solo[JOB_COLUMNS].sort_values(["arrival", "job"], kind="mergesort")
    return out.reset_index(drop=True)


def node_table(df: pd.DataFrame, notes: Notes) -> pd.DataFrame:
    """node, gpus (int), model; rows without GPUs or with a repeated name are said and left out."""
    n = pd.DataFrame({"node": df["node"].astype(str),
                      "gpus": pd.to_numeric(df["gpus"], errors="coerce"),
                      "model": df["model"].fillna("").astype(str) if "model" in df else ""})
    from features.schema import MAX_GPUS_PER_NODE

    bad = ~np.isfinite(n["gpus"].to_numpy(float)) | (n["gpus"] < 0)
    notes.problem(int(bad.sum()), "nodes with an unreadable GPU count: left out")
    # the replay sizes nodes x GPUs arrays: a count no node has would exhaust memory
    huge = ~bad & (n["gpus"] > MAX_GPUS_PER_NODE)
    notes.problem(int(huge.sum()), f"nodes with more than {MAX_GPUS_PER_NODE} GPUs "
                  f"({_sample(n['node'][huge])}): left out")
    bad |= huge
    none = ~bad & (n["gpus"] == 0)
    notes.problem(int(none.sum()), "nodes without GPUs: left out")
    dup = n["node"].duplicated(keep="first") & ~bad & ~none
    notes.problem(int(dup.sum()), f"nodes listed twice ({_sample(n['node'][dup])}): the first "
                  "row kept")
    n = n[~bad & ~none & ~dup].copy()
    n["gpus"] = n["gpus"].astype(np.int64)
    return n.reset_index(drop=True)


MAX_SPAN_DAYS = 400


def finish_history(pods: pd.DataFrame, nodes: pd.DataFrame, end: float | None, t0, notes: Notes,
                   source: str) -> History:
    """Shared last step of both readers: end of history, jobs, and nodes never used."""
    from ground.errors import ForesightError

    if nodes.empty:
        raise ForesightError("no node with GPUs in the input: nothing to replay on")
    ok = pods["arrival"].notna()
    notes.problem(int((~ok).sum()), f"rows without a readable arrival time (e.g. "
                  f"{_sample(pods['job'][~ok])}): left out")
    pods = pods[ok]
    if pods.empty:
        raise ForesightError("no job with a readable arrival time in the input")
    a = pods["arrival"].to_numpy(float)
    last = np.nanmax(np.r_[a, pods["finish"].to_numpy(float), pods["start"].to_numpy(float),
                           a + pods["runtime_s"].to_numpy(float)])
    end = float(last if end is None else end)
    # the replay's grids grow with the window: a year is far past any use (and --end in the
    # year 3000 would run until memory runs out)
    if end - float(a.min()) > MAX_SPAN_DAYS * 86400:
        raise ForesightError(f"the history would span {(end - a.min()) / 86400:,.0f} days from "
                             f"its first arrival to its end: at most {MAX_SPAN_DAYS} "
                             "(check --end, or replay a shorter export)")
    jobs = jobs_from_pods(pods, nodes, end, notes)
    if jobs.empty:
        raise ForesightError("no job left to replay after the problems above")
    used = set(pods["node"].astype(str))
    idle = ~nodes["node"].isin(used)
    if (pods["node"].astype(str) != "").any():
        notes.inferred(int(idle.sum()), f"nodes never ran a GPU pod in the history ("
                       f"{_sample(nodes['node'][idle])}): replayed as free capacity")
    return History(jobs, nodes, float(pods["arrival"].min()), end, t0, notes, source)
