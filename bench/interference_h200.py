"""Interference on a real H200 (time-slicing and MPS), leave one workload out, and the co-location
safety that the admission bound (and the p10) gives at a declared minimum speed.

Usage: nice .venv/bin/python bench/interference_h200.py [--data DIR] [--part dev|final|all|pool]
`--data` is a colocate.py output directory (default ../shared/gpu-h200, else data/h200).
Parts: the two workloads drawn before any tuning (seeded: decode_gemv, resnet50_train) are the
final part, scored once; `dev` scores the other six among themselves (their pairs only), `final`
the final workloads' folds with every other pair as training, `all` every workload's fold (what
to run on another measurement: nothing is tuned there), `pool` every fold of every dev set
(the shared one and data/h200b, h200m, h200c ... h200i, h200k), the others in
training. `data/h200j` is set aside: no fold of a committed set trains on it (it is scored
with `--data data/h200j --part all`, once after the choices); a measurement that is none of the
committed sets (another lab's run of colocate.py) is scored with every committed set in training.
Writes bench/results/interference_h200_<part>.md (or --out).

For each workload w: every pair involving w is held out (both modes), the model and the
baselines are fit on the rest, and both directions of each held-out pair are scored.
Baselines (same folds): `train_mean` = the training mean speed of the row's mode; `util_rule` =
min(1, 100 / summed GPU util). Safety: a pending pod annotated `foresight.io/min-speed: 0.8`
beside a resident: the model admits when the pod's admission bound >= 0.8 (what the extender
does: forecaster/interference/admission.py; also shown: the p10), the rule when its speed >= 0.8,
`memaware` when the pair's memory fits (always on a 141 GB H200: it never looks at speed).
"""
from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchenv import READ_ERRORS, fail, machine  # noqa: E402

from features.h200 import PROFILING, SOLO_COLUMNS, load_h200_pairs, zero_step_bounds  # noqa: E402
from features.pairs import library_paths  # noqa: E402
from forecaster.interference.evaluate import admit_at  # noqa: E402
from forecaster.interference.evaluate import safety as gate_table  # noqa: E402
from forecaster.interference.features import directed  # noqa: E402
from forecaster.interference.model import InterferenceModel  # noqa: E402
from interference_h200_notes import NOTES  # noqa: E402
from interference_noise import repeats  # noqa: E402

FINAL = ("decode_gemv", "resnet50_train")  # np.random.default_rng(27).choice(sorted 8, 2)
# sets in no fold's training unless scored themselves. h200j (measured 2026-11-27 with h200i,
# both scored once with the model as it stood: interference_h200_i.md / _j.md) is set aside for
# the choices made after it; h200h (set aside until then), h200i and h200k (measured
# 2026-11-28, scored once first: interference_h200_k.md) are dev sets now
SET_ASIDE = ("h200j",)
#: the profiling fields among the solo features (GPM here, DCGM_FI_PROF_* in a cluster)
PROF = tuple(SOLO_COLUMNS[c] for c in PROFILING)
SAFE, MIN_SPEED = 0.85, 0.8


def committed(data: str) -> list[str]:
    """The measurements committed under data/ that train every fold, less the one being scored
    (compared by content: data/h200 is a copy of ../shared/gpu-h200). The sets in SET_ASIDE
    are left out while a committed set is scored (the dev work), and kept when the scored
    measurement is none of them: a new measurement is scored with everything measured."""
    others = library_paths([ROOT / "data"], [Path(data)])
    known = len(others) < len(library_paths([ROOT / "data"], []))
    return [str(p) for p in others if not (known and p.name in SET_ASIDE)]


def lowo(pairs: pd.DataFrame, folds: list[str], params: dict,
         extra: pd.DataFrame | None = None,
         zero_step: dict[tuple[str, str, str], float] | None = None,
         seen: int = 0) -> pd.DataFrame:
    """Held-out rows of every fold: y, model, p10, baselines. `seen` of the held-out
    workload's pairs per mode (seeded by its name) join training: the first co-locations
    a cluster observed (bench/interference_seen.py). `extra` (other measurements) joins
    every fold's training set, less any pair of the held-out workload's name. `zero_step`
    (features.h200.zero_step_bounds) keeps the windows in which a side completed no step,
    scored with y 0 and `y_upper` the most its speed can have been: the safety table counts
    them, the MAE cannot (training reads them at half the bound: load_h200_pairs)."""
    out = []
    for w in folds:
        test = (pairs["a_workload"] == w) | (pairs["b_workload"] == w)
        train, held = pairs[~test], pairs[test].reset_index(drop=True)
        if seen:
            rng = np.random.default_rng(zlib.crc32(w.encode()))
            # a permutation per mode: a larger `seen` extends a smaller one's draw
            first = [i for _, g in held.groupby("sharing")
                     for i in rng.permutation(g.index.to_numpy())[:seen]]
            train, held = pd.concat([train, held.loc[first]]), \
                held.drop(index=first).reset_index(drop=True)
        if extra is not None:
            keep = (extra["a_workload"] != w) & (extra["b_workload"] != w)
            train = pd.concat([train, extra[keep]], ignore_index=True)
        train = train.reset_index(drop=True)
        m = InterferenceModel(**params).fit(train)
        pred = m.predict(held, admit=True)
        m.familiar_ = None  # the same model without its support check, for the table
        loose = m.predict(held, admit=True)
        d, dtr = directed(held), directed(train)
        mean = dtr.groupby("sharing")["y"].mean()
        u = (d["self_gpu_util"] + d["partner_gpu_util"]).to_numpy()
        out.append(pd.DataFrame({
            "fold": w, "sharing": d["sharing"], "self": d["self_workload"],
            "partner": d["partner_workload"], "y": d["y"],
            "model": np.r_[pred["a_speed_pred"], pred["b_speed_pred"]],
            "p10": np.r_[pred["a_speed_p10"], pred["b_speed_p10"]],
            "admit": admit_at(m, pred, held["sharing"].to_numpy(), MIN_SPEED),
            "admit_any": admit_at(m, loose, held["sharing"].to_numpy(), MIN_SPEED),
            # a side unlike every workload of the fold's training (familiar.py): refused
            "unfamiliar": np.isinf(np.r_[pred["a_speed_unit"], pred["b_speed_unit"]]),
            "train_mean": d["sharing"].map(mean).to_numpy(),
            "util_rule": np.minimum(1.0, 100.0 / u)}))
    res = pd.concat(out, ignore_index=True)
    keys = zip(res["sharing"], res["self"], res["partner"])
    res["y_upper"] = [(zero_step or {}).get(k, np.nan) for k in keys]
    res.loc[res["y_upper"].notna(), "y"] = 0.0
    return res[res["y"].notna()].reset_index(drop=True)


def scores(r: pd.DataFrame) -> dict:
    """MAE and the p10's rates over the rows whose speed was measured (not zero-step windows,
    whose speed is only bounded)."""
    if "y_upper" in r:
        r = r[r["y_upper"].isna()]
    y = r["y"].to_numpy()
    mae = {k: float(np.mean(np.abs(r[k] - y))) for k in ("model", "train_mean", "util_rule")}
    best = min(mae["train_mean"], mae["util_rule"])
    unsafe = y < SAFE
    return {"rows": len(r), **{f"mae_{k}": v for k, v in mae.items()},
            "ratio": mae["model"] / best,
            "below_p10": float(np.mean(y < r["p10"])),
            "miss_085": float(np.mean(r["p10"][unsafe] >= SAFE)) if unsafe.any() else np.nan,
            "n_unsafe_085": int(unsafe.sum())}


def safety(r: pd.DataFrame) -> pd.DataFrame:
    """Admitted-unsafe and refused-safe at MIN_SPEED, per policy and mode; a zero-step window
    counts as unsafe where its bound is under MIN_SPEED (else it is left out)."""
    if "y_upper" in r:
        r = r[~(r["y_upper"] >= MIN_SPEED)]
    # the point alone: how far the information goes without any margin
    return gate_table(r, MIN_SPEED, all_label="both", policies={
        "model (admission bound)": "admit",
        **({"model (bound, no support check)": "admit_any"} if "admit_any" in r else {}),
        "model (p10)": "p10",
        "model point (no margin)": "model", "util_rule": "util_rule"})


def pool(shared: str, params: dict, no_step: bool, seen: int = 0, no_prof: bool = False
         ) -> tuple[pd.DataFrame, list[str]]:
    """Every fold of every dev set (`shared` and the committed sets but the one set aside),
    the other sets in training; rows tagged with their set. `no_prof`: each set is scored
    without its profiling fields (the other sets in training keep theirs)."""
    sets = [shared] + [x for x in committed(shared)]
    loaded = {x: load_h200_pairs(x) for x in sets}
    if no_step:
        loaded = {x: p.drop(columns=["a_step_s", "b_step_s"]) for x, p in loaded.items()}
    out = []
    for x, pairs in loaded.items():
        extra = pd.concat([p for y, p in loaded.items() if y != x], ignore_index=True)
        names = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
        if no_prof:
            pairs = without_prof(pairs)
        out.append(lowo(pairs, names, params, extra, zero_step_bounds(x), seen)
                   .assign(set=Path(x).name))
    return pd.concat(out, ignore_index=True), sets


def without_prof(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pair table without the DCGM_FI_PROF_* fields (GPM on the H200): what a cluster gives
    whose dcgm-exporter exports none of them, or a GPU without GPM (Ampere and older)."""
    return pairs.drop(columns=[f"{s}_{f}" for s in "ab" for f in PROF if f"{s}_{f}" in pairs])


# |difference| of directed speeds measured twice (`--part pool`'s repeats line, 2026-11-26):
# mean and p90, the noise of one 3 s window
NOISE_BANDS = (0.038, 0.094)


def noise_bands(r: pd.DataFrame) -> list[str]:
    """The admission bound's errors without the placements whose measured speed lies within a
    band of the floor, where one more measurement could move a row to the other side (a
    reading of the errors, not the bar: the bar counts every row)."""
    out = []
    for b in NOISE_BANDS:
        u, s = r[r["y"] < MIN_SPEED - b], r[r["y"] >= MIN_SPEED + b]
        out.append(f"{b:.3f}: admitted unsafe {fmt(float(np.mean(u['admit'] >= MIN_SPEED)), True)}"
                   f" of {len(u)}, refused safe {fmt(float(np.mean(s['admit'] < MIN_SPEED)), True)}"
                   f" of {len(s)}")
    return ["Admission bound without the placements measured within a band of the floor "
            f"(bands: the mean and p90 |difference| of speeds measured twice): "
            + "; ".join(out) + "."]


def per_set(r: pd.DataFrame) -> list[str]:
    lines = ["Per set (each set's folds, the other sets in training):", "",
             "| set | rows | model / better rule | below p10 | admission bound: admitted unsafe"
             " / refused safe | p10: admitted unsafe / refused safe |",
             "|---|---|---|---|---|---|"]
    for name, g in r.groupby("set"):
        s, safe = scores(g), safety(g)
        both = safe[safe["mode"] == "both"].set_index("policy")
        a, m = both.loc["model (admission bound)"], both.loc["model (p10)"]
        lines.append(f"| {name} | {s['rows']} | {s['ratio']:.2f}x | {fmt(s['below_p10'], True)}"
                     f" | {fmt(a.admitted_unsafe, True)} / {fmt(a.refused_safe, True)}"
                     f" | {fmt(m.admitted_unsafe, True)} / {fmt(m.refused_safe, True)} |")
    return lines + [""]


def data_line(a: argparse.Namespace, pairs: pd.DataFrame, names: list[str], extras: list[str],
              folds: list[str], sets: list[str]) -> str:
    if sets:
        return (f"Data: every fold of {', '.join(f'`{x}`' for x in sets)} ({len(pairs)} held-out"
                f" directed rows, {len(names)} workloads), each set's folds trained on its other "
                f"workloads and the other sets (less every pair of the held-out workload's name);"
                f" {', '.join(f'`data/{x}`' for x in SET_ASIDE)} set aside")
    return (f"Data: `{a.data}` ({len(pairs)} pairs, workloads {', '.join(names)}); other "
            f"measurements in every fold's training (less the held-out workload's pairs): "
            f"{', '.join(f'`{x}`' for x in extras) or 'none'}; folds: {', '.join(folds)}")


def fmt(v: float, pct: bool = False) -> str:
    return "n/a" if pd.isna(v) else (f"{100 * v:.1f} %" if pct else f"{v:.3f}")


def report(r: pd.DataFrame, title: str) -> list[str]:
    lines = [f"## {title}", "",
             "| mode | rows | model MAE | train_mean MAE | util_rule MAE | model / better rule "
             "| below p10 | p10 >= 0.85 among speed < 0.85 |", "|---|---|---|---|---|---|---|---|"]
    for mode, g in [("both", r)] + list(r.groupby("sharing")):
        s = scores(g)
        lines.append(f"| {mode} | {s['rows']} | {fmt(s['mae_model'])} | {fmt(s['mae_train_mean'])}"
                     f" | {fmt(s['mae_util_rule'])} | **{s['ratio']:.2f}x** | "
                     f"{fmt(s['below_p10'], True)} | {fmt(s['miss_085'], True)} "
                     f"(of {s['n_unsafe_085']}) |")
    lines += ["", "Per held-out workload (its fold's rows, both directions):", "",
              "| fold | mode | model MAE | better rule MAE | ratio | below p10 |",
              "|---|---|---|---|---|---|"]
    for (w, mode), g in r.groupby(["fold", "sharing"]):
        s = scores(g)
        lines.append(f"| {w} | {mode} | {fmt(s['mae_model'])} | "
                     f"{fmt(min(s['mae_train_mean'], s['mae_util_rule']))} | {s['ratio']:.2f}x | "
                     f"{fmt(s['below_p10'], True)} |")
    lines += ["", f"Co-location safety at `foresight.io/min-speed: \"{MIN_SPEED}\"` (the pending "
              "pod is the row's self, the resident its partner):", "",
              "| mode | policy | unsafe placements | admitted unsafe | safe placements | refused safe |",
              "|---|---|---|---|---|---|"]
    for s in safety(r).itertuples():
        lines.append(f"| {s.mode} | {s.policy} | {s.unsafe} | {fmt(s.admitted_unsafe, True)} | "
                     f"{s.safe} | {fmt(s.refused_safe, True)} |")
    lines += ["", *noise_bands(r), "", unfamiliar_line(r)]
    refused = r[(r["y"] >= MIN_SPEED) & (r["p10"] < MIN_SPEED)]
    if len(refused):
        near = np.abs(refused["model"] - refused["y"]) <= 0.1
        lines += ["", f"Of the {len(refused)} safe placements the model refuses, {near.mean():.0%}"
                  f" had a point prediction within 0.1 of the measured speed; their margins "
                  f"(point - p10): median {np.median(refused['model'] - refused['p10']):.3f}, "
                  f"p10-p90 {np.quantile(refused['model'] - refused['p10'], 0.1):.3f}-"
                  f"{np.quantile(refused['model'] - refused['p10'], 0.9):.3f}."]
    return lines + [""]


def unfamiliar_line(r: pd.DataFrame) -> str:
    """How many held-out placements the gate refused because a side was unlike every
    workload of its fold's training (forecaster/interference/familiar.py), and which."""
    if "unfamiliar" not in r or not r["unfamiliar"].any():
        return ("Unfamiliar sides (unlike every trained workload, refused whatever the "
                "bound): none.")
    u = r[r["unfamiliar"].astype(bool)]
    names = sorted(set(u["fold"]))
    return (f"Unfamiliar sides (unlike every trained workload, refused whatever the bound): "
            f"{len(u)} of {len(r)} held-out rows, {int((u['y'] < MIN_SPEED).sum())} of them "
            f"unsafe at {MIN_SPEED} and {int((u['y'] >= MIN_SPEED).sum())} safe (folds "
            f"{', '.join(map(str, names))}).")


def _at_most(v: float, bar: float) -> bool | None:
    """Whether a rate is within its bar; None where the set has no such placement (a set
    whose pairs are all unsafe has no refused-safe rate to hold)."""
    return None if pd.isna(v) else bool(v <= bar)


def _verdict(ok: bool | None) -> str:
    return "n/a (no such placements)" if ok is None else ("yes" if ok else "**no**")


def bars(r: pd.DataFrame) -> list[str]:
    """Issue 27's "Done when" lines on these rows, each with its value and whether it holds."""
    s = scores(r)
    safe = safety(r)
    gate = safe[(safe["mode"] == "both") & (safe["policy"] == "model (admission bound)")].iloc[0]
    rows = [("MAE <= 0.60x the better rule", f"{s['ratio']:.2f}x", s["ratio"] <= 0.60),
            ("p10 below-rate 5-15 %", fmt(s["below_p10"], True),
             0.05 <= s["below_p10"] <= 0.15),
            ("p10 >= 0.85 where speed < 0.85: <= 10 %", fmt(s["miss_085"], True),
             _at_most(s["miss_085"], 0.10)),
            (f"admitted unsafe at min-speed {MIN_SPEED} <= 5 %",
             fmt(gate.admitted_unsafe, True), _at_most(gate.admitted_unsafe, 0.05)),
            (f"refused safe at min-speed {MIN_SPEED} <= 30 %", fmt(gate.refused_safe, True),
             _at_most(gate.refused_safe, 0.30))]
    out = ["## The bars (issue 27), all held-out rows", "", "| line | value | holds |",
           "|---|---|---|", *(f"| {n} | {v} | {_verdict(ok)} |" for n, v, ok in rows), ""]
    z = r[r["y_upper"].notna()] if "y_upper" in r else r.iloc[:0]
    if len(z):
        out += [f"{len(z)} held-out directed rows are windows in which the pod completed no step "
                f"(speed under {z['y_upper'].max():.2f} by its solo rate): not in the MAE or "
                "the p10 rates, counted as unsafe placements in the safety lines "
                f"({int((z['admit'] >= MIN_SPEED).sum())} admitted by the bound, "
                f"{int((z['util_rule'] >= MIN_SPEED).sum())} by the rule).", ""]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    default = ROOT.parent / "shared" / "gpu-h200"
    ap.add_argument("--data", default=str(default if default.is_dir() else ROOT / "data" / "h200"))
    ap.add_argument("--part", choices=["dev", "final", "all", "pool"], default="dev")
    ap.add_argument("--mechanism", choices=["on", "off"], default="on")
    ap.add_argument("--ts-form", choices=["conserve", "ready", "busy"], default="conserve",
                    help="time-slicing form (mechanism.timeslice_speed); busy: before 2026-11-26")
    ap.add_argument("--mps-form", choices=["conserve", "priority", "hogging"], default="conserve",
                    help="the MPS form of the structured part (mechanism.py; priority: before "
                         "2026-11-26's conserve, hogging: the earliest)")
    ap.add_argument("--margin", choices=["scaled", "band"], default="scaled",
                    help="the p10 margin: learned scale (normalized conformal) or per band")
    ap.add_argument("--trees", type=int, default=None, help="n_estimators of the learned part")
    ap.add_argument("--leaves", type=int, default=None, help="num_leaves of the learned part")
    ap.add_argument("--min-child", type=int, default=None,
                    help="min_child_samples of the learned part")
    ap.add_argument("--alpha", type=float, default=None,
                    help="the bound's level (default 0.1: the p10); the safety trade-off of "
                         "a less pessimistic bound")
    ap.add_argument("--admit-risk", type=float, default=None,
                    help="share of unsafe placements the admission bound may admit "
                         "(default: the model's, 0.05)")
    ap.add_argument("--no-step", action="store_true", help="drop step_s (DCGM fields only)")
    ap.add_argument("--no-prof", action="store_true",
                    help="score without the profiling fields (SM activity, occupancy, tensor, "
                         "DRAM: DCGM_FI_PROF_*); the training sets keep theirs")
    ap.add_argument("--no-identity", action="store_true",
                    help="no workload identity encodings (InterferenceModel use_identity=False)")
    ap.add_argument("--extra", action="append", default=None,
                    help="another colocate output dir whose pairs join every fold's training "
                         "(default: the committed measurements, data/h200*, other than --data)")
    ap.add_argument("--no-extra", action="store_true", help="train on --data's folds alone")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rows", default=None, help="also write the held-out rows to this CSV")
    a = ap.parse_args()
    try:
        pairs = load_h200_pairs(a.data)
        extras = [] if a.no_extra else (a.extra if a.extra is not None else committed(a.data))
        extra = pd.concat([load_h200_pairs(x) for x in extras], ignore_index=True) \
            if extras else None
    except READ_ERRORS as e:  # a measurement directory that is missing or incomplete
        fail("interference_h200.py", a.data, e)
    if a.no_step:
        pairs = pairs.drop(columns=["a_step_s", "b_step_s"])
    if a.no_prof:
        pairs = without_prof(pairs)
    params = {"mechanism": a.mechanism == "on", "mps_form": a.mps_form, "ts_form": a.ts_form,
              "margin": a.margin}
    for arg, name in (("trees", "n_estimators"), ("leaves", "num_leaves"),
                      ("min_child", "min_child_samples")):
        if getattr(a, arg) is not None:
            params[name] = getattr(a, arg)
    if a.alpha is not None:
        params["alpha"] = a.alpha
    if a.admit_risk is not None:
        params["admit_risk"] = a.admit_risk
    if a.no_identity:
        params["use_identity"] = False
    names = sorted(set(pairs["a_workload"]) | set(pairs["b_workload"]))
    t = time.time()
    if a.part == "pool":
        r, sets = pool(a.data, params, a.no_step, no_prof=a.no_prof)
        names = sorted(set(r["self"]))
        pairs, extras, folds = r, [], names
    elif a.part == "dev":
        pairs = pairs[~pairs["a_workload"].isin(FINAL) & ~pairs["b_workload"].isin(FINAL)]
        folds = [w for w in names if w not in FINAL]
    else:
        folds = [w for w in names if w in FINAL] if a.part == "final" else names
    if a.part != "pool" and not folds:  # another measurement need not hold the final two
        sys.exit(f"error: --part {a.part}: no workload of {a.data} is a fold of it (final: "
                 f"{', '.join(FINAL)}); score it with --part all")
    if a.part != "pool":
        r = lowo(pairs.reset_index(drop=True), folds, params, extra, zero_step_bounds(a.data))
    took = time.time() - t
    if a.rows:
        r.to_csv(a.rows, index=False)
    cmd = "nice .venv/bin/python bench/interference_h200.py " + " ".join(sys.argv[1:])
    lines = [f"# Interference on a real H200, leave one workload out ({a.part})", "",
             f"Command: `{cmd.strip()}`  ", f"Machine: {machine()}  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
             data_line(a, pairs, names, extras, folds, sets if a.part == "pool" else [])
             + f"; mechanism {a.mechanism} (MPS form {a.mps_form}, time-slicing form {a.ts_form}, "
             f"p10 margin {a.margin}"
             f"{f', bound level alpha {a.alpha}' if a.alpha is not None else ''}), "
             f"step time "
             f"{'dropped' if a.no_step else '1 / the solo rate'}"
             f"{'; scored without profiling fields (--no-prof)' if a.no_prof else ''}; "
             f"{took:.0f} s.", "",
             *bars(r), *report(r, "Held-out rows"),
             *(per_set(r) + [repeats(sets), ""] if a.part == "pool" else []), *NOTES]
    text = "\n".join(lines)
    print(text)
    if a.out != "-":
        out = Path(a.out or ROOT / "bench" / "results" / f"interference_h200_{a.part}.md")
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
