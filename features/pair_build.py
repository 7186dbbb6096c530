"""The interference pair table built from telemetry: co-location episodes, speeds, solo features.

Every question is asked of the samples' integer codes (features.sample_codes: one int64
composite per step x pod, step x GPU, ...), not of strings and Timestamps. Pod codes follow the
order of the "namespace/pod" names, so which pod is side `a` (the smaller name) and the row
order are those of the per-episode builder this replaced (git b9ce7c1; a test compares).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from features.sample_codes import SampleCodes, as_ts
from features.schema import has_pod

#: dcgm-exporter metric -> (solo feature, scale applied to the sample value).
TELEMETRY_FEATURES = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 1.0), "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_copy_util", 1.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_mbps", 1e-6),  # bytes/s -> MB/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_mbps", 1e-6),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
}
PROGRESS_METRIC = "foresight_app_iterations_total"
#: Sharing modes coded in string order (the sort order of the steps table).
SHARING_ORDER = ("mps", "node", "timeslice")


def build_pair_table(samples: pd.DataFrame, pods: pd.DataFrame, *,
                     gpu_sharing: dict[str, str] | None = None, gpu_model: str | None = None,
                     progress_metric: str = PROGRESS_METRIC, min_steps: int = 4,
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair table from GPU samples and pods (features.schema tables).

    An episode is a maximal run of sample steps in which two pods shared a GPU (and nothing
    else ran on it) or ran on different GPUs of one node while each was alone on its GPU.
    Speed of a side = steady rate of its progress counter during the episode over its solo
    steady rate while alone on its GPU (see _steady_rates; the workload's median solo rate
    when the pod never ran alone). Pods without a progress counter get NaN speed.
    Solo features = 75th percentile of each metric over the pod's busy steps alone on its GPU
    (busy: SM activity at least half its own 90th percentile); the workload's median when the
    pod never ran alone; `step_s` = 1 / the solo rate (NaN without a counter). `gpu_sharing`
    maps node -> 'timeslice' | 'mps' (cluster config, the device plugin's sharing strategy;
    default timeslice). Returns (pairs, episodes) with the
    same index; `episodes` names pods, start, end and step count of each row.
    """
    part = pair_parts(samples, gpu_sharing=gpu_sharing, progress_metric=progress_metric,
                      min_steps=min_steps)
    return finish_pairs([part], pods, gpu_model=gpu_model)


def pair_parts(samples: pd.DataFrame, *, gpu_sharing: dict[str, str] | None = None,
               progress_metric: str = PROGRESS_METRIC, min_steps: int = 4,
               step_ns: int | None = None) -> dict | None:
    """What one node group's samples say, before the workload medians that need every pod:
    per pod its solo features, solo rate and GPU count; per episode its pods, span and each
    side's steady rate (None when no pod ran). A pod runs on one node, so the samples of any
    set of whole nodes give exactly their pods' parts (features.sample_store)."""
    s = samples[has_pod(samples["pod"])]
    if s.empty:
        return None
    ts_dtype = s["ts"].dtype
    c = SampleCodes.of(s, step_ns)
    value = s["value"].to_numpy(dtype=float)
    out = {"feats": _solo_features(c, value), "n_gpus": c.gpus_per_pod()}
    rate = _progress_rates(c, value, progress_metric)
    out["ref"] = _solo_rates(rate, c)
    st = _colocation_steps(c, gpu_sharing or {})
    t = c.ts_all[st["step"]]
    grp = np.stack([st["a"], st["b"], st["mode"]])
    new = np.r_[True, (grp[:, 1:] != grp[:, :-1]).any(0) | (np.diff(t) > 1.5 * c.step)]
    ep = np.cumsum(new) - 1
    size = np.bincount(ep)
    keep = size[ep] >= min_steps
    first = np.flatnonzero(new & keep)  # episodes are contiguous runs of rows
    last = np.flatnonzero(np.r_[new[1:], True] & keep)
    a, b = c.names[st["a"][first]], c.names[st["b"][first]]
    eps = pd.DataFrame({"a_pod": a, "b_pod": b,
                        "sharing": np.asarray(SHARING_ORDER)[st["mode"][first]],
                        "start": as_ts(t[first], ts_dtype),
                        "end": as_ts(t[last] + c.step, ts_dtype),
                        "n_steps": size[ep[first]]})
    steady = _episode_rates(st, ep, keep, rate, c, min_steps, _solo_stalls(rate, c))
    for side in ("a", "b"):
        eps[f"{side}_steady"] = steady[side].reindex(ep[first]).to_numpy()
        eps[f"{side}_idle_s"] = steady[f"{side}_idle"].reindex(ep[first]).to_numpy()
    out["episodes"] = eps
    return out


def finish_pairs(parts: list[dict | None], pods: pd.DataFrame, *, gpu_model: str | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pair table from the node groups' parts: pods lacking a solo value take their
    workload's median over every group, speeds are steady rates over solo rates, and rows
    come in the order of the one-table builder (pod a, pod b, sharing, start)."""
    parts = [p for p in parts if p is not None]
    eps = pd.concat([p["episodes"] for p in parts], ignore_index=True) if parts else \
        pd.DataFrame()
    if eps.empty:
        return pd.DataFrame(), pd.DataFrame()
    # SHARING_ORDER is alphabetical: sorting the names sorts the codes
    eps = eps.sort_values(["a_pod", "b_pod", "sharing", "start"], kind="mergesort",
                          ignore_index=True)
    feats, ref, n_gpus, wl = _pod_solo(parts, pods)
    a, b = eps["a_pod"].to_numpy(), eps["b_pod"].to_numpy()
    cols: dict[str, object] = {"a_workload": wl.reindex(a).fillna("").to_numpy(),
                               "b_workload": wl.reindex(b).fillna("").to_numpy(),
                               "sharing": eps["sharing"].to_numpy()}
    for side, k in (("a", a), ("b", b)):
        base = ref.reindex(k).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            speed = eps[f"{side}_steady"].to_numpy() / base
            # a side starved for idle_s seconds, as features.h200 reads colocate.py's windows
            # with no step
            starved = starved_speed(1.0 / (base * eps[f"{side}_idle_s"].to_numpy()))
            cols[f"{side}_speed"] = np.clip(np.where(np.isnan(speed), starved, speed), 1e-3, 2.0)
        f = feats.reindex(k)
        for col in feats.columns:
            cols[f"{side}_{col}"] = f[col].to_numpy()
        cols[f"{side}_gpu_count"] = n_gpus.reindex(k).to_numpy(dtype=float)
        # solo step = 1 / solo rate of the progress counter: the mechanism part's step-time
        # signal, the same feature the bench's H200 table carries (features/h200.py)
        with np.errstate(invalid="ignore", divide="ignore"):
            cols[f"{side}_step_s"] = np.where(base > 0, 1.0 / base, np.nan)
    if gpu_model:
        cols["gpu_model"] = gpu_model
    return pd.DataFrame(cols), eps.drop(columns=["a_steady", "b_steady", "a_idle_s",
                                                 "b_idle_s"])


def workload_solo(parts: list[dict | None], pods: pd.DataFrame) -> pd.DataFrame:
    """One row per workload with a solo window: `workload`, the median over its pods of the
    solo features the pair table carries, `gpu_count` and `step_s`. Every workload that ran
    alone on a GPU is here, co-located or not: the interference model's lookup for pods asked
    by workload key (forecaster/interference/solo.py), so that a job that has only run alone
    is predicted from its own fingerprint instead of from nothing."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return pd.DataFrame(columns=["workload"])
    feats, ref, n_gpus, wl = _pod_solo(parts, pods)
    per = feats.assign(gpu_count=n_gpus.reindex(feats.index).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = ref.reindex(feats.index).to_numpy(float)
        per["step_s"] = np.where(rate > 0, 1.0 / rate, np.nan)
    per["workload"] = wl.reindex(per.index).fillna("").to_numpy()
    per = per[per["workload"] != ""]
    cols = [c for c in per.columns if c != "workload"]
    return per.groupby("workload", sort=True)[cols].median().dropna(how="all").reset_index()


def _pod_solo(parts: list[dict], pods: pd.DataFrame
              ) -> tuple[pd.DataFrame, pd.Series, pd.Series, pd.Series]:
    """Per pod: solo features, solo rate and GPU count over every node group (a pod that never
    ran alone takes its workload's median), and each pod's workload."""
    one = lambda x: x[~x.index.duplicated()]  # noqa: E731  (a pod is on one node)
    feats = one(pd.concat([p["feats"] for p in parts]))
    feats = feats[[TELEMETRY_FEATURES[m][0] for m in sorted(TELEMETRY_FEATURES)
                   if TELEMETRY_FEATURES[m][0] in feats.columns]]
    ref = one(pd.concat([p["ref"] for p in parts]))
    n_gpus = one(pd.concat([p["n_gpus"] for p in parts]))
    wl = pods.assign(key=pods["namespace"].astype(str) + "/" + pods["pod"].astype(str)
                     ).drop_duplicates("key").set_index("key")["workload"].astype(str)
    ref = _fill_by_workload(ref.to_frame("ref"), wl)["ref"]
    feats = _fill_by_workload(feats, wl)
    return feats, ref, n_gpus, wl


def _colocation_steps(c: SampleCodes, sharing: dict[str, str]) -> dict[str, np.ndarray]:
    """step, pod a < pod b, sharing code for every step two pods were alone together on one
    GPU, or each alone on its own GPU of one node; sorted into episodes' order."""
    code = {m: i for i, m in enumerate(SHARING_ORDER)}
    node_mode = np.asarray([code.get(sharing.get(n, "timeslice"), code["timeslice"])
                            for n in c.node_names] or [code["timeslice"]], dtype=np.int64)
    # two pods on one GPU: exactly two rows per (step, GPU); pair them after sorting
    two = np.flatnonzero(c.att_n == 2)
    tg = c.att_tk[two] // c.K * c.G + c.att_gpu[two]
    o = two[np.argsort(tg, kind="stable")]
    p, q = o[0::2], o[1::2]
    k1, k2 = c.att_tk[p] % c.K, c.att_tk[q] % c.K
    g_step, g_a, g_b = c.att_tk[p] // c.K, np.minimum(k1, k2), np.maximum(k1, k2)
    g_mode = node_mode[c.node_of_gpu[c.att_gpu[p]]]
    # each alone on its own GPU of one node: every pair of such pods per (step, node)
    solo = c.is_alone(c.att_tk)
    N = max(len(c.node_names), 1)
    tn = c.att_tk[solo] // c.K * N + c.node_of_gpu[c.att_gpu[solo]]
    d = pd.DataFrame({"tn": tn, "key": c.att_tk[solo] % c.K}).drop_duplicates()
    m = d.merge(d, on="tn", suffixes=("_a", "_b"))
    m = m[m["key_a"] < m["key_b"]]
    n_step = m["tn"].to_numpy() // N
    step = np.r_[g_step, n_step]
    a, b = np.r_[g_a, m["key_a"].to_numpy()], np.r_[g_b, m["key_b"].to_numpy()]
    mode = np.r_[g_mode, np.full(len(m), code["node"])]
    # a pair listed both ways at one step keeps its first row (GPU sharing before node)
    _, first = np.unique((step * c.K + a) * c.K + b, return_index=True)
    first = np.sort(first)
    step, a, b, mode = step[first], a[first], b[first], mode[first]
    order = np.lexsort((step, mode, b, a))
    return {"step": step[order], "a": a[order], "b": b[order], "mode": mode[order]}


def _solo_features(c: SampleCodes, value: np.ndarray) -> pd.DataFrame:
    """Per pod, the 75th percentile of each metric over its busy steps alone on its GPUs."""
    wanted = [i for i, n in enumerate(c.metric_names) if n in TELEMETRY_FEATURES]
    tk = c.t * c.K + c.key
    rows = np.isin(c.metric, wanted) & c.is_alone(tk)
    M = max(len(c.metric_names), 1)
    # per (pod, step, metric): mean over the pod's GPUs, i.e. a per-GPU value
    # sorted unique keys + bincount: a hash group-by of millions of int64 keys costs ~4x more
    fid, inv = np.unique(tk[rows] * M + c.metric[rows], return_inverse=True)
    per = pd.Series(np.bincount(inv, weights=value[rows]) / np.bincount(inv))
    uniq, row = np.unique(fid // M, return_inverse=True)
    present = sorted(set((fid % M).tolist()))
    col_of = {m: j for j, m in enumerate(present)}
    w = np.full((len(uniq), len(present)), np.nan)
    w[row, [col_of[m] for m in (fid % M).tolist()]] = per.to_numpy()
    names = [TELEMETRY_FEATURES[c.metric_names[m]][0] for m in present]
    scale = np.asarray([TELEMETRY_FEATURES[c.metric_names[m]][1] for m in present])
    wide = pd.DataFrame(w * scale, columns=names)
    # the old pivot's column order: metric names sorted as strings
    wide = wide[[TELEMETRY_FEATURES[n][0] for n in sorted(c.metric_names[present])]]
    key = uniq % c.K
    if "sm_active" in wide:
        hi = wide["sm_active"].groupby(key).transform("quantile", 0.9).to_numpy()
        busy = (wide["sm_active"] >= 0.5 * hi).to_numpy()
        wide, key = wide[busy], key[busy]
    feats = wide.groupby(key).quantile(0.75)
    feats.index = c.names[feats.index.to_numpy()]
    return feats


def _progress_rates(c: SampleCodes, value: np.ndarray, metric: str) -> pd.DataFrame:
    hit = np.flatnonzero(np.asarray(c.metric_names) == metric)
    rows = np.flatnonzero(c.metric == hit[0]) if len(hit) else np.array([], dtype=np.int64)
    tk = c.key[rows] * len(c.ts_all) + c.t[rows]  # pod-major: sorted = by pod, then time
    o = np.argsort(tk, kind="stable")
    tk, v = tk[o], value[rows][o]
    dup = np.r_[False, tk[1:] == tk[:-1]]
    tk, v = tk[~dup], v[~dup]
    k, t = tk // len(c.ts_all), tk % len(c.ts_all)
    same = np.r_[False, k[1:] == k[:-1]]
    dt = np.where(same, np.r_[0, np.diff(c.ts_all[t])] / 1e9, np.nan)
    dv = np.where(same, np.r_[0.0, np.diff(v)], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(dv >= 0, dv / dt, np.nan)  # a reset is not progress
    ok = np.isfinite(rate)
    return pd.DataFrame({"key": k[ok], "step": t[ok], "rate": rate[ok], "dv": dv[ok],
                         "dt": dt[ok]})


def _steady_rates(r: pd.DataFrame, by: np.ndarray) -> pd.Series:
    """Iterations / seconds over the steps of steady progress, per group: a counter that
    counts whole iterations is coarse per step, so rates are pooled; steps below half the
    typical rate straddle a phase change (checkpoint, eval) and are left out."""
    typical = r["rate"].groupby(by).transform("quantile", 0.75).to_numpy()
    keep = r["rate"].to_numpy() >= 0.5 * typical
    sums = r[["dv", "dt"]][keep].groupby(by[keep]).sum()
    return (sums["dv"] / sums["dt"]).where(sums["dt"] > 0)


def _solo_rates(rate: pd.DataFrame, c: SampleCodes) -> pd.Series:
    tk = rate["step"].to_numpy() * c.K + rate["key"].to_numpy()
    r = rate[c.is_alone(tk) & (rate["rate"].to_numpy() > 0)]
    key = r["key"].to_numpy()
    cnt = r["rate"].groupby(key).count()
    ref = _steady_rates(r, key)[cnt >= 5]
    return pd.Series(ref.to_numpy(), index=c.names[ref.index.to_numpy()])


def _fill_by_workload(df: pd.DataFrame, wl: pd.Series) -> pd.DataFrame:
    """Pods lacking a value take their workload's median (a job template's typical value)."""
    out = df.reindex(wl.index.union(df.index))
    by = out.groupby(wl.reindex(out.index).fillna("")).transform("median")
    return out.fillna(by)


def starved_speed(bound: np.ndarray) -> np.ndarray:
    """The speed read for a side that made no progress where its solo rate says it would have:
    under `bound` = 1 / (solo rate x seconds), read at half of it, the middle of what it
    allows; NaN where the bound is 1 or more (it says nothing)."""
    bound = np.asarray(bound, dtype=float)
    return np.where(bound < 1.0, bound / 2.0, np.nan)


def _rows_at(rid: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in the sorted unique `rid` (key x steps + step) of `want`, and which hit."""
    i = np.minimum(np.searchsorted(rid, want), max(len(rid) - 1, 0))
    hit = (rid[i] == want) if len(rid) else np.zeros(len(want), dtype=bool)
    return i, hit


def _moved(rid: np.ndarray, rate: pd.DataFrame, key: np.ndarray, n_ts: int,
           step: np.ndarray) -> np.ndarray:
    """Whether pod `key`'s counter moved in the interval ending at `step`."""
    inside = (step >= 0) & (step < n_ts)  # else the key next to it in `rid`
    i, hit = _rows_at(rid, key * n_ts + step)
    return inside & hit & (rate["rate"].to_numpy()[i] > 0) if len(rid) else hit


def _solo_stalls(rate: pd.DataFrame, c: SampleCodes) -> np.ndarray:
    """Per pod code, the longest stretch (s) its counter stood still while the pod was alone
    (a checkpoint, an eval, a server without requests); inf for a pod never seen alone."""
    k, st = rate["key"].to_numpy(), rate["step"].to_numpy()
    alone = c.is_alone(st * c.K + k)
    z = alone & (rate["rate"].to_numpy() == 0)
    cont = np.r_[False, (k[1:] == k[:-1]) & (st[1:] == st[:-1] + 1)]
    run = np.cumsum(~(z & cont))  # still rows that follow still rows share a run
    secs = pd.Series(rate["dt"].to_numpy()[z]).groupby(run[z]).sum()
    longest = secs.groupby(pd.Series(k[z]).groupby(run[z]).first()).max()
    out = np.full(c.K, np.inf)
    out[np.unique(k[alone])] = 0.0
    out[longest.index.to_numpy(dtype=np.int64)] = longest.to_numpy()
    return out


def _episode_rates(st: dict, ep: np.ndarray, keep: np.ndarray, rate: pd.DataFrame,
                   c: SampleCodes, min_steps: int, stalls: np.ndarray) -> dict[str, pd.Series]:
    """Per side, episode -> steady rate of the side's counter during the episode (episodes
    with too few measured steps left out); finish_pairs divides it by the solo rate. Also
    `<side>_idle`: episode -> seconds in which the side's counter did not move at all
    although it moved in the interval before the episode and in the one after it, for longer
    than it ever stood still alone (see finish_pairs: a starved side, as colocate.py's window
    with no step; a checkpoint or a server out of requests stands still alone too)."""
    # the rate at an episode's first step covers the interval before the episode began
    start = np.r_[True, ep[1:] != ep[:-1]]
    inner = keep & ~start
    rid = rate["key"].to_numpy() * len(c.ts_all) + rate["step"].to_numpy()  # sorted, unique
    enough = max(2, min_steps // 2)
    begin = np.flatnonzero(start)
    end = np.r_[begin[1:] - 1, len(ep) - 1] if len(begin) else begin
    first, last = begin[keep[begin]], end[keep[begin]]
    out = {}
    for side in ("a", "b"):
        k = st[side][inner]
        i, hit = _rows_at(rid, k * len(c.ts_all) + st["step"][inner])
        r = rate.iloc[i[hit]].reset_index(drop=True)
        e = ep[inner][hit]
        pos = r["rate"].to_numpy() > 0
        cnt = pd.Series(e[pos]).value_counts()
        steady = _steady_rates(r[pos], e[pos])
        out[side] = steady[(cnt.reindex(steady.index) >= enough).to_numpy()]
        # measured steps, none with progress, bracketed by progress before and after
        n = pd.Series(e).value_counts()
        still = n.index[(n >= enough).to_numpy() & ~n.index.isin(cnt.index)].to_numpy()
        sel = np.isin(ep[first], still)
        s0, s1 = st["step"][first[sel]], st["step"][last[sel]]
        # the intervals ending at the episode's first sample and the one before it; the one
        # after its last sample
        moved = [_moved(rid, rate, st[side][first[sel]], len(c.ts_all), at)
                 for at in (s0 - 1, s0, s1 + 1)]
        idle = pd.Series(r["dt"].to_numpy(), index=e).groupby(level=0).sum()
        idle = idle.reindex(ep[first[sel]][(moved[0] | moved[1]) & moved[2]])
        pod = pd.Series(st[side][first], index=ep[first]).reindex(idle.index).to_numpy()
        out[f"{side}_idle"] = idle[idle.to_numpy() > stalls[pod]]
    return out
