"""`foresight mig plan`: propose a MIG geometry (mig-parted config) per MIG node from the
demand forecast; prints the plan and the `kubectl label` lines, applies nothing."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=180)
DEMO_DIR = Path(__file__).resolve().parents[2] / "data" / "mig"


def _read_forecast(path: Path, quantile: str) -> list[dict]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:  # a BOM is not a column name
            reader = csv.DictReader(fh)
            rows, header = list(reader), reader.fieldnames
    except FileNotFoundError:
        raise ForesightError(f"forecast not found: {path}") from None
    except IsADirectoryError:
        raise ForesightError(f"--forecast {path} is a directory: give the CSV file") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ForesightError(f"forecast {path}: not a CSV ({exc})") from None
    if header is None:  # not even a header: not a forecast of no demand
        raise ForesightError(f"forecast {path} is empty")
    # another table (a demand series) has no MIG row either: it planned from the pods
    # as if no forecast had been given
    missing = [c for c in ("unique_id", quantile) if c not in header]
    if missing:
        raise ForesightError(f"forecast {path}: missing column {', '.join(missing)} (a "
                             "forecast has unique_id and p10, p50, p90: demand forecast --out "
                             "writes one)")
    return rows


def _forecast_series(path: Path, freq: str, horizon: str, agg: str, val_bins: int | None
                     ) -> list[dict]:
    """Fit the demand forecaster on the MIG series of a long CSV (`unique_id` =
    `<queue>|mig:<profile>`, `y` = instances in use per bin for agg=mean, or requested per bin
    for agg=sum) and return its next-horizon forecast rows (p10/p50/p90 per series)."""
    from features.demand_series import horizon_bins, read_series_csv, regularize
    from forecaster.demand.model import DemandForecaster
    from foresight.commands.demand import calibration_window

    if agg not in ("sum", "mean"):
        raise ForesightError(f"bad --agg {agg!r}: use sum or mean")
    df = read_series_csv(path)
    df = df[df["unique_id"].astype(str).str.rsplit("|", n=1).str[-1].str.startswith("mig:")]
    if df.empty:
        raise ForesightError(f"series {path}: no MIG series (unique_id <queue>|mig:<profile>)")
    df = regularize(df, freq, agg)
    H = horizon_bins(horizon, freq)
    val_bins = calibration_window(int(df.groupby("unique_id").size().max()), val_bins, H,
                                  horizon, f"series {path}")
    try:
        model = DemandForecaster(freq=freq, horizon=H, agg=agg, val_bins=val_bins).fit(df)
    except ValueError as exc:
        raise ForesightError(str(exc).splitlines()[0]) from None
    fc = model.predict(df)
    return [{"unique_id": str(r.unique_id), "origin": str(r.origin), "p10": float(r.p10),
             "p50": float(r.p50), "p90": float(r.p90)} for r in fc.itertuples()]


def _read_snapshot(path: Path) -> tuple[list[dict], list[dict]]:
    from scheduler_hook.snapshot import split_list

    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ForesightError(f"snapshot not found: {path}") from None
    except IsADirectoryError:
        raise ForesightError(f"--snapshot {path} is a directory: give the JSON file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ForesightError(f"snapshot {path} is not JSON: {exc}") from None
    try:
        return split_list(doc)
    except ValueError as exc:
        raise ForesightError(f"snapshot {path}: {exc}") from None


def _show(p) -> None:
    table = Table(title=f"MIG geometry plan ({p.source})")
    for col in ("node", "GPUs", "current config", "proposed", "geometry per GPU",
                "demand covered", "slices stranded", "pods to drain"):
        table.add_column(col)
    for n in p.nodes:
        drain = ", ".join(n.drain[:4]) + (f" +{len(n.drain) - 4}" if len(n.drain) > 4 else "")
        table.add_row(n.node, f"{n.gpus} {n.model}", n.current,
                      f"[bold green]{n.proposed}" if n.changed else "(keep)", n.geometry,
                      ", ".join(f"{k} {v}" for k, v in n.covered.items()) or "-",
                      str(n.stranded), drain or "-")
    console.print(table)
    summary = Table(title="instances per profile")
    for col in ("profile", f"demand ({p.quantile})" if "forecast" in p.source else "demand",
                "supply now", "supply planned"):
        summary.add_column(col)
    for prof in sorted(set(p.demand) | set(p.supply_before) | set(p.supply_after)):
        summary.add_row(prof, f"{p.demand.get(prof, 0):g}", str(p.supply_before.get(prof, 0)),
                        str(p.supply_after.get(prof, 0)))
    console.print(summary)
    console.print(f"unmet demand: {p.unmet_before:g} -> {p.unmet_after:g} compute slices; "
                  f"{len(p.commands)} node(s) to re-split")
    for note in p.notes:
        console.print(f"note: {note}")
    for n in p.nodes:
        if n.changed and n.custom_yaml:
            console.print(f"# add to the mig-parted ConfigMap (mig-configs:) for {n.node}:")
            console.print(n.custom_yaml, markup=False, highlight=False)
    if p.commands:
        console.print("# proposed, not applied; after the listed pods have finished:")
    for cmd in p.commands:
        console.print(cmd, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="MIG geometry planning (proposes, never applies).")

    @sub.command("plan")
    def plan_(snapshot: Path = typer.Option(None, "--snapshot",
                                            help="`kubectl get nodes,pods -A -o json` file."),
              demo: bool = typer.Option(False, "--demo", help="Plan the embedded demo cluster "
                                        "(data/mig/demo_snapshot.json and its forecast)."),
              forecast: Path = typer.Option(None, "--forecast", help="Forecast CSV (unique_id "
                                            "<queue>|mig:<profile>, p10, p50, p90)."),
              series: Path = typer.Option(None, "--series", help="MIG demand series CSV "
                                          "(unique_id <queue>|mig:<profile>, ds, y): the demand "
                                          "forecaster is fitted on it and forecasts --horizon."),
              horizon: str = typer.Option("6h", "--horizon", help="Forecast horizon (--series)."),
              freq: str = typer.Option("10min", "--freq", help="Bin size (--series)."),
              agg: str = typer.Option("mean", "--agg", help="mean: y = instances in use (a "
                                      "level); sum: y = instances requested per bin (--series)."),
              val_bins: Optional[int] = typer.Option(None, "--val-bins", min=1,
                                                     help="Calibration bins (--series; default "
                                                     "1008, or a fifth of a shorter series)."),
              quantile: str = typer.Option("p90", "--quantile", help="p10, p50 or p90."),
              custom: bool = typer.Option(False, "--custom", help="Also consider valid "
                                          "geometries that are not named in mig-parted's file."),
              as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON.")
              ) -> None:
        """Propose a mig-parted config per MIG node covering forecast demand with few changes."""
        from scheduler_hook.mig import MigError
        from scheduler_hook.mig_plan import QUANTILES, demand_from_forecast, plan_objects

        if quantile not in QUANTILES:
            raise ForesightError(f"--quantile {quantile!r}: choose one of {', '.join(QUANTILES)}")
        if (snapshot is None) == (not demo):
            raise ForesightError("give --snapshot FILE or --demo (one of them)")
        nodes, pods = _read_snapshot(snapshot or DEMO_DIR / "demo_snapshot.json")
        if forecast is not None and series is not None:
            raise ForesightError("give --forecast or --series, not both")
        if forecast is None and series is None and demo:
            forecast = DEMO_DIR / "demo_forecast.csv"
        rows = _read_forecast(forecast, quantile) if forecast is not None else \
            _forecast_series(series, freq, horizon, agg, val_bins) if series is not None else None
        if forecast is not None:  # its row errors name the file (plan_objects' do not)
            try:
                demand_from_forecast(rows, quantile)
            except (MigError, ValueError) as exc:
                raise ForesightError(f"{forecast}: {exc}") from None
        try:
            p = plan_objects(nodes, pods, rows, quantile, custom)
        except (MigError, ValueError) as exc:
            raise ForesightError(str(exc)) from None
        if as_json:
            typer.echo(json.dumps(p.as_dict(), indent=1))
        else:
            _show(p)

    app.add_typer(sub, name="mig")
