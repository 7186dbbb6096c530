"""Demand series in the Nixtla long format (`unique_id, ds, y`) for the demand forecaster.

Builders turn the outside world's tables into regular-binned long series:
- `arrivals_from_pods`: GPUs requested by pods *arriving* (created) per bin per queue (a flow:
  forecast with `agg="sum"`).
- `pending_from_pods`: mean GPUs pending (created, not yet started) per bin per queue (a level:
  `agg="mean"`).
- `shape_arrivals_from_pods`: arrival counts per bin per (queue, pod shape), `unique_id` =
  `"<queue>|<shape>"`; `pod_shape` gives the shape string the shape-mix forecaster uses.
- `pending_from_queue_samples`: a Kueue/Volcano queue gauge averaged per bin.
- `helios_series`: the Helios Earth per-VC minute files, `y = running_gpu_num +
  pending_gpu_num` (the GPU demand; `total_gpu_num` is the quota), averaged per bin.
- `philly_series`: Philly's node sequence (Helios artifact), active nodes per minute (`total`
  is the cluster's size), averaged per bin: one series `philly`.
`read_series_csv` loads and validates a user's S.csv; `parse_freq`/`horizon_bins` validate the
CLI's frequency and horizon strings; `parse_times`/`seconds_to_utc` read the time columns of
user files. Every user error is a one-line ForesightError naming the first bad data row.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.schema import LONG_COLUMNS
from ground.errors import ForesightError
from ground.paths import input_file

#: Most bins one series may take on its regular grid (a week of 1-s bins is 604,800): beyond,
#: a too-small --freq would allocate without bound before any error.
MAX_BINS = 10_000_000
#: Most rows all series together may take (about 2.5 GB of long table).
MAX_ROWS = 100_000_000
#: Largest |y| taken: beyond, scaling and squared errors overflow float64 (inf in the output).
MAX_Y = 1e15
_UNIX = pd.Timestamp("1970-01-01", tz="UTC")
# a UTC offset (Z, +05:00, -0130, +05) after a time of day: tells zoned from naive strings
_ZONED = r"[T ]\d\d(?::?\d\d(?::?\d\d(?:[.,]\d+)?)?)?\s*(?:Z|[+-]\d\d(?::?\d\d)?)$"


def data_row(mask: pd.Series) -> int:
    """1-based data row (header not counted) of the first True of `mask`: by index label
    when the frame kept read_csv's row numbers, else by position."""
    i = int(np.flatnonzero(mask.to_numpy(dtype=bool))[0])
    label = mask.index[i]
    return int(label) + 1 if isinstance(label, (int, np.integer)) else i + 1


def seconds_to_utc(values: pd.Series, what: str, origin: pd.Timestamp = _UNIX) -> pd.Series:
    """Numbers of seconds after `origin` (epoch seconds by default) as UTC datetimes; empty
    stays NaT. A non-number, or a time past pandas' clock (years 1677..2262: epoch
    milliseconds read as seconds land there), is refused naming its row."""
    num = pd.to_numeric(values, errors="coerce")
    bad = values.notna() & num.isna()
    if bad.any():
        raise ForesightError(f"{what}, data row {data_row(bad)}: {str(values[bad].iloc[0])!r} is "
                             "not a number of seconds")
    far = ~((num * 1e9 + origin.value).abs() < 9.2e18) & num.notna()
    if far.any():
        raise ForesightError(f"{what}, data row {data_row(far)}: {str(values[far].iloc[0])!r} "
                             "seconds falls outside years 1677..2262 (milliseconds? give seconds)")
    return origin + pd.to_timedelta(num, unit="s")


def parse_times(values: pd.Series, what: str) -> pd.Series:
    """A user file's time column as UTC datetimes: ISO 8601 / RFC 3339 strings (no offset:
    UTC), or plain numbers as epoch seconds; empty stays NaT. Anything else is refused naming
    its row: a day-first date, a zoned time among naive ones, a word. pandas would read
    those month-first, shift the naive ones by the zoned ones' offset, or guess."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return pd.to_datetime(values, utc=True)
    given = values.notna()
    num = pd.to_numeric(values, errors="coerce")
    if given.any() and (num.notna() == given).all():  # all numbers: epoch seconds
        return seconds_to_utc(values, what)
    # each distinct string once (series share their time stamps); code -1 (empty) reads the
    # sentinel appended last
    codes, uniq = pd.factorize(values)
    text = pd.Series([*uniq, None], dtype="string").str.strip().str.upper().str.replace(
        r"\s*(?:UTC|GMT)$", "Z", regex=True)
    zoned = text.str.contains(_ZONED, regex=True).fillna(False).to_numpy(dtype=bool)[codes]
    parsed = pd.DatetimeIndex(pd.to_datetime(text, format="ISO8601", utc=True,
                                             errors="coerce"))[codes]
    # a word is "not a time" before it is "naive among zoned": asked in the other order, a
    # word in a zoned column read as a naive time and got the wrong message
    bad = given & parsed.isna()
    if bad.any():
        raise ForesightError(f"{what}, data row {data_row(bad)}: {str(values[bad].iloc[0])!r} is "
                             "not parsable as a time: use ISO 8601 / RFC 3339 "
                             "(2026-01-04T18:10:00Z) or epoch seconds")
    if given.any():
        mixed = given & (zoned != zoned[np.argmax(given.to_numpy())])
        if mixed.any():
            raise ForesightError(f"{what}, data row {data_row(mixed)}: "
                                 f"{str(values[mixed].iloc[0])!r}: times with and without a UTC "
                                 "offset are mixed; give all with one")
    return pd.Series(parsed, index=values.index)


def check_grid(first: pd.Series, last: pd.Series, step: pd.Timedelta, freq: str) -> None:
    """Refuse, before allocating it, a regular grid of more than MAX_BINS bins in one series
    (or MAX_ROWS in all): `first`/`last` are each series' first and last bin, by series."""
    n = (last - first) // step + 1
    if len(n) and n.max() > MAX_BINS:
        raise ForesightError(f"frequency {freq!r}: series {n.idxmax()!s} would take "
                             f"{int(n.max()):,} bins (at most {MAX_BINS:,}): give a larger --freq")
    if n.sum() > MAX_ROWS:
        raise ForesightError(f"frequency {freq!r}: the series would take {int(n.sum()):,} rows "
                             f"(at most {MAX_ROWS:,}): give a larger --freq")


def parse_freq(freq: str) -> pd.Timedelta:
    """A fixed bin width such as '10min' or '1h'; calendar units (months) are refused."""
    try:
        td = pd.Timedelta(freq)
    except (ValueError, TypeError):
        raise ForesightError(f"bad frequency {freq!r}: use a fixed width such as 10min or 1h") from None
    if td <= pd.Timedelta(0):
        raise ForesightError(f"bad frequency {freq!r}: must be positive")
    return td


def horizon_bins(horizon: str, freq: str) -> int:
    """Number of bins in `horizon`; it must be a positive whole multiple of `freq`."""
    step = parse_freq(freq)
    try:
        h = pd.Timedelta(horizon)
    except (ValueError, TypeError):
        raise ForesightError(f"bad horizon {horizon!r}: use a duration such as 1h or 6h") from None
    if h <= pd.Timedelta(0) or h % step != pd.Timedelta(0):
        raise ForesightError(f"bad horizon {horizon!r}: must be a positive multiple of the frequency {freq}")
    return int(h // step)


def validate_long(df: pd.DataFrame, what: str = "series") -> pd.DataFrame:
    """Check and conform a long table: columns present, ds parsable (parse_times), y numeric,
    finite and within +-MAX_Y."""
    missing = [c for c in LONG_COLUMNS if c not in df.columns]
    if missing:
        raise ForesightError(f"{what}: missing column(s) {', '.join(missing)}; need unique_id, ds, y")
    if df.empty:
        raise ForesightError(f"{what}: no rows")
    out = pd.DataFrame({"unique_id": df["unique_id"].astype(str)})
    out["ds"] = parse_times(df["ds"], f"{what}: column ds")
    y = pd.to_numeric(df["y"], errors="coerce")
    bad = y.isna() | ~np.isfinite(y.fillna(0.0))
    if bad.any():
        first = df["y"][bad].iloc[0]  # shown plainly: repr of a numpy NaN is np.float64(nan)
        first = "empty or NaN" if pd.isna(first) else repr(str(first))
        raise ForesightError(f"{what}: column y has {int(bad.sum())} non-numeric or empty "
                             f"value(s), first {first} (data row {data_row(bad)})")
    big = y.abs() > MAX_Y
    if big.any():
        raise ForesightError(f"{what}: column y, data row {data_row(big)}: "
                             f"{str(df['y'][big].iloc[0])!r} is beyond +-{MAX_Y:g}")
    if out["ds"].isna().any():
        raise ForesightError(f"{what}: column ds has {int(out['ds'].isna().sum())} empty "
                             f"value(s), first data row {data_row(out['ds'].isna())}")
    out["y"] = y.astype("float64")
    return out.reset_index(drop=True)


def read_series_csv(path: str | Path) -> pd.DataFrame:
    """Read and validate S.csv (columns unique_id, ds, y; extra columns are ignored). ds is
    ISO 8601 / RFC 3339 (no offset: UTC) or epoch seconds. One row per (unique_id, ds), as
    statsforecast asks: a duplicate is refused, not summed into a double count."""
    p = input_file(path, "series file", "the CSV file")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ForesightError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None
    out = validate_long(df, what=str(p))
    empty = df["unique_id"].isna()  # else read as a series named "nan"
    if empty.any():
        raise ForesightError(f"{p}: column unique_id, data row {data_row(empty)} is empty")
    dup = out.duplicated(["unique_id", "ds"])
    if dup.any():
        uid, ds = out.loc[dup, ["unique_id", "ds"]].iloc[0]
        first = data_row((out["unique_id"] == uid) & (out["ds"] == ds))
        raise ForesightError(f"{p}: data rows {first} and {data_row(dup)} are both series {uid!r} "
                             f"at {ds}: give one row per series and time (sum or average them)")
    return out


def regularize(df: pd.DataFrame, freq: str, agg: str = "sum", fill: str = "auto") -> pd.DataFrame:
    """Put each series on a regular grid of `freq` bins (bin start = floor(ds)).

    Several samples in one bin are summed (`agg="sum"`, flows) or averaged (`agg="mean"`,
    levels). Missing bins inside a series are `fill`ed: `zero` (no arrivals; a rate exported
    only when non-zero), `carry` (the last level forward: a gauge that did not change was not
    re-scraped) or `auto` (zero for sums, carry for means).
    """
    step = parse_freq(freq)
    if agg not in ("sum", "mean"):
        raise ForesightError(f"bad agg {agg!r}: use sum or mean")
    if fill not in ("auto", "zero", "carry"):
        raise ForesightError(f"bad fill {fill!r}: use auto, zero or carry")
    zero = fill == "zero" or (fill == "auto" and agg == "sum")
    d = validate_long(df)
    d["ds"] = d["ds"].dt.floor(step)
    d = d.groupby(["unique_id", "ds"], sort=True)["y"].agg(agg).reset_index()
    span = d.groupby("unique_id")["ds"].agg(["min", "max"])
    check_grid(span["min"], span["max"], step, freq)
    parts = []
    for uid, g in d.groupby("unique_id", sort=True):
        grid = pd.date_range(g["ds"].iloc[0], g["ds"].iloc[-1], freq=step)
        s = g.set_index("ds")["y"].reindex(grid)
        s = s.fillna(0.0) if zero else s.ffill()
        parts.append(pd.DataFrame({"unique_id": uid, "ds": grid, "y": s.to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def _bins(times: pd.Series, step: pd.Timedelta) -> pd.Series:
    return pd.to_datetime(times, utc=True).dt.floor(step)


def arrivals_from_pods(pods: pd.DataFrame, freq: str = "10min", by: str = "queue") -> pd.DataFrame:
    """GPUs requested by pods created in each bin, per `by` (a pods-table column)."""
    step = parse_freq(freq)
    for col in (by, "created", "gpu_request"):
        if col not in pods.columns:
            raise ForesightError(f"pods table: missing column {col}")
    p = pods.dropna(subset=["created"])
    if p.empty:
        raise ForesightError("pods table: no pod has a creation time (column created)")
    gpus = pd.to_numeric(p["gpu_request"], errors="coerce").fillna(0.0)
    if (gpus < 0).any():  # a count: a negative one would cancel other pods' requests
        row = p[gpus < 0].iloc[0]
        pod = "/".join(str(row[c]) for c in ("namespace", "pod") if c in p)
        raise ForesightError(f"pods table: pod {pod or data_row(gpus < 0)} requests "
                             f"{row['gpu_request']} GPUs: a count of GPUs is never negative")
    out = pd.DataFrame({"unique_id": p[by].astype(str), "ds": _bins(p["created"], step),
                        "y": gpus})
    return regularize(out, freq, "sum")


def arrivals_until(pods: pd.DataFrame, freq: str, end: pd.Timestamp) -> pd.DataFrame:
    """`arrivals_from_pods` of the pods created before `end`, every queue on one grid up to
    the last whole bin before `end` (no arrivals = 0 GPUs): the series the demand kind trains
    on, and the one the extender's reservation forecasts from."""
    s = arrivals_from_pods(pods[pods["created"] < end], freq)
    grid = pd.date_range(s["ds"].min(), end - pd.Timedelta(freq), freq=freq)
    full = pd.MultiIndex.from_product([sorted(s["unique_id"].unique()), grid],
                                      names=["unique_id", "ds"])
    return (s.set_index(["unique_id", "ds"])["y"].reindex(full, fill_value=0.0)
            .reset_index())


def pending_from_pods(pods: pd.DataFrame, freq: str = "10min", by: str = "queue") -> pd.DataFrame:
    """Time-averaged GPUs pending (created <= t < started) in each bin, per `by`.

    A pod never started is pending until the last event in the table. Exact time-weighting:
    each pod adds its request x (overlap of its pending interval with the bin) / bin width.
    """
    step = parse_freq(freq)
    for col in (by, "created", "started", "gpu_request"):
        if col not in pods.columns:
            raise ForesightError(f"pods table: missing column {col}")
    created = pd.to_datetime(pods["created"], utc=True)
    started = pd.to_datetime(pods["started"], utc=True)
    end_all = pd.concat([created, started, pd.to_datetime(pods.get("finished"), utc=True)]).max()
    started = started.fillna(end_all)
    rows = []
    for uid, idx in pods.groupby(pods[by].astype(str)).groups.items():
        c, s = created[idx].dropna(), started[idx]
        s = s[c.index]
        g = pd.to_numeric(pods.loc[c.index, "gpu_request"], errors="coerce").fillna(0.0).to_numpy()
        grid = pd.date_range(c.min().floor(step), end_all.floor(step), freq=step)
        t0 = grid.as_unit("ns").asi8[:, None]
        t1 = t0 + step.value
        lo = np.maximum(t0, pd.DatetimeIndex(c).as_unit("ns").asi8[None, :])
        hi = np.minimum(t1, pd.DatetimeIndex(s).as_unit("ns").asi8[None, :])
        frac = np.clip(hi - lo, 0, None) / step.value
        rows.append(pd.DataFrame({"unique_id": uid, "ds": grid, "y": frac @ g}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=LONG_COLUMNS)


def pod_shape(gpu_request: float, gpu_fraction_buckets: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)) -> str:
    """Shape label: whole GPUs as "1", "2", "8"; a fraction of one GPU as "frac:0.25-0.5"."""
    g = float(gpu_request)
    if g >= 1 and g == int(g):
        return str(int(g))
    if g >= 1:
        return f"{g:g}"
    lo = 0.0
    for hi in gpu_fraction_buckets:
        if g <= hi:
            return f"frac:{lo:g}-{hi:g}"
        lo = hi
    return "1"


def shape_arrivals_from_pods(pods: pd.DataFrame, freq: str = "10min", by: str = "queue") -> pd.DataFrame:
    """Arrival counts per bin per (queue, shape): `unique_id` = "<queue>|<shape>"."""
    p = pods.dropna(subset=["created"]).copy()
    p["_uid"] = p[by].astype(str) + "|" + p["gpu_request"].map(pod_shape)
    p["gpu_request"] = 1.0  # count pods, not GPUs
    return arrivals_from_pods(p, freq, by="_uid")


def pending_from_queue_samples(samples: pd.DataFrame, metric: str, freq: str = "10min") -> pd.DataFrame:
    """Average one queue gauge (e.g. kueue_cluster_queue_resource_pending) per bin per queue."""
    for col in ("ts", "queue", "metric", "value"):
        if col not in samples.columns:
            raise ForesightError(f"queue samples: missing column {col}")
    s = samples[samples["metric"] == metric]
    if s.empty:
        raise ForesightError(f"queue samples: no rows for metric {metric}")
    return regularize(pd.DataFrame({"unique_id": s["queue"], "ds": s["ts"], "y": s["value"]}), freq, "mean")


def helios_series(vc_dir: str | Path, freq: str = "10min") -> pd.DataFrame:
    """Helios Earth per-VC demand: running_gpu_num + pending_gpu_num, averaged into bins."""
    files = sorted(Path(vc_dir).glob("*.csv"))
    if not files:
        raise ForesightError(f"no Helios VC files (*.csv) in {vc_dir}")
    parts = []
    for f in files:
        raw = pd.read_csv(f, usecols=["time", "running_gpu_num", "pending_gpu_num"])
        parts.append(pd.DataFrame({"unique_id": f.stem, "ds": raw["time"],
                                   "y": raw["running_gpu_num"] + raw["pending_gpu_num"]}))
    return regularize(pd.concat(parts, ignore_index=True), freq, "mean")


def philly_series(path: str | Path, freq: str = "10min") -> pd.DataFrame:
    """Philly's active nodes (`philly_node_sequence.csv`: time, active, total), averaged per
    bin as one series `philly`; a minute without a row keeps the last level."""
    p = input_file(path, "Philly node sequence", "the CSV file")
    raw = pd.read_csv(p)
    missing = [c for c in ("time", "active") if c not in raw.columns]
    if missing:
        raise ForesightError(f"{p.name}: missing column(s) {', '.join(missing)}; a Philly node "
                             "sequence has time, active, total")
    return regularize(pd.DataFrame({"unique_id": "philly", "ds": raw["time"], "y": raw["active"]}),
                      freq, "mean")
