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
