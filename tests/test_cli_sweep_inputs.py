"""Bad inputs to `demand`, `serve`, `usage`, `runtime` and `mig plan` found by a sweep: one
line naming the option or file, column and 1-based data row, exit 2, never a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from foresight.cli import main
from cli_support import one_line
from features.demand_series import parse_times
from ground.errors import ForesightError


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_word_among_zoned_times_is_not_a_time_not_a_mix():
    import pandas as pd

    ds = pd.Series(["2026-01-01T00:00:00Z", "yesterday", "2026-01-01T00:20:00Z"])
    with pytest.raises(ForesightError, match=r"data row 2: 'yesterday' is not parsable"):
        parse_times(ds, "ds")
    # a parsable naive time among zoned ones is still the mix
    ds = pd.Series(["2026-01-01T00:00:00Z", "2026-01-01T00:10:00", "2026-01-01T00:20:00Z"])
    with pytest.raises(ForesightError, match="data row 2: .* mixed"):
        parse_times(ds, "ds")


@pytest.mark.parametrize("y", ["", "nan"])
def test_a_nan_in_a_demand_series_is_shown_plainly(tmp_path, capsys, y):
    s = _write(tmp_path / "Sn.csv", "unique_id,ds,y\nq,2026-01-01T00:00:00Z,1\n"
               f"q,2026-01-01T00:10:00Z,{y}\nq,2026-01-01T00:20:00Z,2\n")
    code = main(["demand", "backtest", "--series", str(s), "--test-start",
                 "2026-01-01T00:10:00Z", "--out", str(tmp_path / "bt")])
    line = one_line(capsys, code, "Sn.csv", "column y", "data row 2")
    assert "np.float64" not in line


# ------------------------------------------------------------------ mig plan --forecast
MIG = Path(__file__).resolve().parents[1] / "data" / "mig"


def _mig_plan(forecast: Path) -> int:
    return main(["mig", "plan", "--snapshot", str(MIG / "demo_snapshot.json"), "--forecast",
                 str(forecast)])


def test_a_table_without_the_quantile_column_is_no_forecast(tmp_path, capsys):
    s = _write(tmp_path / "S.csv", "unique_id,ds,y\nq,2026-01-01T00:00:00Z,1\n")
    one_line(capsys, _mig_plan(s), "S.csv", "missing column p90")
    ren = _write(tmp_path / "f.csv", (MIG / "demo_forecast.csv").read_text()
                 .replace("p90", "q90", 1))
    one_line(capsys, _mig_plan(ren), "f.csv", "missing column p90")


@pytest.mark.parametrize("value, needle", [("-30", "negative"), ("1e300", "above 1e+06")])
def test_a_negative_or_absurd_forecast_is_refused(tmp_path, capsys, value, needle):
    lines = (MIG / "demo_forecast.csv").read_text().splitlines()
    head = lines[0].split(",")
    row = lines[2].split(",")
    row[head.index("p90")] = value
    lines[2] = ",".join(row)
    f = _write(tmp_path / "f.csv", "\n".join(lines) + "\n")
    one_line(capsys, _mig_plan(f), "f.csv", "forecast row 2", "p90", needle)


def test_demand_from_forecast_names_a_missing_column_and_bounds_values():
    from scheduler_hook.mig_plan import demand_from_forecast

    ok = {"unique_id": "q|mig:1g.10gb", "p90": 3.0}
    assert demand_from_forecast([ok]) == {"1g.10gb": 3.0}
    with pytest.raises(ValueError, match="row 2: no column p90"):
        demand_from_forecast([ok, {"unique_id": "q|mig:1g.10gb", "q90": 1}])
    with pytest.raises(ValueError, match="row 1: p90 is empty"):  # JSON null
        demand_from_forecast([{**ok, "p90": None}])
    with pytest.raises(ValueError, match="never negative"):
        demand_from_forecast([{**ok, "p90": -0.5}])


# ------------------------------------------------------------------ serve
@pytest.fixture()
def no_server(monkeypatch):
    """A check that is missing would start a server: fail instead of hanging."""
    def run(*a, **k):
        raise AssertionError("uvicorn.run reached: the bad input was not refused")
    monkeypatch.setattr("uvicorn.run", run)


def test_serve_refuses_a_nan_reload_period(capsys, no_server):
    one_line(capsys, main(["serve", "--only", "api", "--host", "127.0.0.1", "--reload-s",
                           "nan"]), "--reload-s nan", "finite")


def test_serve_refuses_a_demand_series_with_text_in_y(tmp_path, capsys, no_server):
    s = _write(tmp_path / "Sy.csv", "unique_id,ds,y\nq,2026-01-01T00:00:00Z,1\n"
               "q,2026-01-01T00:10:00Z,abc\n")
    one_line(capsys, main(["serve", "--only", "api", "--host", "127.0.0.1",
                           "--demand-series", str(s)]),
             "--demand-series", "Sy.csv", "column y", "'abc'", "data row 2")


# ------------------------------------------------------------------ --data a file, traces
@pytest.mark.parametrize("args", [["usage", "series", "--out", "x.csv"],
                                  ["fingerprint", "build", "--out", "fp.json"]])
def test_a_file_given_as_data_directory_is_said_to_be_a_file(tmp_path, capsys, args):
    f = _write(tmp_path / "afile", "x")
    out = str(tmp_path / args[-1])
    code = main([*args[:-1], out, "--data", str(f)])
    one_line(capsys, code, "afile", "is a file, not a directory")


@pytest.mark.parametrize("col", ["creation_time", "gpu_request"])
def test_text_in_a_dlrm_trace_is_named_by_column_and_row(tmp_path, capsys, col):
    rows = {"instance_sn": ["i0", "i1", "i2"], "role": "HN", "app_name": "a",
            "gpu_request": ["1", "1", "1"], "creation_time": ["0", "10", "20"],
            "scheduled_time": ["5", "15", "25"], "deletion_time": ["50", "60", "70"]}
    rows[col] = [rows[col][0], "abc", rows[col][2]]
    import pandas as pd

    pd.DataFrame(rows).to_csv(tmp_path / "dl3.csv", index=False)
    code = main(["runtime", "backtest", "--dlrm", str(tmp_path / "dl3.csv")])
    one_line(capsys, code, "dl3.csv", f"column {col}", "data row 2", "'abc'")


def test_text_in_an_openb_count_is_named_not_a_traceback(tmp_path, capsys):
    (tmp_path / "ob.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,100,1,1000,,LS,0,50,5\np1,1000,100,two,1000,,LS,10,60,15\n")
    code = main(["runtime", "backtest", "--openb", str(tmp_path / "ob.csv")])
    one_line(capsys, code, "ob.csv", "column num_gpu", "data row 2", "'two'")
