"""Provider loaders of the default config, the demand provider and the carbon-intensity file."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from foresight.errors import ForesightError
from scheduler_hook.app import create_app
from scheduler_hook.carbon import CarbonWindows, install
from scheduler_hook.config import load_config
from scheduler_hook.demand import DemandProvider
from scheduler_hook.engine import Scorer
from scheduler_hook.fake_kube import make_node, make_pod
from scheduler_hook.hook import ExtenderHook
from scheduler_hook.podspec import parse_pod
from scheduler_hook.providers import ProviderSet, load_registry
from scheduler_hook.state import ClusterState


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Path:
    """Fingerprint, interference and demand models published by the training pipeline."""
    from training import sources
    from training.pipeline import TrainConfig, run

    reg = tmp_path_factory.mktemp("reg") / "registry"
    res = run(sources.synthetic(seed=0, days=2.5, nodes=2), str(reg),
              TrainConfig(holdout=pd.Timedelta("18h"), n_estimators=20, threads=1,
                          demand_freq="1h", demand_horizon=3,
                          kinds=("fingerprint", "interference", "demand")))
    assert {k.kind: k.status for k in res.kinds} == dict.fromkeys(
        ("fingerprint", "interference", "demand"), "published")
    return reg


def _state() -> ClusterState:
    st = ClusterState()
    st.replace_all([make_node("a", gpus=4), make_node("b", gpus=4)],
                   [make_pod("r", gpus=1, node="a", phase="Running", workload="resnet50-template")])
    st.ready = True
    return st


def test_default_loaders_give_model_providers_and_fallback_without_registry(registry):
    from artifacts.adapters import FingerprintAdapter, InterferenceAdapter

    cfg = load_config()
    prov = load_registry(str(registry), cfg["loaders"], float(cfg["model_max_age_s"]), cfg=cfg)
    status = prov.status()
    assert {s: status[s]["status"] for s in ("interference", "fingerprint", "demand")} == \
        dict.fromkeys(("interference", "fingerprint", "demand"), "fresh")
    assert isinstance(prov.fresh("interference"), InterferenceAdapter)
    assert isinstance(prov.fresh("fingerprint"), FingerprintAdapter)
    assert isinstance(prov.fresh("demand"), DemandProvider)
    speed, _ = prov.fresh("interference").speeds("bert-template", ["resnet50-template"], "mps")
    assert np.isfinite(speed).all()
    # the hook asks by the pods' workload names (foresight.io/workload): the interference
    # model fills in their solo features, the fingerprints answer through their aliases
    names = ["bert", "resnet50", "recsys", "notebook"]
    s, _ = prov.fresh("interference").speeds("bert", names, "timeslice")
    assert np.isfinite(s).all() and len(set(np.round(s, 6))) == len(names)
    assert np.isfinite(prov.fresh("fingerprint").peak_fb_mib(names)).sum() >= 3
    assert not prov.fallback
    for providers, scoring, gauge in ((prov, "model-based", "0.0"),
                                      (load_registry(None, cfg["loaders"], 3600, cfg=cfg),
                                       "fallback", "1.0")):
        client = TestClient(create_app(ExtenderHook(_state(), providers, cfg)))
        ready = client.get("/readyz").json()
        assert ready["scoring"].startswith(scoring)
        assert f"foresight_extender_fallback {gauge}" in client.get("/metrics").text
    assert ready["providers"]["interference"] == {"status": "missing",
                                                  "error": "no --registry given"}
    install(providers, cfg)  # no carbon file in the default config
    assert providers.status()["carbon"]["error"] == "no carbon.intensity_file configured"


def test_demand_provider_reads_the_published_mix_and_reserves_forecast_queue_demand(
        registry, tmp_path):
    from training.kinds import load_kind
    from artifacts.registry import Registry

    path, _ = Registry(registry).fetch("demand")
    model = load_kind("demand").load(path)
    model.shape_mix_ = {"shapes": [{"gpus": 1, "milli": 500, "share": 0.7},
                                   {"gpus": 4, "milli": 1000, "share": 0.3},
                                   {"gpus": 0, "milli": 0, "share": 0.1}]}  # not a GPU shape
    series = tmp_path / "recent.csv"
    ds = pd.date_range("2026-01-01", periods=72, freq="1h")
    pd.concat([pd.DataFrame({"unique_id": q, "ds": ds, "y": y})
               for q, y in (("prod", 6.0), ("dev", 1.0))]).to_csv(series, index=False)
    p = DemandProvider.from_model(model, "7", {"reserve_queues": ["prod"], "series": str(series)})
    assert p.shape_mix() == {(1, 500): 0.7, (4, 1000): 0.3}
    want = model.predict(pd.read_csv(series, parse_dates=["ds"]))
    assert p.reserved_whole_gpus() == pytest.approx(
        float(want.loc[want["unique_id"] == "prod", "p90"].iloc[0]))
    assert p.reserved_whole_gpus() > 0
    assert DemandProvider.from_model(model, "7", {}).reserved_whole_gpus() == 0.0

    # the fragmentation score takes the forecast mix; an empty one leaves the seen mix
    for mix, src in (({(1, 500): 1.0}, "forecast mix"), ({}, "mix of 2 pods seen")):
        prov = ProviderSet()
        prov.set("demand", DemandProvider(mix))
        d = Scorer(_state(), prov, load_config()).decide(parse_pod(make_pod("p", gpus=1)),
                                                         ["a", "b"])
        assert d.mix_source == src


def test_the_reservation_forecasts_from_prometheus_what_the_retraining_job_would_build(
        registry, tmp_path):
    """`demand.prometheus_url`: the recent arrivals read from kube-state-metrics in a real
    Prometheus give the same reservation as the series the demand kind builds from the same
    pods, written to a file; a Prometheus with no such pods leaves the provider to the loader's
    fallback (it raises, the previous provider stays)."""
    import shutil

    from artifacts.registry import Registry
    from features.demand_series import arrivals_until
    from features.openmetrics import backfill, write_openmetrics
    from promserver import PrometheusServer
    from training import sources
    from training.kinds import load_kind

    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("prometheus/promtool not installed (make test installs Debian's package)")
    path, _ = Registry(registry).fetch("demand")
    model = load_kind("demand").load(path)
    now = pd.Timestamp.now(tz="UTC").floor(model.freq) - pd.Timedelta(model.freq)
    pods = sources.synthetic(seed=1, days=2.5, nodes=2).pods.dropna(subset=["created"])
    shift = now - pd.Timedelta("30min") - pods["created"].max()
    for c in ("created", "started", "finished"):
        pods[c] = pods[c] + shift
    queues = sorted(set(pods["queue"].astype(str)) - {""})
    assert len(queues) >= 2
    write_openmetrics(tmp_path / "h.om", pods=pods, pod_step_s=600)
    backfill(tmp_path / "h.om", tmp_path / "tsdb", block_duration="24h")
    cfg = {"reserve_queues": queues[:1], "history": "4d"}  # every pod: the same grid
    with PrometheusServer(tmp_path / "tsdb", retention="3650d") as server:
        live = DemandProvider.from_model(model, "1", {**cfg, "prometheus_url": server.url},
                                         now=now)
    series = tmp_path / "recent.csv"
    arrivals_until(pods, model.freq, now).to_csv(series, index=False)
    from_file = DemandProvider.from_model(model, "1", {**cfg, "series": str(series)})
    assert live.reserved_whole_gpus() == pytest.approx(from_file.reserved_whole_gpus())
    assert live.reserved_whole_gpus() > 0
    with PrometheusServer(tmp_path / "empty", retention="1d") as server:
        with pytest.raises(LookupError, match="no pod with a queue"):
            DemandProvider.from_model(model, "1", {**cfg, "prometheus_url": server.url}, now=now)


def _csv(path: Path, rows: str) -> Path:
    path.write_text("ts,g_per_kwh,region\n" + rows)
    return path


def test_carbon_windows_hold_until_the_next_row_and_expire_after_the_last(tmp_path):
    f = _csv(tmp_path / "ci.csv", "2026-01-01T00:00:00Z,400,\n2026-01-01T02:00:00Z,80,\n"
                                  "1767227400,120,eu-north\n")  # 00:30Z, one region
    t0 = pd.Timestamp("2026-01-01T00:00:00Z").timestamp()
    now = [t0 + 3600]
    c = CarbonWindows(f, hold_s=1800, clock=lambda: now[0])
    assert c.intensity(["us-east", "eu-north"]).tolist() == [400.0, 120.0]
    now[0] = t0 + 2 * 3600 + 60
    assert c.intensity(["us-east"]).tolist() == [80.0]
    now[0] = t0 + 3 * 3600  # 1 h after the last window, hold is 30 min: unknown
    assert np.isnan(c.intensity(["us-east", "eu-north"])).all()
    now[0] = t0 - 1  # before any window
    assert np.isnan(c.intensity(["us-east"])).all()
    # the file changes: re-read at the next check (recheck_s 0 here)
    c.recheck_s = 0.0
    _csv(f, f"{t0 - 60:.0f},250,\n")
    os.utime(f, (time.time() + 5, time.time() + 5))
    assert c.intensity(["x"]).tolist() == [250.0]
    _csv(f, "not a time,1,\n")  # a broken rewrite keeps the last good windows
    os.utime(f, (time.time() + 10, time.time() + 10))
    assert c.intensity(["x"]).tolist() == [250.0]


@pytest.mark.parametrize("rows, msg", [("yesterday,100,\n", "row 2"), ("1,-5,\n", "row 2")])
def test_carbon_file_errors_are_one_line_user_errors(tmp_path, rows, msg):
    with pytest.raises(ForesightError, match=msg):
        CarbonWindows(_csv(tmp_path / "bad.csv", rows))
    with pytest.raises(ForesightError, match="not found"):
        CarbonWindows(tmp_path / "absent.csv")


def test_configured_carbon_file_moves_deferrable_pods_to_the_clean_region(tmp_path):
    f = _csv(tmp_path / "ci.csv", f"{time.time() - 60:.0f},480,dirty\n"
                                  f"{time.time() - 60:.0f},90,clean\n")
    st = ClusterState()
    st.replace_all([make_node(n, gpus=1, labels={"topology.kubernetes.io/region": n})
                    for n in ("dirty", "clean")], [])
    cfg = load_config()
    cfg["carbon"] = {**cfg["carbon"], "intensity_file": str(f)}
    prov = ProviderSet()
    install(prov, cfg)
    assert prov.status()["carbon"]["status"] == "fresh"
    scorer = Scorer(st, prov, cfg)
    later = parse_pod(make_pod("p", gpus=1, annotations={"foresight.io/deferrable": "true"}))
    d = scorer.decide(later, ["dirty", "clean"])
    assert d.values["carbon"].tolist() == [pytest.approx(0.05), 1.0]
    assert d.scores[1] > d.scores[0]
    now = scorer.decide(parse_pod(make_pod("q", gpus=1)), ["dirty", "clean"])
    assert now.values["carbon"].tolist() == [1.0, 1.0]  # not deferrable: no preference


def test_serve_reload_loop_refreshes_only_the_slots_the_api_store_does_not_feed(registry):
    import threading

    from foresight.commands.serve import _reload_loop

    cfg = load_config()
    hook = ExtenderHook(_state(), ProviderSet(), cfg)
    stop = threading.Event()
    t = threading.Thread(target=_reload_loop, args=(hook, registry, 0.05, stop), daemon=True)
    t.start()
    deadline = time.time() + 30
    while hook.providers.fresh("demand") is None and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    t.join(10)
    assert isinstance(hook.providers.fresh("demand"), DemandProvider)
    # interference and fingerprint come from the API's model store (artifacts.adapters.install)
    assert hook.providers.fresh("interference") is None
    assert hook.providers.fresh("fingerprint") is None
