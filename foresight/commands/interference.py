"""`foresight interference fit | predict | evaluate`: the co-location slowdown model."""
from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output
from forecaster.interference.admission import ADMIT_RISK
from features.pairs import library_paths
from ground.errors import ForesightError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _read(path: Path | list[Path], require_targets: bool
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One pair table from one source, or from several stacked (e.g. one colocate.py run per
    set of workloads: a pair measured in two runs counts twice): as read, and validated.
    Each source is validated on its own, its errors and warnings naming it: stacked, an
    unrelated table (a demand series) would otherwise pass on the others' columns and add
    junk rows. The readers' warnings go to stderr, one line each."""
    from features.pairs import read_pairs, validate_pairs

    paths = path if isinstance(path, list) else [path]
    raw, valid, notes = [], [], []
    for p in paths:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = read_pairs(p)  # its errors name the path already
            try:
                valid.append(validate_pairs(r, require_targets=require_targets))
            except ForesightError as exc:
                raise ForesightError(f"{p}: {exc}") from None
        raw.append(r)
        notes += [f"{p}: {w.message}" for w in caught]
    for n in notes:
        err_console.print(f"[yellow]warning:[/] {n}", soft_wrap=True)
    if len(paths) == 1:
        return raw[0], valid[0]
    # the stack re-validated: a column one source lacks is empty in its rows (names "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each source's own warnings were given above
        pairs = validate_pairs(pd.concat(valid, ignore_index=True),
                               require_targets=require_targets)
    return pd.concat(raw, ignore_index=True), pairs


def _one_workload(table: pd.DataFrame) -> None:
    """The p10 is calibrated on workloads held out in turn: with one, nothing is left to fit
    on (the model would only say it has too few pairs)."""
    names = {str(w) for c in ("a_workload", "b_workload") if c in table
             for w in table[c].unique()} - {""}
    if len(names) == 1:
        raise ForesightError(f"the pair table names one workload only ({names.pop()}): the "
                             "p10 is calibrated on workloads held out in turn, so fitting "
                             "needs pairs of at least two workloads")


_MANY = " Repeat --pairs to stack several (one table from all)."


def _write_table(df: pd.DataFrame, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() in {".parquet", ".pq"}:
        df.to_parquet(out, index=False)
    else:
        df.to_csv(out, index=False)


def fit(pairs: list[Path] = typer.Option(..., "--pairs", help="Training pair table (CSV "
                                         "or Parquet), or a colocate.py output directory "
                                         "(solo.csv + pairs.csv), or a directory of them "
                                         "(e.g. data: each)." + _MANY),
        model_dir: Path = typer.Option(..., "--model-dir", help="Directory for the artifact."),
        seed: int = typer.Option(0, min=0, help="Random seed (calibration split, folds)."),
        alpha: float = typer.Option(0.1, help="Level of the published pessimistic bound "
                                    "(0.1: the p10; the *_p10 columns then hold that level)."),
        admit_risk: float = typer.Option(ADMIT_RISK, "--admit-risk", help="Share of unsafe "
                                         "placements the co-location gate may admit: sets the "
                                         "bound a pod's foresight.io/min-speed is held to.")
        ) -> None:
    """Fit the interference model on a pair table and save it."""
    from forecaster.interference.model import InterferenceModel

    pairs = library_paths(pairs, [])
    check_output(model_dir, "--model-dir", directory=True, model="interference",
                 inputs={"--pairs": pairs})
    table = _read(pairs, require_targets=True)[1]
    _one_workload(table)
    model = InterferenceModel(seed=seed, alpha=alpha, admit_risk=admit_risk).fit(table)
    model.save(model_dir)
    m = model.metrics_
    per_mode = ", ".join(f"{k} {v:.2f}" for k, v in sorted((m.get("scale_q_mode") or {}).items()))
    margin = (f"p10 margin q={m['scale_q']:.2f}{f' ({per_mode})' if per_mode else ''} x a "
              f"learned scale where the mechanism serves, {m['conformal_offset']:+.4f} "
              f"elsewhere" if m.get("scale_q")
              else f"p10 conformal offset {m['conformal_offset']:+.4f}")
    console.print(f"fitted on {m['pairs']} pairs ({m['directed_rows']} measured directions, "
                  f"{m['workloads']} workloads); {margin}; saved to {model_dir}")
    if m.get("admit_q"):
        unit = "" if model.admit_margin == "constant" else " x scale"
        console.print(f"min-speed held to point - q{unit}, q for {admit_risk:.0%} of unsafe "
                      "placements admitted (at min-speed 0.8): " + ", ".join(
                          f"{k} {v['0.8']:.3f}" for k, v in sorted(m["admit_q"].items())
                          if "0.8" in v))
        fam = model.familiar_
        if fam is not None and fam.threshold_ is not None:
            console.print(f"support check: a side farther than {fam.threshold_:.2f} from all "
                          f"{len(fam.vectors_)} trained workloads' fingerprints, or with none, "
                          "is refused whatever its bound")
    if m.get("mechanism_modes"):
        held = m.get("held_out_mae") or {}
        console.print(f"sharing mechanism fit for {', '.join(m['mechanism_modes'])}; serving "
                      f"{m['blend']} (held-out MAE: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in held.items()) + ")")
    else:
        console.print("no sharing mechanism (needs sharing = timeslice|mps and GPU util on "
                      "both sides): trees only")


def predict(model_dir: Path = typer.Option(..., "--model-dir", help="Saved model directory."),
            pairs: Path = typer.Option(..., "--pairs", help="Pairs to score (CSV or Parquet, or a "
                                      "colocate.py output directory)."),
            out: Path = typer.Option(..., "--out", help="Output CSV or Parquet.")) -> None:
    """Predict both sides' speed and its p10 for each pair; writes input + predictions."""
    from forecaster.interference.model import InterferenceModel

    if model_dir.exists() and not model_dir.is_dir():  # else the loader's OSError, exit 1
        raise ForesightError(f"--model-dir {model_dir} is a file: give the directory "
                             "`interference fit` wrote")
    check_output(out, "--out", inputs={"--pairs": pairs, "--model-dir": model_dir})
    model = InterferenceModel.load(model_dir)
    raw, table = _read(pairs, require_targets=False)  # warns on ignored columns
    pred = model.predict(table)
    _write_table(pd.concat([raw.reset_index(drop=True), pred], axis=1), out)
    console.print(f"wrote {len(pred)} predictions to {out}")


def evaluate(pairs: list[Path] = typer.Option(..., "--pairs", help="Pair table with targets "
                                          "(or a colocate.py output directory)." + _MANY),
             out: Path = typer.Option(..., "--out", help="Directory for table and plot."),
             extra: list[Path] = typer.Option([], "--extra", help="Other measurements (pair "
                                              "tables or colocate.py directories, e.g. the "
                                              "committed data/h200*) that join every fold's "
                                              "training and are not scored; their pairs of the "
                                              "held-out workload's name are left out. "
                                              "Repeatable; a directory of such directories "
                                              "(e.g. data) gives each, less the one scored."),
             min_speed: float = typer.Option(0.8, "--min-speed", help="The pending pod's "
                                             "declared minimum speed (foresight.io/min-speed) "
                                             "the co-location table scores the gate at."),
             seed: int = typer.Option(0, min=0, help="Random seed."),
             n_estimators: int = typer.Option(300, help="Boosting rounds per model.")) -> None:
    """Leave-one-workload-out evaluation of the model against the baselines, and of the
    co-location gate at a minimum speed."""
    from forecaster.interference.evaluate import (lowo_predictions, markdown_table, safety,
                                                  safety_markdown, score)

    if n_estimators < 1:
        raise ForesightError(f"--n-estimators {n_estimators}: must be at least 1")
    if not 0.0 < min_speed <= 1.0:
        raise ForesightError(f"--min-speed {min_speed}: must be in (0, 1]")
    check_output(out, "--out", directory=True)
    table = _read(pairs, require_targets=True)[1]
    if "a_workload" not in table or "b_workload" not in table:
        raise ForesightError("evaluate needs a_workload and b_workload to hold workloads out")
    if len(set(table["a_workload"]) | set(table["b_workload"])) < 3:
        raise ForesightError("evaluate needs at least 3 distinct workloads")
    extra = library_paths(extra, pairs)
    try:
        library = _read(list(extra), require_targets=True)[1] if extra else None
    except ForesightError as exc:  # say which input: --pairs' tables read the same way
        raise ForesightError(f"--extra: {exc}") from None
    if library is not None and not {"a_workload", "b_workload"} <= set(library):
        raise ForesightError("--extra needs a_workload and b_workload (to leave the held-out "
                             "workload's pairs out)")
    try:
        preds = lowo_predictions(table, {"seed": seed, "n_estimators": n_estimators},
                                 extra=library, min_speed=min_speed)
    except ValueError as exc:
        raise ForesightError(str(exc)) from None
    scores, gate = score(preds), safety(preds, min_speed)
    out.mkdir(parents=True, exist_ok=True)
    notes = {}
    if scores.loc[scores.method == "util_rule", "mae"].isna().all():
        notes = {"util_rule": "n/a: no utilization columns",
                 "util_linreg": "no utilization: intercept only (= training mean)"}
    md = markdown_table(scores, notes)
    sources = ", ".join(map(str, pairs))
    trained = f"; also in every fold's training: {', '.join(map(str, extra))}" if extra else ""
    (out / "interference_eval.md").write_text(
        f"# Interference, leave one workload out\n\npairs: {sources}{trained}\n\n{md}\n\n"
        f"## Co-location at foresight.io/min-speed {min_speed:g}\n\n"
        f"{safety_markdown(gate)}\n")
    preds.to_csv(out / "interference_lowo_predictions.csv", index=False)
    plot_pred_vs_true(preds, out / "interference_pred_vs_true.png")
    f = lambda v, pct=False: "n/a" if pd.isna(v) else (f"{100 * v:.1f}%" if pct else f"{v:.4f}")  # noqa: E731
    t = Table(title="leave-one-workload-out" + (f" ({len(extra)} more in training)"
                                                if extra else ""))
    for c in ("method", "MAE", "Spearman", "false-safe", "p10 coverage"):
        t.add_column(c)
    for r in scores.itertuples():
        t.add_row(r.method, f(r.mae), f(r.spearman), f(r.false_safe, True),
                  f(r.p10_coverage, True))
    console.print(t)
    g = Table(title=f"co-location at min-speed {min_speed:g}: unsafe = measured below it")
    for c in ("mode", "policy", "unsafe", "admitted unsafe", "safe", "refused safe"):
        g.add_column(c, no_wrap=c == "policy")
    for r in gate.itertuples():
        g.add_row(r.mode, r.policy, str(r.unsafe), f(r.admitted_unsafe, True), str(r.safe),
                  f(r.refused_safe, True))
    console.print(g)
    odd = preds[preds["model_unfamiliar"]] if "model_unfamiliar" in preds else preds.iloc[:0]
    if len(odd):  # why the gate refused them whatever their predicted speed
        console.print(f"{len(odd)} held-out rows refused by the gate as unfamiliar (a side "
                      "unlike every workload of its fold's training): folds "
                      f"{', '.join(sorted(map(str, set(odd['fold']))))}")
    console.print(f"wrote {out / 'interference_eval.md'} and the PNG")


def plot_pred_vs_true(preds: pd.DataFrame, path: Path) -> None:
    """Scatter of predicted (and p10) vs true held-out speed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(preds["y"], preds["model"], s=6, alpha=0.5, label="model")
    ax.scatter(preds["y"], preds["model_p10"], s=6, alpha=0.4, label="model p10")
    ax.plot([0, 1.05], [0, 1.05], "k--", lw=1)
    ax.axhline(0.85, color="grey", lw=0.5)
    ax.axvline(0.85, color="grey", lw=0.5)
    ax.set_xlabel("true speed")
    ax.set_ylabel("predicted speed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Co-location slowdown (interference) model.")
    sub.command("fit")(fit)
    sub.command("predict")(predict)
    sub.command("evaluate")(evaluate)
    app.add_typer(sub, name="interference")
