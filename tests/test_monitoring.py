"""deploy/monitoring: promtool accepts the alert rules and their unit tests, and every metric a
rule or a dashboard panel names is one the service exports."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import scheduler_hook.indicators  # noqa: F401 - registers the cluster indicators
import scheduler_hook.metrics  # noqa: F401 - registers the extender's metrics
import serving.metrics  # noqa: F401 - registers the API's metrics

MON = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
RULES = MON / "foresight-rules.yaml"
METRIC = re.compile(r"\bforesight_[a-z0-9_]+")


def exported() -> set[str]:
    """Every sample name the process's registry would expose (counters' _total, histograms'
    _bucket/_sum/_count included), for metrics named foresight_*."""
    names = set()
    for fam in REGISTRY.collect():
        if fam.name.startswith("foresight_"):
            names.add(fam.name)
            names.update(s.name for s in fam.samples)
            if fam.type == "counter":
                names.add(fam.name + "_total")
            if fam.type == "histogram":
                names.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
    return names


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def panel_exprs() -> list[str]:
    dash = json.loads((MON / "foresight-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def named(exprs: list[str]) -> set[str]:
    return {m for e in exprs for m in METRIC.findall(e)}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(`make test` installs Debian's prometheus package)")
def test_promtool_checks_the_rules_and_their_unit_tests():
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 11 rules found" in check.stdout
    unit = subprocess.run(["promtool", "test", "rules", "alerts-test.yaml"], cwd=MON,
                          capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_every_metric_named_by_a_rule_or_panel_is_exported():
    have = exported()
    for where, exprs in (("rules", rule_exprs()), ("dashboard", panel_exprs())):
        names = named(exprs)
        assert names, f"no foresight_ metric in the {where}"
        missing = names - have
        assert not missing, f"{where} name metrics the service does not export: {missing}"


def test_the_check_catches_a_misspelt_metric():
    assert named(["rate(foresight_extender_requets_total[5m])"]) - exported() == {
        "foresight_extender_requets_total"}


def test_the_operator_rule_carries_the_same_groups():
    crd = yaml.safe_load((MON / "prometheusrule.yaml").read_text())
    assert crd["kind"] == "PrometheusRule"
    assert crd["spec"] == yaml.safe_load(RULES.read_text())


def test_dashboard_covers_what_an_operator_asks():
    text = " ".join(panel_exprs())
    for metric in ("foresight_extender_latency_seconds_bucket", "foresight_extender_fallback",
                   "foresight_model_created_timestamp_seconds", "foresight_api_model_version",
                   "foresight_model_backtest_error", "foresight_model_baseline_error",
                   "foresight_extender_filter_nodes_total", "foresight_cluster_gpus_free",
                   "foresight_cluster_fragmentation_ratio", "foresight_queue_pending_pods",
                   "foresight_queue_oldest_pending_seconds", "foresight_gangs_partially_placed",
                   "foresight_cluster_gpus_unhealthy", "foresight_cluster_domains_free",
                   "foresight_cluster_domain_fragmentation_ratio"):
        assert metric in text, metric
    dash = json.loads((MON / "foresight-dashboard.json").read_text())
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"])
             for p in dash["panels"]]
    cells = [(x + i, y + j) for x, y, w, h in boxes for i in range(w) for j in range(h)]
    assert len(cells) == len(set(cells)), "dashboard panels overlap"


def test_manifest_numbers_of_the_model_in_service_become_gauges(tmp_path):
    from serving.store import ModelStore
    from test_serve_default import _registry

    store = ModelStore(str(_registry(tmp_path)))
    assert store.refresh()["interference"].startswith("loaded")
    get = lambda name: REGISTRY.get_sample_value(name, {"kind": "interference"})  # noqa: E731
    assert get("foresight_model_backtest_error") == pytest.approx(0.01)
    assert get("foresight_model_baseline_error") == pytest.approx(0.02)
    created = store.get("interference").manifest["created"]
    from datetime import datetime

    assert get("foresight_model_created_timestamp_seconds") == pytest.approx(
        datetime.fromisoformat(created).timestamp())


def test_filter_decisions_are_counted_in_both_request_modes():
    from scheduler_hook.app import _count_filter

    def value(outcome: str) -> float:
        return REGISTRY.get_sample_value("foresight_extender_filter_nodes_total",
                                         {"outcome": outcome}) or 0.0

    before = {o: value(o) for o in ("passed", "failed", "unresolvable")}
    _count_filter({"Nodes": None, "NodeNames": ["a", "b"], "FailedNodes": {"c": "oom"},
                   "FailedAndUnresolvableNodes": {}, "Error": ""})
    _count_filter({"Nodes": {"items": [{"metadata": {"name": "a"}}]}, "NodeNames": None,
                   "FailedNodes": {}, "FailedAndUnresolvableNodes": {"d": "drained"},
                   "Error": ""})
    assert value("passed") - before["passed"] == 3
    assert value("failed") - before["failed"] == 1
    assert value("unresolvable") - before["unresolvable"] == 1
