"""Model registry: atomic publish under injected faults and real kills, tamper refusal, CLI."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from foresight.cli import main
from foresight.errors import ForesightError
from artifacts.registry import PUBLISH_STEPS, Registry, manifest_checksum

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"features": ["x0", "x1"], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
          "data_hash": "abc", "metrics": {"primary": "mae", "mae": 0.1}, "code_version": "test"}


def _model_dir(tmp: Path, seed: int) -> Path:
    """A real (tiny) LightGBM text model, so 'loadable' means LightGBM can parse it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 2))
    y = X[:, 0] * 2 + rng.normal(scale=0.1, size=200)
    b = lgb.train({"verbosity": -1, "num_threads": 1, "seed": seed}, lgb.Dataset(X, y), 5)
    d = tmp / f"model-{seed}"
    d.mkdir()
    (d / "model.txt").write_text(b.model_to_string())
    (d / "sub").mkdir()  # estimators may save nested directories
    (d / "sub" / "meta.json").write_text(json.dumps({"seed": seed}))
    return d


def _load(reg: Registry, kind: str = "toy") -> tuple[str, lgb.Booster]:
    path, body = reg.fetch(kind)
    booster = lgb.Booster(model_file=str(path / "model.txt"))
    assert booster.predict(np.zeros((1, 2))).shape == (1,)
    return body["version"], booster


def test_publish_list_and_rollback(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg")
    assert reg.current("toy") is None
    assert reg.publish("toy", _model_dir(tmp_path, 1), FIELDS) == "1"
    assert reg.publish("toy", _model_dir(tmp_path, 2), FIELDS) == "2"
    assert reg.current("toy") == "2" and reg.versions("toy") == ["1", "2"]
    body = reg.manifest("toy", "2")
    assert set(body["files"]) == {"model.txt", "sub/meta.json"}
    assert body["checksum"] == manifest_checksum(body)
    reg.rollback("toy", "1")
    assert _load(reg)[0] == "1"
    with pytest.raises(ForesightError, match="does not exist"):
        reg.rollback("toy", "7")
    assert reg.verify() == []


@pytest.mark.parametrize("step", PUBLISH_STEPS)
def test_exception_between_every_publish_step_keeps_current_loadable(tmp_path: Path, step: str) -> None:
    root = tmp_path / "reg"
    Registry(root).publish("toy", _model_dir(tmp_path, 1), FIELDS)

    def fault(name: str) -> None:
        if name == step:
            raise RuntimeError(f"killed before {name}")

    with pytest.raises(RuntimeError, match=step):
        Registry(root, fault=fault).publish("toy", _model_dir(tmp_path, 2), FIELDS)
    reg = Registry(root)
    assert reg.current("toy") == "1"
    assert _load(reg)[0] == "1"
    assert reg.verify() == []  # no half version, no stray pointer
    assert not list((root / "models" / "toy").glob(".staging-*"))
    assert not list((root / "models" / "toy").glob(".current.*"))
    # the next publish works and takes the pointer
    v = reg.publish("toy", _model_dir(tmp_path, 3), FIELDS)
    assert reg.current("toy") == v and _load(reg)[0] == v


_CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from artifacts.registry import Registry
    def fault(name):
        if name == {step!r}:
            os._exit(9)  # like SIGKILL: no cleanup, no finally
    Registry({reg!r}, fault=fault).publish("toy", {src!r}, {fields!r})
""")


@pytest.mark.parametrize("step", PUBLISH_STEPS[::2] + PUBLISH_STEPS[-1:])
def test_process_killed_during_publish(tmp_path: Path, step: str) -> None:
    root = tmp_path / "reg"
    Registry(root).publish("toy", _model_dir(tmp_path, 1), FIELDS)
    code = _CHILD.format(root=str(ROOT), step=step, reg=str(root),
                         src=str(_model_dir(tmp_path, 2)), fields=FIELDS)
    rc = subprocess.run([sys.executable, "-c", code], timeout=60).returncode
    assert rc == 9
    reg = Registry(root)
    assert reg.current("toy") == "1" and _load(reg)[0] == "1"
    assert reg.verify() == []  # leftovers (staging dirs, temp pointer) are hidden names
    reg.clean_staging()
    assert reg.publish("toy", _model_dir(tmp_path, 3), FIELDS) in ("2", "3")


def test_tampered_model_file_refused_and_verify_names_it(tmp_path: Path, capsys) -> None:
    root = tmp_path / "reg"
    reg = Registry(root)
    reg.publish("toy", _model_dir(tmp_path, 1), FIELDS)
    target = root / "models" / "toy" / "1" / "model" / "model.txt"
    text = target.read_text()
    target.write_text(text.replace("num_leaves", "num_leaveZ", 1))
    with pytest.raises(ForesightError, match=r"model\.txt: checksum mismatch"):
        reg.fetch("toy")
    with pytest.raises(SystemExit) as exc:
        main(["registry", "verify", "--registry", str(root)])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "model.txt" in out and "checksum mismatch" in out
    target.write_text(text)
    assert main(["registry", "verify", "--registry", str(root)]) == 0


def test_manifest_edits_schema_and_extra_files_refused(tmp_path: Path) -> None:
    root = tmp_path / "reg"
    reg = Registry(root)
    reg.publish("toy", _model_dir(tmp_path, 1), FIELDS)
    mpath = root / "models" / "toy" / "1" / "manifest.json"
    original = mpath.read_text()
    body = json.loads(original)
    body["metrics"]["mae"] = 0.0001  # someone makes the model look better
    mpath.write_text(json.dumps(body))
    with pytest.raises(ForesightError, match="manifest checksum mismatch"):
        reg.fetch("toy")
    body["schema_version"] = 99
    body["checksum"] = manifest_checksum(body)
    mpath.write_text(json.dumps(body))
    with pytest.raises(ForesightError, match="schema 99 is not supported"):
        reg.fetch("toy")
    mpath.write_text(original)
    (root / "models" / "toy" / "1" / "model" / "evil.py").write_text("import os")
    with pytest.raises(ForesightError, match=r"evil\.py: not listed"):
        reg.fetch("toy")
    problems = reg.verify()
    assert [Path(p.path).name for p in problems] == ["evil.py"]
    with pytest.raises(ForesightError, match="refusing to roll back"):
        reg.rollback("toy", "1")


def test_fsspec_memory_registry(tmp_path: Path) -> None:
    reg = Registry("memory://foresight-test-reg")
    src = tmp_path / "m"
    src.mkdir()
    (src / "model.json").write_text('{"a": 1}')
    try:
        assert reg.publish("toy", src, FIELDS) == "1"
        path, body = reg.fetch("toy")
        assert json.loads((path / "model.json").read_text()) == {"a": 1}
        reg.fs.pipe_file(reg._p("toy", "1", "model", "model.json"), b'{"a": 2}')
        with pytest.raises(ForesightError, match="checksum mismatch"):
            reg.fetch("toy")
    finally:
        reg.fs.rm(reg.root, recursive=True)


def test_cli_list_and_rollback(tmp_path: Path, capsys) -> None:
    root = tmp_path / "reg"
    reg = Registry(root)
    reg.publish("toy", _model_dir(tmp_path, 1), FIELDS)
    reg.publish("toy", _model_dir(tmp_path, 2), FIELDS)
    assert main(["registry", "list", "--registry", str(root)]) == 0
    out = capsys.readouterr().out
    assert "toy" in out and "mae=0.1" in out
    assert main(["registry", "rollback", "toy", "1", "--registry", str(root)]) == 0
    assert reg.current("toy") == "1"
    assert main(["registry", "rollback", "toy", "9", "--registry", str(root)]) == 2
