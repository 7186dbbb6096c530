"""`foresight demo` (what `make demo` runs) end to end, at a small size."""
from __future__ import annotations

import json

from foresight.cli import main
from artifacts.registry import Registry


def test_demo_publishes_every_model_then_keeps_them(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--days", "2", "--nodes", "2", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    reg = Registry(out / "registry")
    kinds = reg.kinds()
    metrics = json.loads((out / "report" / "metrics.json").read_text())
    # every kind is published, or withheld because it does not beat its best baseline
    withheld = {k for k, v in metrics["kinds"].items() if v["status"] == "withheld"}
    assert set(kinds) | withheld == {"interference", "demand", "fingerprint", "usage", "runtime"}
    assert "demand" in kinds and "usage" in kinds
    for k, v in metrics["kinds"].items():
        name, base = v["best_baseline"]
        assert name in printed
        if k in withheld:
            assert v["backtest"]["mae"] >= base and name in v["reason"]
        else:  # no published kind is worse than its best baseline on the backtest shown
            # (a baseline of record may differ from it by float32 rounding of its constant)
            assert reg.manifest(k, "1")["metrics"]["mae"] <= base * (1 + 1e-6)
    # first run publishes version 1 of each; the identical second run publishes nothing new
    assert all(reg.current(k) == "1" and reg.versions(k) == ["1"] for k in kinds)
    assert reg.verify() == []
    assert (out / "data" / "samples.parquet").stat().st_size > 0
    assert (out / "data" / "history.om").read_bytes().endswith(b"# EOF\n")
    report = (out / "report" / "report.html").read_text()
    assert "<img" in report
    assert {k: v["status"] for k, v in metrics["kinds"].items() if k not in withheld} == \
        {k: "kept" for k in kinds}
    assert "published" in printed and "kept" in printed


def test_demo_says_when_its_registry_already_serves_models(tmp_path):
    from foresight.commands.demo import _first_title
    from artifacts.registry import Registry

    reg_dir = tmp_path / "registry"
    assert _first_title(reg_dir) == "first run: an empty registry"
    model = tmp_path / "m"
    model.mkdir()
    (model / "model.json").write_text("{}")
    reg = Registry(reg_dir)
    reg.publish("usage", model, {
        "features": [], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
        "data_hash": "x", "metrics": {"primary": "mae", "mae": 1.0}, "code_version": "t"})
    title = _first_title(reg_dir)
    assert "already serves usage from an earlier demo" in title and str(reg_dir) in title
