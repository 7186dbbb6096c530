"""`foresight fingerprint build | show | predict`: per-workload phase fingerprints."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from foresight.commands import check_output, distinct_outputs
from ground.errors import ForesightError
from ground.paths import input_file

if TYPE_CHECKING:
    from features.segments import WideSeries
    from forecaster.fingerprint.model import FingerprintModel

console = Console(highlight=False)


def _load_fp(path: Path) -> dict:
    input_file(path, "fingerprint file", "the JSON that fingerprint build --out wrote")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ForesightError(f"{path}: not a fingerprint JSON ({exc})") from None
    if not isinstance(doc, dict) or "workloads" not in doc or "schema_version" not in doc:
        raise ForesightError(f"{path}: not a fingerprint JSON (no schema_version/workloads)")
    if not isinstance(doc["workloads"], dict):
        raise ForesightError(f"{path}: not a fingerprint JSON (workloads is not an object)")
    return doc


def _entry(path: Path, name: str, fp: object) -> dict:
    """A workload's fingerprint as `show` plots it; an edited or foreign entry is one line
    naming what it lacks (it was a KeyError or TypeError out of the plot)."""
    def lacks(what: str) -> ForesightError:
        return ForesightError(f"{path}: not a fingerprint JSON (workload {name} lacks {what})")

    if not isinstance(fp, dict):
        raise lacks("an object: it is not one")
    ex = fp.get("example_run")
    if not isinstance(ex, dict) or not isinstance(ex.get("segments"), list) or \
            not isinstance(ex.get("series"), dict) or \
            not isinstance(ex["series"].get("t_s"), list):
        raise lacks("example_run (an object with segments and series.t_s)")
    phases = fp.get("phases")
    if not isinstance(phases, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("time_share"), (int, float))
            and isinstance(v.get("metrics", {}), dict) for v in phases.values()):
        raise lacks("phases (an object of phases, each with a time_share)")
    if not isinstance(fp.get("peak_fb_mib"), dict):
        raise lacks("peak_fb_mib (an object with p95 and max)")
    for k in ("runs", "sample_step_s"):
        if not isinstance(fp.get(k), (int, float)):
            raise lacks(f"{k} (a number)")
    return fp


def _tables(data: Path) -> dict:
    """Samples (dictionary-encoded: fast at tens of millions of rows) and pods."""
    import pyarrow.parquet as pq

    from features import schema
    from features.ingest import read_tables
    from features.segments import read_samples

    sp, pp = data / "samples.parquet", data / "pods.parquet"
    if not (sp.is_file() and pp.is_file()):
        tables = read_tables(data)  # its one-line errors for a missing dir / samples
        if "pods" not in tables:
            raise ForesightError(f"{data} has no pods.parquet: the workload key needs it")
        return tables
    try:
        # another table under the name: say which columns lack, not pyarrow's schema dump
        for path, what, need in ((sp, "GPU samples", _SAMPLE_NEED), (pp, "pods", _POD_NEED)):
            names = set(pq.read_schema(path).names)
            missing = [c for c in need if c not in names]
            if missing:
                raise ForesightError(f"{path}: not a {what} table (missing column(s) "
                                     f"{', '.join(missing)})")
        samples = read_samples(sp)
        pods = schema.conform(pd.read_parquet(pp), schema.POD_COLUMNS)
    except (OSError, ValueError) as exc:
        raise ForesightError(f"{data}: unreadable samples/pods table "
                             f"({str(exc).splitlines()[0]})") from None
    return {"samples": samples, "pods": pods}


# the columns read_samples reads (uuid is not), and those naming a pod
_SAMPLE_NEED = ("ts", "node", "gpu", "namespace", "pod", "metric", "value")
_POD_NEED = ("namespace", "pod")


def _labels(path: Path) -> pd.DataFrame | None:
    """The pod labels table, None without one."""
    if not path.exists():
        return None
    try:
        labels = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise ForesightError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    missing = [c for c in ("namespace", "pod", "label", "value") if c not in labels.columns]
    if missing:
        raise ForesightError(f"{path}: not a pod labels table (missing column(s) "
                             f"{', '.join(missing)})")
    return labels


def _keys(key: str, labels: pd.DataFrame | None, data: Path) -> tuple[str, ...]:
    """The --key labels. A label no pod carries would name every workload by the pods
    table's fallback while the JSON recorded the key asked for: refused, except the default
    key (data without template labels is named by the pods' workload column, as documented)."""
    from forecaster.fingerprint.model import DEFAULT_KEY

    keys = tuple(k.strip() for k in key.split(",") if k.strip())
    if not keys:
        raise ForesightError("--key: give at least one pod label")
    have = set() if labels is None else set(labels["label"].astype(str))
    unknown = [k for k in keys if k not in have]
    if unknown and keys != DEFAULT_KEY:
        if not have:
            raise ForesightError(f"--key {key}: {data} has no pod labels (pod_labels.parquet): "
                                 "leave --key out to name workloads by the pods' workload column")
        avail = sorted(have)
        raise ForesightError(f"--key {key}: no pod carries label {', '.join(unknown)}; labels: "
                             + ", ".join(avail[:12]) + (", ..." if len(avail) > 12 else ""))
    return keys


def csv_model(csv: Path, workload: str = "", method: str = "cpd"
              ) -> tuple["FingerprintModel", "WideSeries", pd.DataFrame | None, dict]:
    """Fingerprint of one GPU's wide telemetry CSV (features.telemetry_csv): the model, the
    series it read, the CSV's true phases (None without a `phase` column) and reader notes.
    `fingerprint build --csv` and bench/fingerprint_h200.py both go through here."""
    from features.telemetry_csv import TelemetryCsvError, read_telemetry_csv, telemetry_series
    from forecaster.fingerprint.model import FingerprintModel

    name = workload or csv.stem
    try:
        samples, truth, notes = read_telemetry_csv(csv, pod=name)
    except TelemetryCsvError as exc:
        raise ForesightError(str(exc)) from None
    ws = telemetry_series(samples)
    if len(ws) == 0:
        raise ForesightError(f"{csv}: no finite telemetry values")
    pods = pd.DataFrame({"namespace": ["default"], "pod": [name], "workload": [name]})
    model = FingerprintModel(method=method).fit(ws, pods, None)
    return model, ws, truth, notes


def build(data: Optional[Path] = typer.Option(None, "--data", help="Directory of tables "
                                              "(foresight simulate --out / foresight ingest)."),
          csv: Optional[Path] = typer.Option(None, "--csv", help="Instead of --data: one "
                                             "GPU's telemetry as a wide CSV (ts + metric "
                                             "columns, DCGM or NVML names; e.g. 10 Hz)."),
          workload: str = typer.Option("", "--workload", help="With --csv: the workload "
                                       "name (default: the file's stem)."),
          out: Path = typer.Option(..., "--out", help="Fingerprint JSON to write."),
          key: str = typer.Option("foresight.io/job-template", "--key", help="Comma-separated "
                                  "pod labels that name a workload."),
          method: str = typer.Option("cpd", "--method", help="cpd (ruptures) or hmm."),
          predictor: Optional[Path] = typer.Option(None, "--predictor", help="Also fit the "
                                                   "new-job predictor into this directory."),
          jobs: int = typer.Option(1, "--jobs", min=1, help="Worker processes for segmentation.")
          ) -> None:
    """Segment every (pod, GPU) series into phases and write one fingerprint per workload."""
    from features.segments import wide_series
    from forecaster.fingerprint.model import FingerprintModel, job_table, peak_runs

    if method not in ("cpd", "hmm"):
        raise ForesightError(f"bad --method {method!r}: use cpd or hmm")
    if (data is None) == (csv is None):
        raise ForesightError("give exactly one of --data DIR and --csv FILE")
    check_output(out, "--out", inputs={"--data": data, "--csv": csv})
    check_output(predictor, "--predictor", directory=True, model="new-job",
                 inputs={"--data": data, "--csv": csv})
    distinct_outputs({"--out": out, "--predictor": predictor})
    if csv is not None:
        if method != "cpd" or predictor is not None:
            raise ForesightError("--csv supports --method cpd only and no --predictor "
                                 "(one series; the new-job predictor needs a pods table)")
        model, _, _, notes = csv_model(csv, workload)
        if notes["prof_not_reporting"]:
            console.print(f"{notes['prof_not_reporting']} sample(s) with GPU util >= 50 % but "
                          "all profiling fields at 0: read as missing (counters not reporting)")
    else:
        tables = _tables(data)
        labels = _labels(data / "pod_labels.parquet")
        keys = _keys(key, labels, data)
        ws = wide_series(tables["samples"])
        if len(ws) == 0:
            raise ForesightError(f"{data}: no GPU samples carry a pod label")
        model = FingerprintModel(key=keys, method=method, n_jobs=jobs).fit(
            ws, tables["pods"], labels)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    t = Table(title=f"{len(model.fingerprints_)} workload fingerprints -> {out}")
    for c in ("workload", "runs", "phases (time share %)", "peak FB p95 / max GiB", "period s"):
        t.add_column(c)
    for w, fp in model.fingerprints_.items():
        ph = ", ".join(f"{p} {v['time_share'] * 100:.0f}" for p, v in
                       sorted(fp["phases"].items(), key=lambda kv: -kv[1]["time_share"]))
        pk = fp["peak_fb_mib"]
        t.add_row(w, str(fp["runs"]), ph, f"{(pk['p95'] or 0) / 1024:.1f} / "
                  f"{(pk['max'] or 0) / 1024:.1f}", str(fp["iteration_period_s"] or "none"))
    console.print(t)
    if predictor is not None and data is not None:
        from forecaster.fingerprint.predict import NewJobPredictor

        runs = job_table(tables["pods"], labels, keys).merge(peak_runs(model.runs_),
                                                               on=["namespace", "pod"])
        try:
            NewJobPredictor().fit(runs).save(predictor)
        except ValueError as exc:
            raise ForesightError(f"new-job predictor: {exc}") from None
        console.print(f"new-job predictor fitted on {len(runs)} runs -> {predictor}")


def show(workload: str = typer.Argument(..., help="Workload key as listed by build."),
         fingerprint: Path = typer.Option(Path("fingerprints.json"), "--fingerprint",
                                          help="Fingerprint JSON from build."),
         out: Path = typer.Option(..., "--out", help="PNG to write.")) -> None:
    """Plot a workload's phase timeline (longest run) and per-phase profile."""
    from forecaster.fingerprint.plot import plot_fingerprint

    check_output(out, "--out", inputs={"--fingerprint": fingerprint}, image=True)
    doc = _load_fp(fingerprint)
    if workload not in doc["workloads"]:
        raise ForesightError(f"unknown workload {workload!r}; known: "
                             f"{', '.join(sorted(doc['workloads']))}")
    fp = _entry(fingerprint, workload, doc["workloads"][workload])
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        plot_fingerprint(workload, fp, out)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        # deeper edits than _entry asks about (a segment of two fields, text in a series)
        raise ForesightError(f"{fingerprint}: not a fingerprint JSON (workload {workload}: "
                             f"{type(exc).__name__} {str(exc).splitlines()[0] if str(exc) else ''}"
                             ")") from None
    console.print(f"wrote {out}")


def predict(predictor: Path = typer.Option(..., "--predictor", help="Directory from build "
                                           "--predictor."),
            workload: str = typer.Option("", "--workload", help="Workload key, if known."),
            image: str = typer.Option("", "--image"), namespace: str = typer.Option(
                "", "--namespace"), queue: str = typer.Option("", "--queue"),
            gpus: float = typer.Option(1.0, "--gpus", help="Requested GPUs."),
            priority: int = typer.Option(0, "--priority"),
            batch_size: float = typer.Option(None, "--batch-size", min=1, help="Per-GPU batch size "
                                             "(label foresight.io/batch-size), if known.")
            ) -> None:
    """Predicted workload and peak-framebuffer upper quantile of a job before it starts."""
    from forecaster.fingerprint.predict import NewJobPredictor

    if not gpus > 0:  # and NaN
        raise ForesightError(f"--gpus {gpus}: must be positive")
    if predictor.is_file():
        raise ForesightError(f"--predictor {predictor} is a file: give the directory of "
                             "fingerprint build --predictor")
    if not (predictor / "manifest.json").is_file():
        raise ForesightError(f"{predictor}: no manifest.json (run fingerprint build --predictor)")
    try:
        m = NewJobPredictor.load(predictor)
    except ForesightError:  # its own one-line diagnosis (another kind, a corrupted file)
        raise
    except (ValueError, KeyError, OSError) as exc:
        raise ForesightError(f"{predictor}: cannot load the predictor ({exc})") from None
    job = pd.DataFrame([{"workload": workload, "image": image, "namespace": namespace,
                         "queue": queue, "gpu_request": gpus, "priority": priority,
                         "batch_size": batch_size}])
    r = m.predict(job).iloc[0]
    if workload and r["source"] == "model":  # say it: the numbers are not this key's own
        console.print(f"workload {workload!r} is not in the predictor: the bound comes from "
                      f"the job's metadata, and the most similar known workload is "
                      f"{r['workload']!r}")
    up = r["peak_fb_upper_mib"]
    # inf is no bound: too few residuals for the conformal quantile at this coverage
    upper = f"{up:.0f} (coverage {m.coverage:g})" if np.isfinite(up) else (
        f"unbounded (too few {'runs of this workload' if r['source'] == 'key' else 'runs'} "
        f"to bound the peak at coverage {m.coverage:g}: fit on more runs)")
    console.print(f"source={r['source']} workload={r['workload']} peak_fb_p50_mib="
                  f"{r['peak_fb_p50_mib']:.0f} peak_fb_upper_mib={upper}")


def stragglers(csv: Path = typer.Option(..., "--csv", help="Per-worker step times of one "
                                         "data-parallel job: one row per (step, worker)."),
               step_col: str = typer.Option("time", "--step-col", help="Step column."),
               worker_col: str = typer.Option("worker", "--worker-col", help="Worker column."),
               value_col: str = typer.Option("batch_time_norm", "--value-col",
                                             help="Step (mini-batch) time column."),
               window: int = typer.Option(20, "--window", help="Steps a slowdown must "
                                          "persist over (rolling median)."),
               min_slowdown: float = typer.Option(0.05, "--min-slowdown", help="Flag a step "
                                                  "this far (relative) above the workers' "
                                                  "median."),
               min_share: float = typer.Option(0.2, "--min-share", help="Straggler: flagged "
                                               "in at least this share of its steps.")) -> None:
    """Workers persistently slower than their peers (synchronous data parallelism waits for
    the slowest): the PAI 2020 mini-batch files' format by default."""
    from forecaster.fingerprint.straggler import flag_stragglers

    if window < 1 or not min_slowdown >= 0 or not 0 < min_share <= 1:
        raise ForesightError("need --window >= 1, --min-slowdown >= 0, --min-share in (0, 1]")
    seen: dict[str, str] = {}
    for opt, col in (("--step-col", step_col), ("--worker-col", worker_col),
                     ("--value-col", value_col)):
        if col in seen:  # one column in two roles: a step is not a worker nor a time
            raise ForesightError(f"{seen[col]} and {opt} both name column {col!r}: give each "
                                 "its own column")
        seen[col] = opt
    input_file(csv, "--csv", "a CSV file")
    try:
        df = pd.read_csv(csv)
    except (ValueError, OSError) as exc:
        raise ForesightError(f"--csv {csv}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in (step_col, worker_col, value_col) if c not in df.columns]
    if missing:
        has = ", ".join(map(str, df.columns[:8])) + (", ..." if len(df.columns) > 8 else "")
        raise ForesightError(f"--csv {csv}: no column {', '.join(missing)} (has {has}); "
                             "see --step-col, --worker-col, --value-col")
    from features.schema import to_numbers

    # a word is no time (read as missing it passed), nor a step among numbered ones (it made
    # a step of its own); a step column all of names stays as given
    to_numbers(df[value_col], f"--csv {csv}: column {value_col}")
    if pd.to_numeric(df[step_col], errors="coerce").notna().any():
        to_numbers(df[step_col], f"--csv {csv}: column {step_col}")
    df[value_col] = pd.to_numeric(df[value_col], errors="coerce")
    if df[value_col].notna().sum() == 0:
        raise ForesightError(f"--csv {csv}: no numeric {value_col}")
    neg = (df[value_col] < 0).to_numpy()
    if neg.any():  # a step takes time: a negative one is a broken record, not a fast worker
        i = int(neg.argmax())
        raise ForesightError(f"--csv {csv}: {value_col} is negative on line {i + 2} "
                             f"({df[value_col].iloc[i]:g}; {int(neg.sum())} line(s) in all): "
                             "a step time is never negative")
    out = flag_stragglers(df, window=window, min_slowdown=min_slowdown, min_share=min_share,
                          step=step_col, worker=worker_col, value=value_col)
    table = Table(title=f"stragglers in {csv.name}: {len(out)} workers, "
                        f"{df[step_col].nunique()} steps")
    for c in ("worker", "median time / peers", "steps flagged", "first flagged step",
              "straggler"):
        table.add_column(c, justify="left" if c == "worker" else "right")
    for r in out.sort_values("flagged_share", ascending=False).itertuples():
        table.add_row(str(r.worker), f"{r.median_rel_time:.3f}", f"{r.flagged_share:.0%}",
                      "-" if pd.isna(r.first_flagged_step) else f"{r.first_flagged_step:g}"
                      if isinstance(r.first_flagged_step, float) else str(r.first_flagged_step),
                      "yes" if r.straggler else "")
    console.print(table)
    n = int(out["straggler"].sum())
    console.print(f"{n} straggler(s): " + (", ".join(map(str, out.loc[out.straggler, "worker"]))
                                          if n else "none"))


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Per-workload phase fingerprints.")
    sub.command("build")(build)
    sub.command("show")(show)
    sub.command("predict")(predict)
    sub.command("stragglers")(stragglers)
    app.add_typer(sub, name="fingerprint")
