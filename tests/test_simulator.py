"""Synthetic cluster generator: determinism, contracts, and that its ground truth is visible in
its telemetry (phases, interference, seasonality, health, iteration period, Gavel speeds)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.signal import periodogram

from features.schema import (GPU_SAMPLE_COLUMNS, LONG_COLUMNS, POD_COLUMNS,
                             QUEUE_SAMPLE_COLUMNS, conform)
from simulator import (APP_ITERATIONS, BENCH_METRICS, DCGM_METRICS, SimConfig,
                       generate_cluster)
from simulator.seeds import SEED_DIR
from simulator.workloads import CATALOGUE, gpu_spec

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SMALL = dict(days=1.0, nodes=4, gpus_per_node=4, seed=3, unhealthy_fraction=0.25)


@pytest.fixture(scope="module")
def small():
    return generate_cluster(SimConfig(**SMALL))


def _wide(samples: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    s = samples[samples.metric.isin(metrics)]
    return s.pivot_table(index=["node", "gpu", "namespace", "pod", "ts"], columns="metric",
                         values="value", observed=True).reset_index()


def test_same_config_gives_identical_tables_and_another_seed_does_not():
    cfg = dict(days=0.3, nodes=2, gpus_per_node=4, seed=11)
    a, b = generate_cluster(SimConfig(**cfg)), generate_cluster(SimConfig(**cfg))
    for name in ("samples", "pods", "pod_labels", "queues"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
        assert (pd.util.hash_pandas_object(getattr(a, name)).to_numpy()
                == pd.util.hash_pandas_object(getattr(b, name)).to_numpy()).all()
    assert a.truth.keys() == b.truth.keys()
    for name in a.truth:
        pd.testing.assert_frame_equal(a.truth[name], b.truth[name])
    c = generate_cluster(SimConfig(**dict(cfg, seed=12)))
    assert not c.samples["value"].equals(a.samples["value"])


def test_tables_follow_the_contracts_with_real_units(small):
    cfg = small.config
    for df, cols in ((small.samples, GPU_SAMPLE_COLUMNS), (small.pods, POD_COLUMNS),
                     (small.queues, QUEUE_SAMPLE_COLUMNS)):
        assert list(df.columns) == cols
        pd.testing.assert_frame_equal(conform(df, cols), df)
        assert np.isfinite(df.select_dtypes("number").to_numpy()).all()
    assert list(small.truth["demand"].columns) == LONG_COLUMNS
    assert set(small.samples.metric.unique()) == set(DCGM_METRICS) | {APP_ITERATIONS}
    v = small.samples.groupby("metric", observed=True)["value"]
    lo, hi = v.min(), v.max()
    for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"):
        assert lo[m] >= 0 and hi[m] <= 100 and hi[m] > 50
    for m in [m for m in DCGM_METRICS if m.startswith("DCGM_FI_PROF_") and "PCIE" not in m]:
        assert lo[m] >= 0 and hi[m] <= 1
    spec = gpu_spec(cfg.gpu_model)
    assert hi["DCGM_FI_DEV_POWER_USAGE"] <= spec["tdp_w"]
    assert lo["DCGM_FI_DEV_POWER_USAGE"] > 0
    assert hi["DCGM_FI_PROF_PCIE_TX_BYTES"] > 1e9  # bytes/s, not MB/s
    wide = _wide(small.samples, ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"])
    assert (wide.DCGM_FI_DEV_FB_USED + wide.DCGM_FI_DEV_FB_FREE <= spec["fb_mib"]).all()
    # every GPU reports at every step; idle GPUs with empty pod and namespace
    n_steps = int(cfg.duration_s / cfg.step_s)
    per = small.samples[small.samples.metric == "DCGM_FI_DEV_POWER_USAGE"]
    assert per.groupby(["node", "gpu"], observed=True).ts.nunique().eq(n_steps).all()
    idle = per[per.pod == ""]
    assert len(idle) > 0 and (idle.namespace == "").all()


def test_metrics_option_restricts_the_samples():
    c = generate_cluster(SimConfig(days=0.1, nodes=1, gpus_per_node=2, metrics=BENCH_METRICS))
    assert set(c.samples.metric.unique()) == set(BENCH_METRICS)
    with pytest.raises(ValueError, match="unknown metric"):
        SimConfig(metrics=("NOPE",)).metric_names()


def _phase_of_samples(cluster, metrics) -> pd.DataFrame:
    """Samples of GPUs with exactly one pod attached, labelled with that pod's true phase."""
    wide = _wide(cluster.samples, metrics)
    wide = wide[wide.pod != ""]
    alone = wide.groupby(["node", "gpu", "ts"], observed=True).pod.transform("size") == 1
    wide = wide[alone].sort_values("ts")
    ph = cluster.truth["phases"].sort_values("start")
    for c in ("node", "gpu", "namespace", "pod"):
        wide[c] = wide[c].astype(str)
        ph[c] = ph[c].astype(str)
    m = pd.merge_asof(wide, ph, left_on="ts", right_on="start",
                      by=["node", "gpu", "namespace", "pod"])
    return m[m.ts < m.end]


def test_phase_truth_is_visible_in_the_samples(small):
    m = _phase_of_samples(small, ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
                                  "DCGM_FI_DEV_POWER_USAGE"])
    by = m.groupby("phase")[["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
                             "DCGM_FI_DEV_POWER_USAGE"]].mean()
    assert {"startup", "compute", "eval", "checkpoint", "stall"} <= set(by.index)
    sm, tx, pw = by.DCGM_FI_PROF_SM_ACTIVE, by.DCGM_FI_PROF_PCIE_TX_BYTES, \
        by.DCGM_FI_DEV_POWER_USAGE
    assert sm["checkpoint"] < 0.1 < sm["compute"] - 0.3
    assert tx["checkpoint"] > 2 * tx["compute"]
    assert pw["compute"] > pw["eval"] > pw["checkpoint"]
    assert sm["stall"] < 0.5 * sm["compute"]


def _compute_phase_rates(cluster) -> pd.DataFrame:
    """Measured optimizer steps per second in each compute phase, from the app counter."""
    it = cluster.samples[cluster.samples.metric == APP_ITERATIONS]
    ph = cluster.truth["phases"]
    ph = ph[ph.phase == "compute"].drop_duplicates(["namespace", "pod", "start"])
    ph = ph[(ph.end - ph.start) > pd.Timedelta("5min")]
    rows = []
    for p in ph.itertuples():
        s = it[(it.pod == p.pod) & (it.ts > p.start) & (it.ts < p.end)]
        if len(s) > 5:
            dt = (s.ts.iloc[-1] - s.ts.iloc[0]).total_seconds()
            rows.append((p.namespace, p.pod, p.start, p.end,
                         (s.value.iloc[-1] - s.value.iloc[0]) / dt))
    return pd.DataFrame(rows, columns=["namespace", "pod", "start", "end", "rate"])


def test_colocated_jobs_are_slower_in_truth_and_in_iteration_rate():
    # training jobs only, on a crowded cluster: many share a GPU (openb's fractional requests)
    small = generate_cluster(SimConfig(
        days=2.0, nodes=2, gpus_per_node=2, seed=4, load=1.0, serving_pods=0,
        fractional_share=1.0,
        workload_mix={"resnet50": 1, "bert": 1, "llm-finetune": 1, "speech": 1},
        metrics=(APP_ITERATIONS,)))
    inter = small.truth["interference"]
    shared = inter[inter.sharing != "node"]
    assert len(shared) > 10
    assert (shared.speed < 1).all() and shared.speed.mean() < 0.85
    assert (inter.speed <= inter.pair_speed + 1e-9).all()  # more partners never help
    rates = _compute_phase_rates(small)
    periods = small.truth["iteration_period"].set_index("pod").seconds
    rates["measured_speed"] = rates.rate * periods.reindex(rates.pod).to_numpy()
    # overlap of each compute phase with a GPU-sharing episode of that pod
    ov = rates.merge(shared[["pod", "start", "end", "speed"]], on="pod", suffixes=("", "_ep"))
    ov = ov[(ov.start_ep <= ov.start) & (ov.end_ep >= ov.end)]
    colocated = set(zip(ov.pod, ov.start))
    touched = rates.merge(shared[["pod", "start", "end"]], on="pod", suffixes=("", "_ep"))
    touched = touched[(touched.start_ep < touched.end) & (touched.end_ep > touched.start)]
    solo = rates[~rates.pod.isin(touched.pod)]
    assert len(ov) >= 3 and len(solo) >= 3
    assert ov.measured_speed.mean() < solo.measured_speed.mean() - 0.1
    assert solo.measured_speed.min() > 0.85  # only mild node-level contention
    # the counter's slope matches the truth speed of the episode covering the phase
    whole = ov.groupby(["pod", "start"]).agg(m=("measured_speed", "first"),
                                              t=("speed", "min"))
    assert len(colocated) == len(whole)
    assert np.median(np.abs(whole.m - whole.t)) < 0.05


def test_arrivals_have_daily_and_weekly_seasonality():
    from scipy.stats import chisquare

    from simulator.arrivals import generate_arrivals

    cfg = SimConfig(days=28, nodes=8, gpus_per_node=8, seed=5)
    arr = generate_arrivals(cfg, np.random.default_rng(5))
    arr = arr[arr.created >= 0]
    ts = pd.DatetimeIndex(cfg.start + pd.to_timedelta(arr.created.to_numpy(), unit="s"))
    profiles = json.loads((SEED_DIR / "arrivals.json").read_text())["profiles"]
    corr = []
    for qi, q in enumerate(cfg.queues):
        t = ts[(arr["queue"] == q).to_numpy()]
        hod = pd.Series(1, index=t).groupby(t.hour).sum().reindex(range(24), fill_value=0)
        assert chisquare(hod.to_numpy()).pvalue < 1e-3, q  # not uniform over the day
        corr.append(np.corrcoef(hod, profiles[qi % len(profiles)]["hour_of_day_share"])[0, 1])
    # each queue follows its own Helios VC's daily shape (the flattest one less closely)
    assert min(corr) > 0.4 and np.median(corr) > 0.7, corr
    dow = pd.Series(1, index=ts).groupby(ts.dayofweek).sum()
    assert chisquare(dow.to_numpy()).pvalue < 1e-3
    # bursts: some hours far above their hour-of-day mean
    hourly = pd.Series(1, index=ts).resample("1h").sum()
    ratio = hourly / hourly.groupby(hourly.index.hour).transform("mean")
    assert (ratio > 3).sum() >= 3


def test_demand_truth_is_the_gpus_of_pods_created_per_bin(small):
    d, pods, cfg = small.truth["demand"], small.pods, small.config
    inside = pods[(pods.created >= cfg.start)]
    assert d.y.sum() == pytest.approx(inside.gpu_request.sum())
    assert len(d) == len(cfg.queues) * 24 and d.ds.min() == cfg.start
    first = inside.sort_values("created").iloc[0]
    b = d[(d.unique_id == first.queue) & (d.ds == first.created.floor("1h"))]
    assert b.y.iloc[0] >= first.gpu_request


def test_jobs_depart_so_pending_is_not_arrivals(small):
    pods = small.pods
    assert pods.finished.notna().sum() > 10
    q = small.queues[small.queues.metric == "kueue_pending_workloads"]
    assert (q.value >= 0).all()
    t = q.ts.iloc[len(q) // 2]
    mine = pods[pods.queue == q["queue"].iloc[len(q) // 2]]
    expect = ((mine.created <= t) & ~(mine.started <= t)).sum()
    assert q["value"].iloc[len(q) // 2] == expect


def test_unhealthy_gpus_show_ecc_xid_and_throttling(small):
    health = small.truth["health"]
    assert set(health.condition) == {"ecc_sbe", "ecc_dbe", "xid", "thermal"}
    s = small.samples
    s = s[s.metric.isin(["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                         "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                         "DCGM_FI_DEV_GPU_TEMP"])]
    s = s.assign(node=s.node.astype(str), gpu=s.gpu.astype(str), metric=s.metric.astype(str))
    bad = set(zip(health.node, health.gpu))
    for h in health.itertuples():
        g = s[(s.node == h.node) & (s.gpu == h.gpu)]
        before, during = g[g.ts < h.start], g[(g.ts >= h.start) & (g.ts < h.end)]

        def mx(df, m):
            return df[df.metric == m].value.max()
        if h.condition in ("ecc_sbe", "ecc_dbe"):
            assert mx(during, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") > mx(before, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
        if h.condition == "ecc_dbe":
            assert mx(during, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") >= 1
            assert mx(during, "DCGM_FI_DEV_XID_ERRORS") == 48
        if h.condition == "xid":
            assert mx(during, "DCGM_FI_DEV_XID_ERRORS") == 43
        if h.condition == "thermal":
            thr = during[during.metric == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].value
            assert ((thr.astype(int) & 0x8) > 0).all()
            assert mx(during, "DCGM_FI_DEV_GPU_TEMP") > mx(before, "DCGM_FI_DEV_GPU_TEMP")
    healthy = s[~pd.Series(list(zip(s.node, s.gpu)), index=s.index).isin(bad)]
    for m in ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
              "DCGM_FI_DEV_XID_ERRORS"):
        assert (healthy[healthy.metric == m].value == 0).all()
    assert ((healthy[healthy.metric == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].value.astype(int)
             & 0x8) == 0).all()


def test_high_resolution_shows_the_iteration_period():
    cfg = SimConfig(days=2 / 24, step_s=0.5, nodes=2, gpus_per_node=1, seed=2, load=6.0,
                    serving_pods=0, unhealthy_fraction=0.0, warmup_hours=0.5,
                    workload_mix={"resnet50": 1, "bert": 1},
                    metrics=("DCGM_FI_PROF_SM_ACTIVE",))
    c = generate_cluster(cfg)
    inter = c.truth["interference"]
    ph = c.truth["phases"]
    ph = ph[(ph.phase == "compute") & ((ph.end - ph.start) > pd.Timedelta("4min"))]
    periods = c.truth["iteration_period"].set_index("pod").seconds
    checked = 0
    for p in ph.itertuples():
        if ((inter.pod == p.pod) & (inter.start < p.end) & (inter.end > p.start)).any():
            continue  # co-located: the period is stretched by the slowdown
        s = c.samples[(c.samples.pod == p.pod) & (c.samples.ts >= p.start) &
                      (c.samples.ts < p.end)].sort_values("ts")
        f, pxx = periodogram(s.value.to_numpy(), fs=1 / cfg.step_s, detrend="constant")
        peak = f[1:][np.argmax(pxx[1:])]
        assert abs(1 / peak - periods[p.pod]) / periods[p.pod] < 0.05
        checked += 1
    assert checked >= 1


def test_interference_speeds_resemble_gavel():
    from simulator.calibrate import LEVELS, pair_speeds
    from simulator.interference import params

    gavel = json.loads((SEED_DIR / "gavel_speeds.json").read_text())
    q = np.interp(LEVELS, gavel["quantile_levels"], gavel["reference_quantiles"])
    ours = np.quantile(pair_speeds(params()), LEVELS)
    med = np.interp(0.5, LEVELS, ours)
    assert np.interp(0.3, LEVELS, q) <= med <= np.interp(0.7, LEVELS, q)
    assert np.sqrt(np.mean((ours - q) ** 2)) < 0.15
    # the committed calibration is what the code computes now
    cal = json.loads((SEED_DIR / "interference.json").read_text())
    assert np.allclose(ours, cal["simulated_quantiles"], atol=0.03)


def test_seed_files_are_reproducible_from_the_traces(tmp_path):
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available at {TRACES}")
    from simulator import derive_seeds

    for name, fn in (("power.json", derive_seeds.derive_power),
                     ("gavel_speeds.json", derive_seeds.derive_gavel),
                     ("jobs.json", derive_seeds.derive_jobs),
                     ("arrivals.json", derive_seeds.derive_arrivals)):
        committed = json.loads((SEED_DIR / name).read_text())
        assert json.loads(json.dumps(fn(TRACES))) == committed, name
        assert "source" in committed["provenance"] and "method" in committed["provenance"]


def test_cli_writes_tables_truth_and_openmetrics(tmp_path):
    from foresight.cli import main

    out = tmp_path / "sim"
    assert main(["simulate", "--out", str(out), "--days", "0.05", "--nodes", "1",
                 "--gpus-per-node", "2", "--openmetrics"]) == 0
    for f in ("pods", "queues", "truth/phases", "truth/interference",
              "truth/demand", "truth/health", "truth/iteration_period", "truth/workloads"):
        assert (out / f"{f}.parquet").is_file(), f
    # samples in `foresight ingest`'s layout (what `train --data` streams), no flat table
    parts = sorted(p.relative_to(out) for p in (out / "samples").glob("day=*/*.parquet"))
    assert len(parts) == 18 and not (out / "samples.parquet").exists()
    text = (out / "history.om").read_bytes()
    assert text.endswith(b"# EOF\n") and b"DCGM_FI_PROF_SM_ACTIVE" in text
    assert main(["simulate", "--out", str(out), "--metrics", "NOPE"]) == 2
    # byte-identical files from another process with another string-hash seed
    other = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "foresight.cli", "simulate", "--out", str(other),
                    "--days", "0.05", "--nodes", "1", "--gpus-per-node", "2"], check=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"}, capture_output=True)
    for f in [str(p) for p in parts] + [f"{f}.parquet" for f in (
            "pods", "queues", "truth/phases", "truth/interference")]:
        assert (out / f).read_bytes() == (other / f).read_bytes(), f


def test_inference_serving_follows_a_diurnal_load():
    cfg = SimConfig(days=6, nodes=1, gpus_per_node=2, serving_pods=2, load=0.0, step_s=300,
                    unhealthy_fraction=0.0, metrics=("DCGM_FI_DEV_POWER_USAGE",))
    c = generate_cluster(cfg)
    ph = c.truth["phases"]
    ph = ph[ph.phase.isin(["serving_busy", "serving_idle"])]
    assert set(c.pods.workload) == {"llm-serving"}
    # busy seconds per hour of day, from the phase truth
    busy = np.zeros(24)
    total = np.zeros(24)
    for p in ph.itertuples():
        for t in pd.date_range(p.start.ceil("min"), p.end, freq="1min", inclusive="left"):
            total[t.hour] += 1
            busy[t.hour] += p.phase == "serving_busy"
    share = busy / total
    profile = json.loads((SEED_DIR / "arrivals.json").read_text())["profiles"][0]
    assert np.corrcoef(share, profile["hour_of_day_share"])[0, 1] > 0.5
    assert share.max() - share.min() > 0.3
    m = _phase_of_samples(c, ["DCGM_FI_DEV_POWER_USAGE"])
    pw = m.groupby("phase").DCGM_FI_DEV_POWER_USAGE.mean()
    assert pw["serving_busy"] > pw["serving_idle"] + 50


def test_an_empty_cluster_still_reports_idle_gpus():
    c = generate_cluster(SimConfig(days=0.05, nodes=1, gpus_per_node=2, load=0.0,
                                   serving_pods=0))
    assert len(c.pods) == 0 and len(c.truth["interference"]) == 0
    assert len(c.samples) > 0 and (c.samples.pod == "").all()
    power = c.samples[c.samples.metric == "DCGM_FI_DEV_POWER_USAGE"].value
    assert power.max() < 0.3 * gpu_spec("A40")["tdp_w"]


@pytest.mark.parametrize("sharing", ["timeslice", "mps", "node"])
def test_another_partner_never_speeds_a_job_up(sharing):
    from simulator.interference import speed

    rng = np.random.default_rng(0)
    keys = ("sm_active", "sm_occupancy", "dram_active", "pcie")
    a, b, c = ({k: rng.uniform(0.0, 1.0, 5000) for k in keys} for _ in range(3))
    one = speed(a, b, sharing)
    two = speed(a, {k: b[k] + c[k] for k in keys}, sharing)
    assert (two <= one + 1e-12).all()
    assert (one <= 1).all() and (two > 0).all()
    if sharing != "node":  # a busy GPU partner costs more than an idle one
        idle = speed(a, {k: b[k] * 0.05 for k in keys}, sharing)
        assert np.mean(idle) > np.mean(one) + 0.1


def test_peak_framebuffer_follows_the_batch_size_label(small):
    """Most per-pod framebuffer variation comes from the pre-start batch-size label."""
    from simulator.workloads import BATCH_LABEL, CATALOGUE, framebuffer_model

    lab = small.pod_labels[small.pod_labels["label"] == BATCH_LABEL]
    bs = lab.set_index(["namespace", "pod"])["value"].astype(float)
    solo = small.truth["pod_solo"].set_index(["namespace", "pod"])
    solo = solo.join(bs.rename("bs"), how="inner")
    assert len(solo) >= 20
    model = [framebuffer_model(CATALOGUE[w], b) for w, b in zip(solo["workload"], solo["bs"])]
    resid = np.log(solo["fb_used_mib"] / np.asarray(model))
    assert resid.std() < 0.06  # only the allocator residual is left
    for _, g in solo.groupby("workload"):  # ... and the batch sizes explain the rest
        if g["bs"].nunique() >= 3:
            assert np.corrcoef(np.log(g["bs"]), np.log(g["fb_used_mib"]))[0, 1] > 0.8


def test_pods_without_an_iteration_period_show_their_full_compute_activity(small):
    # Notebooks have no optimizer step: their compute samples must not carry the step dip
    # (a pod with an infinite period once got a constant 0.48x dip).
    m = _phase_of_samples(small, ["DCGM_FI_PROF_SM_ACTIVE"])
    pods = small.pods[["namespace", "pod", "workload"]].astype(str)
    m = m.merge(pods, on=["namespace", "pod"])
    nb = m[(m.phase == "compute") & (m.workload.str.startswith("notebook"))]
    assert len(nb) > 20
    ratio = nb.DCGM_FI_PROF_SM_ACTIVE.median() / CATALOGUE["notebook"].sm
    assert 0.8 < ratio < 1.25
