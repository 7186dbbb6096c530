"""Bad inputs to `interference fit|predict` found by a sweep: every --pairs source is checked
on its own and named, rows are 1-based data rows, --model-dir must be a directory."""
from __future__ import annotations

from pathlib import Path

from foresight.cli import main
from cli_support import one_line

H200 = Path(__file__).resolve().parents[1] / "data" / "h200f"  # committed colocate.py output


def _series(path: Path) -> Path:
    path.write_text("unique_id,ds,y\nq,2026-01-01T00:00:00Z,1\nq,2026-01-01T00:10:00Z,2\n")
    return path


def test_a_demand_series_stacked_with_a_good_table_is_refused_by_name(tmp_path, capsys):
    s = _series(tmp_path / "S.csv")
    model = tmp_path / "im"
    code = main(["interference", "fit", "--pairs", str(H200), "--pairs", str(s),
                 "--model-dir", str(model)])
    one_line(capsys, code, "S.csv", "no usable column for side 'a'")
    assert not model.exists()
    one_line(capsys, main(["interference", "fit", "--pairs", str(s), "--model-dir", str(model)]),
             "S.csv", "no usable column")


def test_a_pair_table_row_error_names_the_file_and_its_data_row(tmp_path, capsys):
    p = tmp_path / "P.csv"
    p.write_text("a_workload,b_workload,a_speed,b_speed\nx,y,0.5,0.5\nx,z,0.4,0.6\n"
                 "y,z,abc,0.3\n")
    code = main(["interference", "fit", "--pairs", str(H200), "--pairs", str(p),
                 "--model-dir", str(tmp_path / "im")])
    one_line(capsys, code, "P.csv", "'a_speed'", "'abc'", "data row 3")
    p.write_text("a_workload,b_workload,a_speed,b_speed\nx,y,0.5,0.5\nx,z,3,0.6\n")
    one_line(capsys, main(["interference", "fit", "--pairs", str(p), "--model-dir",
                           str(tmp_path / "im")]), "P.csv", "(0, 2]", "data row 2")


def test_predict_with_a_file_as_model_dir_names_the_option(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code = main(["interference", "predict", "--model-dir", str(f), "--pairs", str(H200),
                 "--out", str(tmp_path / "o.csv")])
    assert code == 2
    one_line(capsys, code, "--model-dir", "afile", "is a file")


def test_fit_on_a_measurement_says_what_its_support_check_refuses(tmp_path, capsys):
    code = main(["interference", "fit", "--pairs", str(H200), "--model-dir",
                 str(tmp_path / "im")])
    out = capsys.readouterr().out
    assert code == 0 and "min-speed held to point - q" in out
    assert "support check: a side farther than" in out and "from all 8 trained" in out
