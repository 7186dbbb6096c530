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

from ground.errors import ForesightError

#: Per-side solo features (column names without the `a_` / `b_` prefix).
SIDE_FEATURES = [
    "gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "mem_copy_util",
    "fb_used_mib", "pcie_tx_mbps", "pcie_rx_mbps", "power_w", "batch_size", "amp", "gpu_count",
    "step_s",  # solo step (sync-to-sync iteration) time, s: 1 / the progress counter's rate
]
CONTEXT_COLUMNS = ["gpu_model", "sharing"]
IDENTITY_COLUMNS = ["a_workload", "b_workload"]
TARGET_COLUMNS = ["a_speed", "b_speed"]
SHARING_VALUES = {"timeslice", "mps", "mig", "node"}

NUMERIC_COLUMNS = [f"{s}_{f}" for s in ("a", "b") for f in SIDE_FEATURES]
KNOWN_COLUMNS = IDENTITY_COLUMNS + NUMERIC_COLUMNS + CONTEXT_COLUMNS + TARGET_COLUMNS


def read_pairs(path: str | Path) -> pd.DataFrame:
    """Read a pair table from CSV or Parquet (by suffix), or build it from a co-location
    measurement directory (colocate.py's solo.csv + pairs.csv: features.h200) or from Gavel's
    published throughput table (`gavel_table`). Errors are one-line ForesightErrors."""
    p = Path(path)
    if p.is_dir():
        return _measurement(p)
    if not p.is_file():
        raise ForesightError(f"pair table not found: {p}")
    try:
        if p.suffix.lower() in {".parquet", ".pq"}:
            return pd.read_parquet(p)
        raw = pd.read_csv(p)
        if GAVEL_COLUMNS <= set(raw.columns):  # Gavel's published throughput table
            out = gavel_table(raw)
            if out.empty:
                raise ForesightError(f"{p}: no single-GPU pair with both throughputs measured "
                                     "(source physical)")
            return out
        return raw
    except ForesightError:
        raise
    except pd.errors.EmptyDataError:
        raise ForesightError(f"pair table {p} is empty") from None
    except Exception as exc:  # parser errors of either format: user input, not a bug
        raise ForesightError(f"cannot read pair table {p}: {str(exc).splitlines()[0]}") from None


def library_paths(paths: list[Path], scored: list[Path]) -> list[Path]:
    """The paths as given, a directory of colocate.py directories (a library such as data/)
    replaced by each of them, less any holding a measurement of `scored` (the same pairs.csv,
    e.g. data/h200 beside ../shared/gpu-h200): that one would train on its own held-out pairs
    under another name."""
    own = {(p / "pairs.csv").read_bytes() for p in scored if (p / "pairs.csv").is_file()}
    out: list[Path] = []
    for p in paths:
        library = p.is_dir() and not (p / "pairs.csv").is_file() and \
            not (p / "solo.csv").is_file()
        found = [d for d in sorted(p.iterdir()) if (d / "pairs.csv").is_file()
                 and (d / "solo.csv").is_file()] if library else []
        if not found:  # read as given (and refused there, in one line, if it is no table)
            out.append(p)
            continue
        out += [d for d in found if (d / "pairs.csv").read_bytes() not in own]
    return out


def _measurement(root: Path) -> pd.DataFrame:
    """The pair table of a colocate.py output directory (features.h200)."""
    from features.h200 import load_h200_pairs

    if not (root / "pairs.csv").is_file() and not (root / "solo.csv").is_file():
        raise ForesightError(f"{root} is a directory without a co-location measurement "
                             "(solo.csv + pairs.csv): give a pair table file, such a directory "
                             "or a directory of them")
    try:
        return load_h200_pairs(root)
    except (ValueError, KeyError) as exc:  # pandas' parser errors and decoding errors included
        msg = f"missing column {exc}" if isinstance(exc, KeyError) else \
            (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ForesightError(f"cannot read the co-location measurement in {root}: {msg}"
                             ) from None


def _row(mask: pd.Series) -> int:
    """1-based data row (header not counted) of the first True: the table is re-indexed
    0..n-1 here, so position + 1 is the file's data row."""
    return int(np.flatnonzero(mask.to_numpy())[0]) + 1


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
                f"(data row {_row(bad)})")
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
                    f"column {col!r} must lie in (0, 2]; data row {_row(bad)}"
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
    d = gavel_table(pd.read_csv(path), source)
    d = d[d["gpu_model"] == gpu]
    if d.empty:
        raise ForesightError(f"no single-GPU Gavel pairs for gpu={gpu!r} source={source!r}")
    return d.reset_index(drop=True)


GAVEL_COLUMNS = {"gpu", "job_a", "job_b", "scale_a", "scale_b", "solo_thr_a", "solo_thr_b",
                 "colo_thr_a", "colo_thr_b", "norm_speed_a", "norm_speed_b"}


def gavel_table(raw: pd.DataFrame, source: str = "physical") -> pd.DataFrame:
    """A Gavel-format throughput table (`gavel_pairs_flat.csv`) as a pair table, every GPU type
    (`gpu_model`), rows of `source` only when the table has a `source` column."""
    d = raw[(raw["scale_a"] == 1) & (raw["scale_b"] == 1)]
    if "source" in d:
        d = d[d["source"] == source]
    d = d[(d["colo_thr_a"] > 0) & (d["colo_thr_b"] > 0)
          & (d["solo_thr_a"] > 0) & (d["solo_thr_b"] > 0)]
    d = d[d["job_a"] <= d["job_b"]]  # one row per unordered pair
    return pd.DataFrame({
        "a_workload": d["job_a"].to_numpy(), "b_workload": d["job_b"].to_numpy(),
        "gpu_model": d["gpu"].astype(str).to_numpy(), "sharing": "timeslice",
        "a_speed": d["norm_speed_a"].to_numpy(), "b_speed": d["norm_speed_b"].to_numpy(),
    })


# ------------------------------------------------------------------ from telemetry
# Built in features.pair_build; importable from here, where the contract lives.
from features.pair_build import (PROGRESS_METRIC, TELEMETRY_FEATURES,  # noqa: E402,F401
                                 build_pair_table)


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
