"""Leave-one-workload-out evaluation of the interference model against its baselines.

For each workload w, every pair involving w (on either side) is held out, the model and the
baselines are fit on the rest, and both directions of each held-out pair are scored. Baselines
(computed in the same run, on the same folds):
- `always_1`: no slowdown ever (the trust model of blind packing);
- `train_mean`: the mean training speed, per sharing mode where the pairs say which (a mode
  the training lacks gets the overall mean);
- `util_rule`: speed = min(1, 100 / summed GPU utilization) -- the "summed utilization under
  100%" rule as a speed; needs `gpu_util` (or `sm_active`) on both sides, otherwise n/a;
- `util_linreg`: linear regression of speed on summed utilization; without utilization it
  degrades to an intercept, i.e. the training mean.

`extra` pairs (other measurements: a library of measured workloads) join every fold's training
and are never scored; their pairs of the held-out workload's name are left out. With a
`min_speed`, each row also carries the co-location gate's decision (`model_admit`: the
admission bound a pod's foresight.io/min-speed is held to), which `safety` scores.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.linear_model import LinearRegression

from features.pairs import validate_pairs
from forecaster.interference.model import InterferenceModel
from forecaster.interference.features import directed

SAFE = 0.85
METHODS = ["model", "always_1", "train_mean", "util_rule", "util_linreg"]


def summed_util(d: pd.DataFrame) -> np.ndarray | None:
    """Summed GPU utilization in percent of a directed table, or None when not measurable."""
    if "self_gpu_util" in d and "partner_gpu_util" in d:
        return (d["self_gpu_util"] + d["partner_gpu_util"]).to_numpy(float)
    if "self_sm_active" in d and "partner_sm_active" in d:
        return 100.0 * (d["self_sm_active"] + d["partner_sm_active"]).to_numpy(float)
    return None


def baselines(train: pd.DataFrame, test: pd.DataFrame) -> dict[str, np.ndarray]:
    """Baseline speed predictions for the directed rows of `test`, fit on `train` pairs."""
    dtr, dte = directed(train), directed(test)
    dtr = dtr[dtr["y"].notna()]
    n = len(dte)
    mean = float(dtr["y"].mean())
    out = {"always_1": np.ones(n), "train_mean": np.full(n, mean)}
    if "sharing" in dtr and "sharing" in dte:  # per mode: time-slicing and MPS differ by ~0.2
        per = dtr.groupby(dtr["sharing"].astype(str))["y"].mean()
        out["train_mean"] = dte["sharing"].astype(str).map(per).fillna(mean).to_numpy(float)
    u_tr, u_te = summed_util(dtr), summed_util(dte)
    if u_tr is None or u_te is None:
        out["util_rule"] = np.full(n, np.nan)
        out["util_linreg"] = np.full(n, mean)
    else:
        rule = np.minimum(1.0, 100.0 / np.maximum(np.nan_to_num(u_te, nan=0.0), 1e-9))
        if "sharing" in dte:  # separate GPUs on one node: the rule sees no GPU contention
            rule = np.where(dte["sharing"].to_numpy() == "node", 1.0, rule)
        out["util_rule"] = rule
        ok = ~np.isnan(u_tr)
        lr = LinearRegression().fit(u_tr[ok].reshape(-1, 1), dtr["y"].to_numpy()[ok])
        out["util_linreg"] = np.clip(lr.predict(np.nan_to_num(u_te, nan=np.nanmean(u_tr))
                                                .reshape(-1, 1)), 0.01, 2.0)
    return out


def lowo_predictions(pairs: pd.DataFrame, model_params: dict | None = None,
                     workloads: list[str] | None = None,
                     truth: pd.DataFrame | None = None, extra: pd.DataFrame | None = None,
                     min_speed: float | None = None) -> pd.DataFrame:
    """Held-out predictions of every method, one row per (fold, pair, direction).

    `truth` (optional, aligned with `pairs`: a_speed_true, b_speed_true) adds a `y_true`
    column, e.g. a simulator's true speeds when `pairs` carries estimated ones. `extra` joins
    every fold's training (less the held-out workload's pairs); `min_speed` adds `model_admit`.
    """
    pairs = validate_pairs(pairs, require_targets=True)
    if extra is not None:
        extra = validate_pairs(extra, require_targets=True)
    if truth is not None:
        truth = truth.reset_index(drop=True)
    wl = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    rows = []
    for w in workloads or wl:
        test_mask = (pairs["a_workload"] == w) | (pairs["b_workload"] == w)
        train, test = pairs[~test_mask].reset_index(drop=True), pairs[test_mask].reset_index(drop=True)
        if extra is not None:
            other = extra[(extra["a_workload"] != w) & (extra["b_workload"] != w)]
            train = pd.concat([train, other], ignore_index=True)
        if test.empty or len(train) < 20:
            continue
        m = InterferenceModel(**(model_params or {})).fit(train)
        pred = m.predict(test, admit=min_speed is not None)
        dte = directed(test)
        frame = pd.DataFrame({
            "fold": w, "sharing": dte["sharing"] if "sharing" in dte else "",
            "self_workload": dte["self_workload"],
            "partner_workload": dte["partner_workload"], "y": dte["y"],
            "model": np.concatenate([pred["a_speed_pred"], pred["b_speed_pred"]]),
            "model_p10": np.concatenate([pred["a_speed_p10"], pred["b_speed_p10"]]),
        })
        if min_speed is not None:
            frame["model_admit"] = admit_at(m, pred, test["sharing"].to_numpy(dtype=object)
                                            if "sharing" in test else np.full(len(test), ""),
                                            min_speed)
            # a side unlike every workload of the fold's training: refused (familiar.py)
            frame["model_unfamiliar"] = np.isinf(np.concatenate([pred["a_speed_unit"],
                                                                 pred["b_speed_unit"]]))
        if truth is not None:
            t = truth[test_mask.to_numpy()]
            frame["y_true"] = np.concatenate([t["a_speed_true"], t["b_speed_true"]])
        for name, values in baselines(train, test).items():
            frame[name] = values
        rows.append(frame)
    if not rows:
        raise ValueError("no fold could be evaluated")
    res = pd.concat(rows, ignore_index=True)
    return res[res["y"].notna()].reset_index(drop=True)  # unmeasured sides are not scored


def admit_at(model: InterferenceModel, pred: pd.DataFrame, sharing: np.ndarray,
             floor: float) -> np.ndarray:
    """The admission bound of both directions (a then b) at `floor`, as the extender holds a
    pod's minimum speed: per sharing mode. `pred` from `model.predict(..., admit=True)`."""
    out = []
    for side in "ab":
        v = {c: pred[f"{side}_speed_{c}"].to_numpy() for c in ("pred", "unit", "p10")}
        low = v["p10"].copy()
        for mode in np.unique(sharing):
            i = sharing == mode
            low[i] = model.admit_bound(str(mode), v["pred"][i], v["unit"][i], v["p10"][i], floor)
        out.append(low)
    return np.concatenate(out)


def gate(y: np.ndarray, admit: np.ndarray, floor: float) -> tuple[float, float, int, int]:
    """(admitted unsafe, refused safe, unsafe count, safe count) of a gate's decisions `admit`
    against measured speeds `y`: a placement is unsafe when its speed is under `floor`."""
    unsafe = y < floor
    au = float(np.mean(admit[unsafe])) if unsafe.any() else np.nan
    rs = float(np.mean(~admit[~unsafe])) if (~unsafe).any() else np.nan
    return au, rs, int(unsafe.sum()), int((~unsafe).sum())


#: safety's policies: the name in its table -> the column of predicted speeds it admits on
GATE_POLICIES = {"model (admission bound)": "model_admit", "model (p10)": "model_p10",
                 "util_rule": "util_rule"}


def safety(preds: pd.DataFrame, min_speed: float, policies: dict[str, str] | None = None,
           all_label: str = "all") -> pd.DataFrame:
    """Admitted-unsafe and refused-safe at `min_speed`, over all rows (`all_label`) and per
    sharing mode, for each policy (name -> column of speeds it admits on when >= `min_speed`;
    GATE_POLICIES by default) and a memory-only policy that admits every placement that fits
    (memaware: it never refuses on speed). A policy whose column is all NaN is left out."""
    preds = preds[preds["y"].notna()]
    groups = [(all_label, preds)]
    if "sharing" in preds and (preds["sharing"].astype(str) != "").any():
        groups += [(str(k), g) for k, g in preds.groupby("sharing")]
    rows = []
    for mode, g in groups:
        y = g["y"].to_numpy()
        admits = {name: g[col].to_numpy() >= min_speed
                  for name, col in (policies or GATE_POLICIES).items() if g[col].notna().any()}
        admits["memaware"] = np.ones(len(g), bool)
        for name, adm in admits.items():
            au, rs, nu, ns = gate(y, adm, min_speed)
            rows.append({"mode": mode, "policy": name, "unsafe": nu, "safe": ns,
                         "admitted_unsafe": au, "refused_safe": rs})
    return pd.DataFrame(rows)


def safety_markdown(gate_rows: pd.DataFrame) -> str:
    """`safety`'s rows as a Markdown table."""
    fmt = lambda v: "n/a" if pd.isna(v) else f"{100 * v:.1f}%"  # noqa: E731
    lines = ["| mode | policy | unsafe | admitted unsafe | safe | refused safe |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.mode} | {r.policy} | {r.unsafe} | {fmt(r.admitted_unsafe)} | {r.safe} | "
              f"{fmt(r.refused_safe)} |" for r in gate_rows.itertuples()]
    return "\n".join(lines)


def score(preds: pd.DataFrame, target: str = "y") -> pd.DataFrame:
    """MAE, Spearman rank correlation and false-safe rate per method, plus p10 coverage.

    False-safe rate: among held-out rows whose true speed is < 0.85, the share predicted
    >= 0.85 (the co-locations a hook trusting the prediction would wrongly admit).
    """
    preds = preds[preds[target].notna()]
    y = preds[target].to_numpy()
    unsafe = y < SAFE
    out = []
    for mth in METHODS:
        p = preds[mth].to_numpy()
        if np.isnan(p).all():
            out.append({"method": mth, "mae": np.nan, "spearman": np.nan,
                        "false_safe": np.nan, "p10_coverage": np.nan})
            continue
        rho = spearmanr(p, y).statistic if np.std(p) > 0 else np.nan
        out.append({
            "method": mth, "mae": float(np.mean(np.abs(p - y))), "spearman": float(rho),
            "false_safe": float(np.mean(p[unsafe] >= SAFE)) if unsafe.any() else np.nan,
            "p10_coverage": (float(np.mean(y < preds["model_p10"].to_numpy()))
                             if mth == "model" else np.nan),
        })
    res = pd.DataFrame(out)
    res["n_rows"] = len(preds)
    res["n_unsafe"] = int(unsafe.sum())
    return res


def markdown_table(scores: pd.DataFrame, notes: dict[str, str] | None = None) -> str:
    """Scores as a Markdown table; `notes` annotates methods (e.g. 'n/a: no utilization')."""
    notes = notes or {}
    lines = ["| method | MAE | Spearman | false-safe | p10 coverage | note |",
             "|---|---|---|---|---|---|"]
    fmt = lambda v, pct=False: "n/a" if pd.isna(v) else (f"{100 * v:.1f}%" if pct else f"{v:.4f}")
    for r in scores.itertuples():
        lines.append(f"| {r.method} | {fmt(r.mae)} | {fmt(r.spearman)} | {fmt(r.false_safe, True)}"
                     f" | {fmt(r.p10_coverage, True)} | {notes.get(r.method, '')} |")
    return "\n".join(lines)
