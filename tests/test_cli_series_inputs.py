"""Bad series, trace and phase files to the demand, usage and runtime commands (found by a CLI
fuzz): one line naming the option, column and first bad data row, a non-zero exit, never a
traceback nor a run on silently misread data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main
from cli_support import one_line

UID = "ns/p/n/0"  # what `usage series` writes: namespace/pod/node/gpu
DLRM = "instance_sn,app_name,gpu_request,creation_time\n"


def series(path, n: int = 30, freq: str = "1min", uid: str = UID, rows: str = "") -> str:
    """A small long CSV (ISO times, UTC offset given) with `rows` appended."""
    ds = pd.date_range("2026-01-04 18:10", periods=n, freq=freq, tz="UTC")
    body = "".join(f"{uid},{t.isoformat()},{i % 7}\n" for i, t in enumerate(ds))
    path.write_text("unique_id,ds,y\n" + body + rows)
    return str(path)


def demand_backtest(s, *extra: str) -> list[str]:
    return ["demand", "backtest", "--series", str(s), "--test-start", "2026-01-04 19:00",
            "--out", str(s.parent / "P.csv"), "--val-bins", "5", "--no-ets", *extra]


def usage_backtest(s, *extra: str, start: str = "2026-01-04 18:30") -> list[str]:
    return ["usage", "backtest", "--series", str(s), "--test-start", start, "--out",
            str(s.parent / "P.csv"), *extra]


# 1. --phases times: a word, an empty start, zoned among naive, an interval ending first
@pytest.mark.parametrize("start, end, needles", [
    ("garbage", "2026-01-04 19:00", ("column start", "data row 2", "'garbage'")),
    ("", "2026-01-04 19:00", ("column start", "data row 2", "empty")),
    ("2026-01-04 18:10+05:00", "2026-01-04 19:00", ("column start", "data row 2", "mixed")),
    ("2026-01-04 18:50", "2026-01-04 18:20", ("data row 2", "before it starts")),
])
def test_bad_phase_times_are_named(tmp_path, capsys, start, end, needles):
    s = tmp_path / "s.csv"
    series(s)
    ph = tmp_path / "ph.csv"
    ph.write_text("namespace,pod,start,end,phase\n"
                  "ns,p,2026-01-04 18:00,2026-01-04 18:20,startup\n"
                  f"ns,p,{start},{end},compute\n")
    one_line(capsys, main(usage_backtest(s, "--freq", "1min", "--horizon", "5min",
                                         "--phases", str(ph))), "--phases", *needles)


# 2. a GenTD26 time stamp past pandas' clock
def test_genai_timestamp_out_of_range_is_named(tmp_path, capsys):
    g = tmp_path / "g.csv"
    g.write_text("timestamp_anon,value,container_ip\n0,1.0,a\n1e20,2.0,a\n")
    one_line(capsys, main(["usage", "series", "--genai", str(g), "--out",
                           str(tmp_path / "U.csv")]), "timestamp_anon", "data row 2", "1e+20")


# 3. a tiny --freq: refused before a grid of petabytes is allocated
@pytest.mark.parametrize("cmd", ["demand backtest", "usage backtest", "usage series",
                                 "demand series"])
def test_a_freq_too_small_for_the_span_is_refused(tmp_path, capsys, cmd):
    s = tmp_path / "s.csv"
    series(s, n=3, freq="12h")
    if cmd == "demand backtest":
        args = demand_backtest(s, "--freq", "1ns", "--horizon", "1ns")
    elif cmd == "usage backtest":
        args = usage_backtest(s, "--freq", "1ns", "--horizon", "1ns")
    elif cmd == "usage series":
        g = tmp_path / "g.csv"
        g.write_text("timestamp_anon,value,container_ip\n0,1.0,a\n86400,2.0,a\n")
        args = ["usage", "series", "--genai", str(g), "--freq", "1ns", "--out",
                str(tmp_path / "U.csv")]
    else:
        d = tmp_path / "d.csv"
        d.write_text(DLRM + "i0,a,1,0\ni1,a,2,86400\n")
        args = ["demand", "series", "--dlrm", str(d), "--freq", "1ns", "--out",
                str(tmp_path / "S.csv")]
    one_line(capsys, main(args), "'1", "bins (at most 10,000,000)", "larger --freq")


# 4. values: absurd magnitudes, duplicates, a negative count of GPUs
@pytest.mark.parametrize("cmd", ["demand backtest", "demand forecast", "usage backtest"])
def test_a_huge_y_is_refused_naming_its_row(tmp_path, capsys, cmd):
    s = tmp_path / "s.csv"
    series(s, n=40, rows=f"{UID},2026-01-04T18:50:00+00:00,1e308\n")
    args = {"demand backtest": demand_backtest(s),
            "demand forecast": ["demand", "forecast", "--series", str(s), "--val-bins", "5"],
            "usage backtest": usage_backtest(s)}[cmd]
    one_line(capsys, main(args), "column y", "data row 41", "1e+308")


@pytest.mark.parametrize("cmd", ["demand backtest", "usage backtest"])
def test_duplicate_series_rows_are_refused_not_summed(tmp_path, capsys, cmd):
    s = tmp_path / "s.csv"
    series(s, n=40, rows=f"{UID},2026-01-04T18:11:00+00:00,5\n")
    args = demand_backtest(s) if cmd == "demand backtest" else usage_backtest(s)
    one_line(capsys, main(args), "data rows 2 and 41", "one row per series and time")


def test_a_negative_gpu_request_in_the_pods_table_is_refused(tmp_path, capsys):
    t0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
    pd.DataFrame({"namespace": "ml", "pod": ["p0", "p1"], "node": "n0", "queue": "train",
                  "priority": 0, "workload": "w", "gpu_request": [2.0, -3.0],
                  "created": [t0, t0 + pd.Timedelta("5min")], "started": pd.NaT,
                  "finished": pd.NaT}).to_parquet(tmp_path / "pods.parquet")
    one_line(capsys, main(["demand", "series", "--data", str(tmp_path), "--out",
                           str(tmp_path / "S.csv")]), "pod ml/p1", "-3")


def test_a_negative_gpu_request_in_a_dlrm_trace_is_refused(tmp_path, capsys):
    d = tmp_path / "d.csv"
    d.write_text(DLRM + "i0,a,1,0\ni1,a,-3,60\n")
    one_line(capsys, main(["demand", "series", "--dlrm", str(d), "--out",
                           str(tmp_path / "S.csv")]), "gpu_request", "data row 2", "'-3'")


def test_an_empty_unique_id_is_refused(tmp_path, capsys):
    s = tmp_path / "s.csv"
    series(s, n=40, rows=",2026-01-04T19:00:00+00:00,1\n")
    one_line(capsys, main(demand_backtest(s)), "unique_id", "data row 41", "empty")


# 5. time stamps: day-first and mixed zoned/naive refused; plain numbers are epoch seconds
@pytest.mark.parametrize("ds, needles", [
    ("04/01/2026 18:{m:02d}", ("not parsable", "'04/01/2026 18:10'", "ISO 8601")),
    ("2026-01-04 18:{m:02d}{z}", ("mixed", "data row 2")),
])
def test_ambiguous_or_mixed_times_are_refused(tmp_path, capsys, ds, needles):
    s = tmp_path / "s.csv"
    s.write_text("unique_id,ds,y\n" + "".join(
        f"q,{ds.format(m=10 + i, z='Z' if i % 2 else '')},1\n" for i in range(40)))
    one_line(capsys, main(demand_backtest(s)), "column ds", "data row", *needles)


def test_plain_numbers_are_epoch_seconds(tmp_path, capsys):
    s = tmp_path / "s.csv"
    t0 = int(pd.Timestamp("2026-01-04 18:10", tz="UTC").timestamp())
    s.write_text("unique_id,ds,y\n" + "".join(f"q,{t0 + 600 * i},1\n" for i in range(40)))
    # the series is read in 2026 (not 1970): a later --test-start is outside it, by its dates
    one_line(capsys, main(demand_backtest(s)[:4] + ["--test-start", "2030-01-01"] +
                          demand_backtest(s)[6:]), "(2026-01-04 18:10:00+00:00 ..")
    ms = tmp_path / "ms.csv"
    ms.write_text("unique_id,ds,y\n" + "".join(f"q,{t0 + 600 * i}000,1\n" for i in range(3)))
    one_line(capsys, main(demand_backtest(ms)), "data row 1", "outside years", "milliseconds")


def test_epoch_seconds_in_phases_are_seconds():
    from features.usage_series import phase_times

    ph = pd.DataFrame({"namespace": ["ns"], "pod": ["p"], "start": [1767550200],
                       "end": [1767553800], "phase": ["compute"]})
    out = phase_times(ph, "phases")
    assert out["start"].iloc[0] == pd.Timestamp("2026-01-04 18:10", tz="UTC")


# 6. messages that said the wrong thing
def test_a_horizon_longer_than_the_series_says_so(tmp_path, capsys):
    s = tmp_path / "s.csv"
    series(s, n=200, freq="10min")
    one_line(capsys, main(["demand", "forecast", "--series", str(s), "--val-bins", "50",
                           "--horizon", "1000d"]), "--horizon 1000d", "too long",
             "shorter --horizon")


@pytest.mark.parametrize("rows, needles", [
    ("", ("no instance with a creation_time",)),
    ("i0,a,1,\n", ("no instance with a creation_time",)),
    ("i0,a,1,0\ni1,a,1,abc\n", ("creation_time", "data row 2", "'abc'", "not a number")),
])
def test_dlrm_creation_times_are_named(tmp_path, capsys, rows, needles):
    d = tmp_path / "d.csv"
    d.write_text(DLRM + rows)
    one_line(capsys, main(["demand", "series", "--dlrm", str(d), "--out",
                           str(tmp_path / "S.csv")]), *needles)


def test_a_test_start_at_the_first_bin_says_there_is_no_history(tmp_path, capsys):
    s = tmp_path / "s.csv"
    series(s)
    one_line(capsys, main(usage_backtest(s, start="2026-01-04 18:10")),
             "no history before it", "later --test-start")


@pytest.mark.parametrize("args", [
    ["demand", "backtest", "--series", "{d}", "--test-start", "2026-01-04",
     "--out", "{t}/P.csv"],
    ["demand", "series", "--dlrm", "{d}", "--out", "{t}/S.csv"],
    ["usage", "backtest", "--series", "{s}", "--test-start", "2026-01-04 18:30",
     "--phases", "{d}", "--out", "{t}/P.csv"],
    ["usage", "series", "--genai", "{d}", "--out", "{t}/U.csv"],
    ["runtime", "backtest", "--dlrm", "{d}"],
])
def test_a_directory_where_a_file_goes_is_named(tmp_path, capsys, args):
    (tmp_path / "dir").mkdir()
    s = tmp_path / "s.csv"
    series(s)
    argv = [a.format(d=tmp_path / "dir", s=s, t=tmp_path) for a in args]
    one_line(capsys, main(argv), "is a directory")


def test_a_pods_table_without_the_needed_columns_names_them(tmp_path, capsys):
    pd.DataFrame({"name": ["p0"], "gpus": [1.0]}).to_parquet(tmp_path / "pods.parquet")
    one_line(capsys, main(["demand", "series", "--data", str(tmp_path), "--out",
                           str(tmp_path / "S.csv")]),
             "missing column(s) queue, created, gpu_request")


def test_metric_with_a_genai_file_is_refused_not_ignored(tmp_path, capsys):
    g = tmp_path / "g.csv"
    g.write_text("timestamp_anon,value,container_ip\n0,1.0,a\n60,2.0,a\n")
    one_line(capsys, main(["usage", "series", "--genai", str(g), "--metric", "fb", "--out",
                           str(tmp_path / "U.csv")]), "--metric fb", "only with --data")


def test_good_files_still_read(tmp_path):
    """The checks above refuse nothing valid: ISO with and without offsets (not mixed),
    ' UTC' suffixes, several offsets, samples sharing a bin."""
    from features.demand_series import read_series_csv

    s = tmp_path / "s.csv"
    s.write_text("unique_id,ds,y\nq,2026-01-04T18:10:00+05:00,1\nq,2026-01-04 13:20:00Z,2\n"
                 "r,2026-01-04 13:10:00 UTC,3\nr,2026-01-04T13:10:30Z,4\n")
    df = read_series_csv(s)
    assert df["ds"].tolist() == list(pd.to_datetime(
        ["2026-01-04 13:10:00", "2026-01-04 13:20:00", "2026-01-04 13:10:00",
         "2026-01-04 13:10:30"],
        utc=True))
    assert np.isfinite(df["y"]).all()


def test_a_short_history_shrinks_the_default_calibration_window_and_says_so(tmp_path, capsys):
    s = tmp_path / "s.csv"
    series(s, n=400, freq="10min")  # under the default 1,008 bins + 2 horizons + 50
    assert main(["demand", "forecast", "--series", str(s)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "has 400 bins: calibration window 80 bins" in err
    # a window the user chose is kept, and refused where it does not fit
    one_line(capsys, main(["demand", "forecast", "--series", str(s), "--val-bins", "1008"]),
             "too short for a 1008-bin calibration window", "lower --val-bins")
