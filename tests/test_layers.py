"""The house rules of DESIGN.md, read from the imports themselves (every import statement,
including those inside functions)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = {"artifacts", "features", "forecaster", "foresight", "ground", "scheduler_hook",
           "serving", "simulator", "training"}
RULES = {
    # package: packages it must not import (`foresight` is the CLI on top of the house; the
    # error types every layer raises are on the ground floor, `ground`)
    "scheduler_hook": {"training", "foresight"},
    "serving": {"training", "foresight"},
    "forecaster": {"training", "serving", "scheduler_hook", "foresight"},
    "features": {"training", "serving", "scheduler_hook", "forecaster", "foresight"},
    "artifacts": {"training", "serving", "scheduler_hook", "features", "foresight"},
    "simulator": {"foresight"},
    "training": {"foresight", "serving", "scheduler_hook"},
    "ground": PROJECT - {"ground"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_does_not_import_the_layers_above_it(package):
    bad = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        hit = imported_packages(path) & RULES[package]
        if hit:
            bad[str(path.relative_to(ROOT))] = sorted(hit)
    assert not bad, f"{package} imports what it must not: {bad}"


def test_the_reader_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from training.registry import Registry\n    import serving.app\n")
    assert imported_packages(f) == {"training", "serving"}


def test_forecaster_families_export_their_estimator_and_load_it_lazily():
    import subprocess
    import sys

    code = ("import sys, forecaster.demand.shapes, forecaster.usage.features;"
            "assert 'lightgbm' not in sys.modules, 'a light module imported LightGBM';"
            "from forecaster.demand import DemandForecaster;"
            "from forecaster.usage import UsageForecaster;"
            "from forecaster.interference import InterferenceModel;"
            "from forecaster.fingerprint import FingerprintModel;"
            "assert DemandForecaster.__module__ == 'forecaster.demand.model'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_no_layer_imports_the_errors_from_the_cli_package():
    """training may read the CLI package's version, but its errors come from the ground floor;
    foresight.errors re-exports the same classes for older callers."""
    from foresight import errors as old
    from ground import errors as new

    hits = [str(p.relative_to(ROOT)) for pkg in PROJECT - {"foresight", "ground"}
            for p in sorted((ROOT / pkg).rglob("*.py")) if "foresight.errors" in p.read_text()]
    assert not hits, hits
    assert old.ForesightError is new.ForesightError and old.MetricMissing is new.MetricMissing
