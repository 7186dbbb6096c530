"""The pair table (interference): reading, validating, and building it from other sources.

Contract (../shared/DESIGN.md, "Pair table"): one row per measured co-location of job `a`
with job `b`; per-side solo features with prefixes `a_` / `b_`; context `gpu_model`,
`sharing`; targets `a_speed`, `b_speed` = co-located throughput / solo throughput.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from foresight.errors import ForesightError

#: Per-side solo features (column names without the `a_` / `b_` prefix).
SIDE_FEATURES = [
    "gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "mem_copy_util",
    "fb_used_mib", "pcie_tx_mbps", "pcie_rx_mbps", "power_w", "batch_size", "amp", "gpu_count",
]
CONTEXT_COLUMNS = ["gpu_model", "sharing"]
IDENTITY_COLUMNS = ["a_workload", "b_workload"]
TARGET_COLUMNS = ["a_speed", "b_speed"]
SHARING_VALUES = {"timeslice", "mps", "mig", "node"}

NUMERIC_COLUMNS = [f"{s}_{f}" for s in ("a", "b") for f in SIDE_FEATURES]
KNOWN_COLUMNS = IDENTITY_COLUMNS + NUMERIC_COLUMNS + CONTEXT_COLUMNS + TARGET_COLUMNS


def read_pairs(path: str | Path) -> pd.DataFrame:
    """Read a pair table from CSV or Parquet (by suffix). Errors are one-line ForesightErrors."""
    p = Path(path)
    if not p.is_file():
        raise ForesightError(f"pair table not found: {p}")
    try:
        if p.suffix.lower() in {".parquet", ".pq"}:
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except pd.errors.EmptyDataError:
        raise ForesightError(f"pair table {p} is empty") from None
    except Exception as exc:  # parser errors of either format: user input, not a bug
        raise ForesightError(f"cannot read pair table {p}: {str(exc).splitlines()[0]}") from None


def validate_pairs(df: pd.DataFrame, require_targets: bool) -> pd.DataFrame:
    """Return the usable columns of a pair table with contract dtypes, or raise ForesightError.

    Unknown columns are dropped with a warning. A table needs at least one describing column
    (a workload or a solo feature) on each side; numeric columns must be numeric; targets,
    when required, must lie in (0, 2].
    """
    if len(df) == 0:
        raise ForesightError("pair table is empty")
    unknown = [c for c in df.columns if c not in KNOWN_COLUMNS]
    if unknown:
        warnings.warn(f"ignoring unknown pair-table columns: {', '.join(map(str, unknown))}",
                      stacklevel=2)
    out = df[[c for c in KNOWN_COLUMNS if c in df.columns]].copy().reset_index(drop=True)
    for side in ("a", "b"):
        has = [c for c in out.columns if c.startswith(f"{side}_") and c != f"{side}_speed"]
        if not has:
            raise ForesightError(
                f"pair table has no usable column for side {side!r} "
                f"(need {side}_workload or solo features such as {side}_sm_active)")
    for col in NUMERIC_COLUMNS + TARGET_COLUMNS:
        if col not in out.columns:
            continue
        if pd.api.types.is_numeric_dtype(out[col]) and not pd.api.types.is_bool_dtype(out[col]):
            out[col] = out[col].astype("float64")  # fast path: nothing to parse
            continue
        num = pd.to_numeric(out[col], errors="coerce")
        bad = num.isna() & out[col].notna()
        if bad.any():
            raise ForesightError(
                f"column {col!r} has non-numeric value {out[col][bad].iloc[0]!r} "
                f"(row {int(np.flatnonzero(bad.to_numpy())[0])})")
        out[col] = num.astype("float64")
    for col in IDENTITY_COLUMNS + CONTEXT_COLUMNS:
        if col in out.columns:
            out[col] = out[col].fillna("").astype(str)
    if "sharing" in out.columns:
        odd = set(out["sharing"].unique()) - SHARING_VALUES - {""}
        if odd:
            raise ForesightError(f"column 'sharing' has unknown value {sorted(odd)[0]!r} "
                                 f"(expected one of {', '.join(sorted(SHARING_VALUES))})")
    if require_targets:
        # A side may be unmeasured (NaN: e.g. a pod that exports no progress metric); a row
        # needs at least one measured side.
        for col in TARGET_COLUMNS:
            if col not in out.columns:
                raise ForesightError(f"pair table has no target column {col!r}")
        unmeasured = out["a_speed"].isna() & out["b_speed"].isna()
        if unmeasured.all():
            raise ForesightError("pair table has no measured speed (a_speed/b_speed all empty)")
        for col in TARGET_COLUMNS:
            y = out[col]
            bad = (y <= 0) | (y > 2)
            if bad.any():
                raise ForesightError(
                    f"column {col!r} must lie in (0, 2]; row {int(np.flatnonzero(bad.to_numpy())[0])}"
                    f" has {float(y[bad].iloc[0])}")
    return out


_KNOWN = frozenset(KNOWN_COLUMNS)
_TEXT_COLUMNS = IDENTITY_COLUMNS + CONTEXT_COLUMNS


def pair_arrays(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """`validate_pairs(df, require_targets=False)` for the prediction hot path: the known
    columns as numpy arrays (float64 numbers, str names), without copying the frame.

    A clean table (numeric columns numeric, name columns all strings, known sharing modes)
    costs a few dtype checks; anything else goes through validate_pairs, so conversions,
    errors and warnings are exactly the same as there.
    """
    cols = [c for c in df.columns if c in _KNOWN]
    clean = len(df) > 0 and all(any(c.startswith(f"{s}_") and c != f"{s}_speed" for c in cols)
                                for s in ("a", "b"))
    for c in cols:
        if not clean:
            break
        dt = df[c].dtype
        if c in _TEXT_COLUMNS:
            clean = dt == object and pd.api.types.infer_dtype(df[c], skipna=False) == "string"
        else:
            clean = pd.api.types.is_numeric_dtype(dt) and not pd.api.types.is_bool_dtype(dt)
    if clean and "sharing" in cols:
        clean = set(df["sharing"].tolist()) <= SHARING_VALUES | {""}
    if not clean:
        v = validate_pairs(df, require_targets=False)
        return {c: v[c].to_numpy(dtype=object if c in _TEXT_COLUMNS else np.float64)
                for c in v.columns}
    unknown = [c for c in df.columns if c not in _KNOWN]
    if unknown:
        warnings.warn(f"ignoring unknown pair-table columns: {', '.join(map(str, unknown))}",
                      stacklevel=2)
    return {c: df[c].to_numpy(dtype=object if c in _TEXT_COLUMNS else np.float64) for c in cols}


def load_gavel_pairs(root: str | Path, gpu: str, source: str = "physical") -> pd.DataFrame:
    """Single-GPU co-locations of one GPU type from Gavel's flattened throughput CSV.

    Keeps scale_a == scale_b == 1, drops pairs with a zero (unmeasured/infeasible)
    throughput, and keeps each unordered pair once (Gavel lists both orders).
    """
    path = Path(root) / "gavel_pairs_flat.csv"
    if not path.is_file():
        raise ForesightError(f"Gavel pair file not found: {path}")
    raw = pd.read_csv(path)
    d = raw[(raw["scale_a"] == 1) & (raw["scale_b"] == 1) & (raw["gpu"] == gpu)
            & (raw["source"] == source)]
    d = d[(d["colo_thr_a"] > 0) & (d["colo_thr_b"] > 0)
          & (d["solo_thr_a"] > 0) & (d["solo_thr_b"] > 0)]
    d = d[d["job_a"] <= d["job_b"]]  # one row per unordered pair
    if d.empty:
        raise ForesightError(f"no single-GPU Gavel pairs for gpu={gpu!r} source={source!r}")
    return pd.DataFrame({
        "a_workload": d["job_a"].to_numpy(), "b_workload": d["job_b"].to_numpy(),
        "gpu_model": gpu, "sharing": "timeslice",
        "a_speed": d["norm_speed_a"].to_numpy(), "b_speed": d["norm_speed_b"].to_numpy(),
    }).reset_index(drop=True)


# ------------------------------------------------------------------ from telemetry
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


def build_pair_table(samples: pd.DataFrame, pods: pd.DataFrame, *,
                     gpu_sharing: dict[str, str] | None = None, gpu_model: str | None = None,
                     progress_metric: str = PROGRESS_METRIC, min_steps: int = 4,
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair table from GPU samples and pods (features.schema tables).

    An episode is a maximal run of sample steps in which two pods shared a GPU (and nothing
    else ran on it) or ran on different GPUs of one node while each was alone on its GPU.
    Speed of a side = steady rate of its progress counter during the episode over its solo
    steady rate while alone on its GPU (see _steady_rate; the workload's median solo rate
    when the pod never ran alone). Pods without a progress counter get NaN speed.
    Solo features = median of each metric over the pod's busy steps alone on its GPU
    (busy: SM activity at least half its own 90th percentile); the workload's median when the
    pod never ran alone. `gpu_sharing` maps node -> 'timeslice' | 'mps' (cluster config, the
    device plugin's sharing strategy; default timeslice). Returns (pairs, episodes) with the
    same index; `episodes` names pods, start, end and step count of each row.
    """
    s = samples[samples["pod"].astype(str) != ""]
    key = s["namespace"].astype(str) + "/" + s["pod"].astype(str)
    s = s.assign(key=key.to_numpy(), uuid=s["uuid"].astype(str), node=s["node"].astype(str))
    ts_all = np.sort(s["ts"].unique())
    step = pd.Timedelta(np.median(np.diff(ts_all))) if len(ts_all) > 1 else pd.Timedelta("30s")
    att = s[["ts", "node", "uuid", "key"]].drop_duplicates()
    att["n_on_gpu"] = att.groupby(["ts", "uuid"])["key"].transform("nunique")
    alone = (att.groupby(["ts", "key"])["n_on_gpu"].max() == 1).rename("alone")

    feats, n_gpus = _solo_features(s, alone)
    rate = _progress_rates(s, progress_metric)
    ref = _solo_rates(rate, alone)
    wl = pods.assign(key=pods["namespace"].astype(str) + "/" + pods["pod"].astype(str)
                     ).drop_duplicates("key").set_index("key")["workload"].astype(str)
    ref = _fill_by_workload(ref.to_frame("ref"), wl)["ref"]
    feats = _fill_by_workload(feats, wl)

    # co-location steps: two pods alone together on one GPU, or each alone on its GPU
    gpu_pairs = att[att["n_on_gpu"] == 2].merge(att[att["n_on_gpu"] == 2][["ts", "uuid", "key"]],
                                               on=["ts", "uuid"], suffixes=("_a", "_b"))
    gpu_pairs = gpu_pairs[gpu_pairs["key_a"] < gpu_pairs["key_b"]]
    gpu_pairs = gpu_pairs.assign(sharing=gpu_pairs["node"].map(gpu_sharing or {})
                                 .fillna("timeslice"))
    solo_att = att.merge(alone.reset_index(), on=["ts", "key"])
    solo_att = solo_att[solo_att["alone"]][["ts", "node", "key"]].drop_duplicates()
    node_pairs = solo_att.merge(solo_att, on=["ts", "node"], suffixes=("_a", "_b"))
    node_pairs = node_pairs[node_pairs["key_a"] < node_pairs["key_b"]].assign(sharing="node")
    steps = pd.concat([gpu_pairs[["ts", "key_a", "key_b", "sharing"]],
                       node_pairs[["ts", "key_a", "key_b", "sharing"]]], ignore_index=True)
    steps = steps.drop_duplicates(["ts", "key_a", "key_b"]).sort_values(
        ["key_a", "key_b", "sharing", "ts"])
    new = (steps[["key_a", "key_b", "sharing"]].ne(steps[["key_a", "key_b", "sharing"]].shift())
           .any(axis=1)) | (steps["ts"].diff() > 1.5 * step)
    steps["episode"] = new.cumsum()

    rates = {k: g for k, g in rate.groupby("key")}
    rows, meta = [], []
    for ep, g in steps.groupby("episode", sort=True):
        if len(g) < min_steps:
            continue
        a, b, mode = g["key_a"].iloc[0], g["key_b"].iloc[0], g["sharing"].iloc[0]
        row = {"a_workload": wl.get(a, ""), "b_workload": wl.get(b, ""), "sharing": mode}
        for side, k in (("a", a), ("b", b)):
            row[f"{side}_speed"] = _episode_speed(rates, ref, k, g["ts"], min_steps)
            for f in feats.columns:
                row[f"{side}_{f}"] = feats.at[k, f] if k in feats.index else np.nan
            row[f"{side}_gpu_count"] = float(n_gpus.get(k, np.nan))
        if gpu_model:
            row["gpu_model"] = gpu_model
        rows.append(row)
        meta.append({"a_pod": a, "b_pod": b, "sharing": mode, "start": g["ts"].iloc[0],
                     "end": g["ts"].iloc[-1] + step, "n_steps": len(g)})
    return pd.DataFrame(rows), pd.DataFrame(meta)


def _solo_features(s: pd.DataFrame, alone: pd.Series) -> tuple[pd.DataFrame, dict]:
    m = s[s["metric"].astype(str).isin(TELEMETRY_FEATURES)]
    m = m.join(alone, on=["ts", "key"])
    m = m[m["alone"].fillna(False).astype(bool)]
    # per (pod, ts, metric): mean over the pod's GPUs, i.e. a per-GPU value
    w = m.pivot_table(index=["key", "ts"], columns="metric", values="value", aggfunc="mean",
                      observed=True)
    w.columns = [TELEMETRY_FEATURES[c][0] for c in w.columns.astype(str)]
    for c in w.columns:
        scale = {v[0]: v[1] for v in TELEMETRY_FEATURES.values()}[c]
        w[c] = w[c] * scale
    if "sm_active" in w:
        hi = w.groupby(level="key")["sm_active"].transform(lambda x: x.quantile(0.9))
        w = w[w["sm_active"] >= 0.5 * hi]
    feats = w.groupby(level="key").quantile(0.75)
    n_gpus = s.groupby("key")["uuid"].nunique().to_dict()
    return feats, n_gpus


def _progress_rates(s: pd.DataFrame, metric: str) -> pd.DataFrame:
    c = s[s["metric"].astype(str) == metric][["key", "ts", "value"]].sort_values(["key", "ts"])
    c = c.drop_duplicates(["key", "ts"])
    dt = c.groupby("key")["ts"].diff().dt.total_seconds()
    dv = c.groupby("key")["value"].diff()
    c = c.assign(rate=(dv / dt).where(dv >= 0), dv=dv, dt=dt)  # a reset is not progress
    return c.dropna(subset=["rate"])


def _solo_rates(rate: pd.DataFrame, alone: pd.Series) -> pd.Series:
    r = rate.join(alone, on=["ts", "key"])
    r = r[r["alone"].fillna(False).astype(bool) & (r["rate"] > 0)]
    cnt = r.groupby("key")["rate"].count()
    ref = r.groupby("key").apply(_steady_rate, include_groups=False)
    return ref[cnt >= 5]


def _steady_rate(r: pd.DataFrame) -> float:
    """Iterations / seconds over the steps of steady progress: a counter that counts whole
    iterations is coarse per step, so rates are pooled; steps below half the typical rate
    straddle a phase change (checkpoint, eval) and are left out."""
    typical = r["rate"].quantile(0.75)
    keep = r[r["rate"] >= 0.5 * typical]
    return float(keep["dv"].sum() / keep["dt"].sum()) if keep["dt"].sum() > 0 else np.nan


def _fill_by_workload(df: pd.DataFrame, wl: pd.Series) -> pd.DataFrame:
    """Pods lacking a value take their workload's median (a job template's typical value)."""
    keys = wl.index
    out = df.reindex(keys.union(df.index))
    by = out.groupby(wl.reindex(out.index).fillna("")).transform("median")
    return out.fillna(by)


def _episode_speed(rates: dict, ref: pd.Series, key: str, ts: pd.Series,
                   min_steps: int) -> float:
    if key not in ref.index or pd.isna(ref[key]) or key not in rates:
        return np.nan
    r = rates[key]
    # the rate at the first step covers the interval before the episode began
    r = r[r["ts"].isin(ts.to_numpy()[1:]) & (r["rate"] > 0)]
    if len(r) < max(2, min_steps // 2):
        return np.nan
    return float(np.clip(_steady_rate(r) / ref[key], 1e-3, 2.0))


def match_truth(episodes: pd.DataFrame, truth: pd.DataFrame,
                column: str = "pair_speed") -> pd.DataFrame:
    """Overlap-weighted true speed of each side of each episode from a truth table with
    columns namespace, pod, partner_namespace, partner_pod, start, end and `column` (the
    simulator's `truth["interference"]`: `pair_speed` is the interference function of the
    pair alone, `speed` the pod's mean speed over the truth episode, other partners and all).
    Returns columns a_speed_true, b_speed_true."""
    t = truth.assign(k=truth["namespace"].astype(str) + "/" + truth["pod"].astype(str),
                     pk=truth["partner_namespace"].astype(str) + "/"
                     + truth["partner_pod"].astype(str))
    groups = {k: g for k, g in t.groupby(["k", "pk"])}
    out = {"a_speed_true": [], "b_speed_true": []}
    for e in episodes.itertuples():
        for col, me, other in (("a_speed_true", e.a_pod, e.b_pod),
                               ("b_speed_true", e.b_pod, e.a_pod)):
            g = groups.get((me, other))
            if g is None:
                out[col].append(np.nan)
                continue
            ov = (np.minimum(g["end"], e.end) - np.maximum(g["start"], e.start)).dt.total_seconds()
            ov = ov.clip(lower=0).to_numpy()
            out[col].append(float(np.sum(ov * g[column]) / ov.sum()) if ov.sum() > 0 else np.nan)
    return pd.DataFrame(out, index=episodes.index)
