"""Bad input to train, demo and simulate: one line naming the option, exit 2, and nothing
already stored (registry versions and pointers, an earlier demo's tables) changed."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from artifacts.registry import Registry
from cli_support import one_line
from foresight.cli import main

FIELDS = {"features": [], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
          "data_hash": "x", "metrics": {"primary": "mae", "mae": 1.0}, "code_version": "t"}


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _registry(tmp_path: Path, kinds=("demand", "usage"), reg: Path | None = None) -> Path:
    """A registry serving a (stand-in) version 1 of each kind."""
    model = tmp_path / "m"
    model.mkdir(exist_ok=True)
    (model / "model.json").write_text("{}")
    reg = reg or tmp_path / "reg"
    for kind in kinds:
        Registry(reg).publish(kind, model, FIELDS)
    return reg


TRAIN = ["train", "--synthetic", "--days", "1.5", "--nodes", "1", "--holdout", "12h",
         "--n-estimators", "5", "--kinds", "usage,demand"]


@pytest.mark.parametrize("breakage,says", [
    (lambda r: (r / "models/demand/current").write_bytes(b'{"version": "1", "ma'),
     "pointer is not valid JSON"),
    (lambda r: (r / "models/demand/current").write_text('{"version": "abc"}'),
     "not a version number"),
])
def test_train_with_a_broken_pointer_publishes_no_kind(tmp_path, capsys, breakage, says):
    # usage comes first and would be published before demand's pointer failed the run
    reg = _registry(tmp_path)
    breakage(reg)
    before = _tree(reg)
    rc = main([*TRAIN, "--registry", str(reg), "--out", str(tmp_path / "out")])
    one_line(capsys, rc, "models/demand/current", says)
    assert rc == 2 and _tree(reg) == before
    assert Registry(reg).versions("usage") == ["1"]


def test_train_refuses_a_report_path_it_cannot_write_before_publishing(tmp_path, capsys):
    reg = _registry(tmp_path)
    before = _tree(reg)
    (tmp_path / "out" / "metrics.json").mkdir(parents=True)
    rc = main([*TRAIN, "--registry", str(reg), "--out", str(tmp_path / "out")])
    one_line(capsys, rc, "--out", "metrics.json")
    assert _tree(reg) == before


@pytest.mark.parametrize("args,needle", [
    (["--holdout", "0s"], "--holdout 0s: must be > 0"),
    (["--holdout", "-1h"], "--holdout: invalid duration '-1h'"),
    (["--holdout", "nanh"], "--holdout: invalid duration 'nanh'"),
    (["--holdout", "99999999999999d"], "--holdout 99999999999999d"),
    (["--holdout", "2d"], "--holdout 2d"),  # longer than the 1.5 days of history
    (["--step", "99999999999999d"], "--step"),
    (["--seed", "0", "--nodes", "100000"], "too large"),
])
def test_train_durations_are_refused_up_front(tmp_path, capsys, args, needle):
    rc = main(["train", "--synthetic", "--days", "1.5", "--nodes", "1", "--n-estimators", "5",
               "--registry", str(tmp_path / "reg"), "--out", str(tmp_path / "out"), *args])
    one_line(capsys, rc, needle)
    assert rc == 2 and not (tmp_path / "reg").exists()


@pytest.mark.parametrize("since,needle", [("0s", "--since 0s: must be > 0"),
                                          ("12h", "longer than --holdout"),
                                          ("99999999999999d", "--since")])
def test_train_since_is_refused_before_pulling(tmp_path, capsys, since, needle):
    rc = main(["train", "--prometheus-url", "http://127.0.0.1:9", "--since", since,
               "--registry", str(tmp_path / "reg"), "--out", str(tmp_path / "out")])
    one_line(capsys, rc, needle)
    assert rc == 2


def test_a_failing_demo_keeps_the_data_of_an_earlier_one(tmp_path, capsys):
    data = tmp_path / "dd" / "data"
    data.mkdir(parents=True)
    for name in ("pods.parquet", "queues.parquet"):
        (data / name).write_bytes(b"an earlier demo's table")
    before = _tree(tmp_path / "dd")
    rc = main(["demo", "--out", str(tmp_path / "dd"), "--days", "0.5", "--nodes", "1"])
    one_line(capsys, rc, "--days 0.5", "backtest window")
    assert rc == 2 and _tree(tmp_path / "dd") == before


def test_demo_refuses_a_broken_registry_before_writing_its_tables(tmp_path, capsys):
    out = tmp_path / "dd"
    reg = _registry(tmp_path, ("usage",), out / "registry")
    (reg / "models" / "usage" / "current").write_text("{")
    rc = main(["demo", "--out", str(out), "--days", "1.5", "--nodes", "1"])
    one_line(capsys, rc, "models/usage/current")
    assert not (out / "data").exists()


@pytest.mark.parametrize("command,args,needle", [
    ("demo", ["--seed", "-1"], "--seed -1"),
    ("demo", ["--days", "1e9"], "too large"),
    ("demo", ["--days", "nan"], "--days nan"),
    ("demo", ["--nodes", "0"], "--nodes 0"),
    ("simulate", ["--load", "1e9", "--days", "0.05", "--nodes", "1"], "--load 1e+09"),
    ("simulate", ["--days", "0"], "--days 0: must be positive"),
    ("simulate", ["--step", "0"], "--step 0: must be positive"),
    ("simulate", ["--gpus-per-node", "0"], "--gpus-per-node 0"),
    ("simulate", ["--load", "nan"], "--load nan"),
])
def test_demo_and_simulate_name_the_option_out_of_range(tmp_path, capsys, command, args,
                                                        needle):
    rc = main([command, "--out", str(tmp_path / "d1"), *args])
    one_line(capsys, rc, needle)
    assert rc == 2 and not (tmp_path / "d1").exists()


@pytest.mark.parametrize("where", ["afile", "/proc/x"])
def test_demo_out_that_cannot_be_a_directory_is_named(tmp_path, capsys, where):
    (tmp_path / "afile").write_text("keep")
    out = where if where.startswith("/") else str(tmp_path / where)
    rc = main(["demo", "--out", out])
    one_line(capsys, rc, f"--out {out}")
    assert rc == 2 and (tmp_path / "afile").read_text() == "keep"
