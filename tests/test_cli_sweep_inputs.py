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
