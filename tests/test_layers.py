"""The house rules of DESIGN.md, read from the imports themselves (every import statement,
including those inside functions)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULES = {
    # package: packages it must not import
    "scheduler_hook": {"training"},
    "serving": {"training"},
    "forecaster": {"training", "serving", "scheduler_hook"},
    "features": {"training", "serving", "scheduler_hook", "forecaster"},
    "artifacts": {"training", "serving", "scheduler_hook", "features"},
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
