"""One streaming path for every source of `foresight train`: `simulate` writes partitions, a flat
table is split on read, a Prometheus pull lands in partitions in a scratch directory (resumable)
and every one trains the same models as the ingest directory of the same history."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from artifacts.registry import Registry
from features import schema
from features.ingest import read_tables, write_tables
from features.ingest_store import split_flat
from foresight.cli import main
from training import sources
from training.sources import TRAINING_METRICS

KEYS = ["metric", "node", "gpu", "uuid", "namespace", "pod", "ts"]
TRAIN = ["--kinds", "demand,usage", "--holdout", "12h", "--n-estimators", "20"]


def _models(reg: Path) -> dict:
    """kind -> (version, file digests, metrics, data hash) of what the registry serves."""
    r, out = Registry(reg), {}
    for kind in r.kinds():
        man = r.manifest(kind, r.current(kind))
        out[kind] = (r.current(kind), man["files"], man["data_hash"],
                     json.dumps(man["metrics"], sort_keys=True, default=str))
    return out


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    df = schema.conform(df, schema.GPU_SAMPLE_COLUMNS)
    return df.sort_values(KEYS).reset_index(drop=True)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "sim"
    assert main(["simulate", "--out", str(out), "--days", "2", "--nodes", "1",
                 "--gpus-per-node", "4", "--step", "60", "--load", "1.0",
                 "--metrics", ",".join(TRAINING_METRICS)]) == 0
    return out


def test_simulate_writes_partitions_and_a_flat_table_of_them_trains_the_same_models(
        simulated, tmp_path):
    assert not (simulated / "samples.parquet").exists()
    assert len(list((simulated / "samples").glob("day=*/*.parquet"))) == 2 * len(TRAINING_METRICS)
    # the same history as one flat table (what a user may bring), beside the same other tables
    flat = tmp_path / "flat"
    shutil.copytree(simulated, flat, ignore=shutil.ignore_patterns("samples", "ingest.json"))
    write_tables(flat, {"samples": read_tables(simulated)["samples"]})
    scratch = tmp_path / "scratch"
    for src, reg in ((simulated, "reg-parts"), (flat, "reg-flat")):
        assert main(["train", "--data", str(src), "--registry", str(tmp_path / reg),
                     "--out", str(tmp_path / f"out-{reg}"), "--scratch", str(scratch),
                     *TRAIN]) == 0
    parts, from_flat = _models(tmp_path / "reg-parts"), _models(tmp_path / "reg-flat")
    assert set(parts) == {"demand", "usage"}
    for kind in parts:  # same files and metrics; the data hash is of the partitions' bytes
        assert parts[kind][:2] == from_flat[kind][:2], kind
        assert parts[kind][3] == from_flat[kind][3], kind
    assert list(scratch.iterdir()) == []  # the split partitions are removed after the run


def test_a_flat_table_is_read_in_parts_and_split_by_day_and_metric(simulated, tmp_path,
                                                                   monkeypatch):
    samples = read_tables(simulated)["samples"]
    table = tmp_path / "samples.parquet"
    samples.to_parquet(table, index=False, row_group_size=len(samples))  # one row group
    seen = []
    conform = schema.conform

    def spy(df, cols):
        if cols is schema.GPU_SAMPLE_COLUMNS:
            seen.append(len(df))
        return conform(df, cols)

    monkeypatch.setattr(schema, "conform", spy)
    info = split_flat(table, tmp_path / "parts", batch_rows=5000)
    monkeypatch.undo()
    assert max(seen) <= 5000 and len(seen) >= len(samples) // 5000
    assert info["rows"] == len(samples) and info["partitions"] == 2 * len(TRAINING_METRICS)
    back = read_tables(tmp_path / "parts")["samples"]
    pd.testing.assert_frame_equal(_sorted(back), _sorted(samples))
    man = json.loads((tmp_path / "parts" / "ingest.json").read_text())
    assert man["complete"] and pd.Timestamp(man["end"]) == samples["ts"].max()


def _pull_only(full: dict, keep):
    """An ingest_to_dir that writes `full`'s pods and queues and the samples `keep` selects,
    as a complete pull."""
    import features.ingest_store as store

    def pull(source, start, end, out, **kw):
        s = full["samples"]
        kept = s[keep(s)]
        write_tables(out, {"pods": full["pods"], "queues": full["queues"]})
        for (day, metric), part in kept.groupby([kept["ts"].dt.floor("D"), "metric"]):
            store.atomic_parquet(part, store.partition_path(Path(out), f"{day:%Y-%m-%d}", metric))
        (Path(out) / store.MANIFEST).write_text(json.dumps(
            {"start": start.isoformat(), "end": end.isoformat(), "step_s": 60.0,
             "metrics": list(TRAINING_METRICS), "complete": True}))
        return {}

    return pull


def _pull_window(full: dict, tmp_path):
    s = full["samples"]["ts"]
    return sources.from_prometheus("http://fake:9090", s.min().to_pydatetime(),
                                   s.max().to_pydatetime(), step_s=60, source=object(),
                                   scratch=tmp_path, max_age=pd.Timedelta(days=3650))


def test_prometheus_source_refuses_partial_data_and_keeps_no_pull(simulated, tmp_path,
                                                                  monkeypatch):
    """A pull covering 40 % of the window is refused, and not kept for the next run."""
    full = read_tables(simulated)
    cut = full["samples"]["ts"].min() + pd.Timedelta(hours=19)
    monkeypatch.setattr("features.ingest_store.ingest_to_dir",
                        _pull_only(full, lambda s: s["ts"] < cut))
    with pytest.raises(Exception, match="partial data from http://fake.*left untouched"):
        _pull_window(full, tmp_path)
    assert not sources.pull_dir(tmp_path).exists()


def test_a_progress_counter_seen_part_of_the_window_is_not_partial_data(simulated, tmp_path,
                                                                        monkeypatch):
    """The app counter exists only while pods exporting it run: the rest is full, it is cut
    to 40 % of the window, and the pull trains."""
    full = read_tables(simulated)
    assert sources.PROGRESS_METRIC in set(full["samples"]["metric"])
    cut = full["samples"]["ts"].min() + pd.Timedelta(hours=19)
    monkeypatch.setattr("features.ingest_store.ingest_to_dir", _pull_only(
        full, lambda s: (s["metric"] != sources.PROGRESS_METRIC) | (s["ts"] < cut)))
    assert sources.PROGRESS_METRIC in _pull_window(full, tmp_path).store.metrics


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.parquet")):
        h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (make test installs Debian's package)")


@pytest.fixture(scope="module")
def prom(simulated, tmp_path_factory):
    """The simulated history backfilled into a real Prometheus (stopped by PID after)."""
    from features.openmetrics import backfill, write_openmetrics_dir
    from promserver import PrometheusServer

    root = tmp_path_factory.mktemp("prom")
    write_openmetrics_dir(root / "h.om", simulated, pod_step_s=600)
    backfill(root / "h.om", root / "tsdb", block_duration="24h")
    man = json.loads((simulated / "ingest.json").read_text())
    with PrometheusServer(root / "tsdb", retention="3650d") as server:
        yield server, man["start"], man["end"]


def _counted(prom, calls: list, fail_after: int | None = None):
    """(server, start, end, a source recording each range query in `calls` and dropping
    the connection after `fail_after` of them)."""
    from datetime import datetime

    from features.prometheus import PrometheusSource
    from foresight.errors import SourceUnavailable

    class Counted(PrometheusSource):
        def query_range(self, *a, **kw):
            calls.append(a[0])
            if self.fail_after is not None and len(calls) > self.fail_after:
                raise SourceUnavailable("connection dropped")
            return super().query_range(*a, **kw)

    server, start, end = prom
    src = Counted(server.url)
    src.fail_after = fail_after
    return server, datetime.fromisoformat(start), datetime.fromisoformat(end), src


@needs_prometheus
def test_an_interrupted_prometheus_pull_resumes_in_the_scratch_directory(prom, tmp_path):
    from foresight.errors import SourceUnavailable

    calls = []
    server, t0, t1, src = _counted(prom, calls, fail_after=5)
    old = pd.Timedelta(days=3650)
    with pytest.raises(SourceUnavailable):
        sources.from_prometheus(server.url, t0, t1, step_s=60, source=src, scratch=tmp_path,
                                max_age=old)
    pulled = list(sources.pull_dir(tmp_path).glob("samples/day=*/*.parquet"))
    assert len(pulled) == 5
    src.fail_after, calls[:] = None, []
    h = sources.from_prometheus(server.url, t0, t1, step_s=60, source=src, scratch=tmp_path,
                                max_age=old)
    # 2 UTC days x 11 metrics, 5 of them already there (the other calls: pods and queues)
    assert sum(c in TRAINING_METRICS for c in calls) == 2 * len(TRAINING_METRICS) - 5
    fresh = sources.from_prometheus(server.url, t0, t1, step_s=60, scratch=tmp_path / "b",
                                    max_age=old)
    assert _digest(h.store.root) == _digest(fresh.store.root)
    assert h.scratch == sources.pull_dir(tmp_path) and h.samples is None


@needs_prometheus
def test_a_pull_under_other_label_names_is_not_reused(prom, tmp_path):
    from features.catalog import LabelConfig

    calls = []
    server, t0, t1, src = _counted(prom, calls)
    kw = dict(step_s=60, source=src, scratch=tmp_path, max_age=pd.Timedelta(days=3650))
    sources.from_prometheus(server.url, t0, t1, **kw)
    n = len(calls)
    sources.from_prometheus(server.url, t0, t1, **kw)  # the same labels: the pull is reused
    assert len(calls) == n
    h = sources.from_prometheus(server.url, t0, t1, labels=LabelConfig(queue_fallback=()), **kw)
    assert len(calls) > n and h.pods["queue"].ne("").any()


@pytest.mark.parametrize("args, msg", [
    (["--step", "0"], "--step 0: must be"),
    (["--step", "soon"], "invalid duration 'soon'"),
    (["--token", "a", "--token-file", "t"], "give the bearer token once"),
    (["--label", "nope=x"], "invalid --label 'nope=x'"),
])
def test_train_source_options_are_checked_in_one_line(args, msg, tmp_path, capsys):
    rc = main(["train", "--prometheus-url", "http://127.0.0.1:9", "--registry",
               str(tmp_path / "r"), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err


@needs_prometheus
def test_train_from_prometheus_publishes_the_models_of_the_ingest_directory(prom, tmp_path):
    server, start, end = prom
    scratch = tmp_path / "scratch"
    since = f"{(pd.Timestamp(end) - pd.Timestamp(start)).total_seconds():.0f}s"
    assert main(["train", "--prometheus-url", server.url, "--since", since, "--end", end,
                 "--step", "60", "--scratch", str(scratch), "--registry", str(tmp_path / "a"),
                 "--out", str(tmp_path / "oa"), *TRAIN]) == 0
    assert not sources.pull_dir(scratch).exists()  # removed once the run is over
    assert main(["ingest", "--prometheus-url", server.url, "--start", start, "--end", end,
                 "--step", "60s", "--out", str(tmp_path / "ing")] +
                [x for m in TRAINING_METRICS for x in ("--metric", m)]) == 0
    assert main(["train", "--data", str(tmp_path / "ing"), "--registry", str(tmp_path / "b"),
                 "--out", str(tmp_path / "ob"), *TRAIN]) == 0
    a, b = _models(tmp_path / "a"), _models(tmp_path / "b")
    assert set(a) == {"demand", "usage"} and a == b  # versions, files, data hash, metrics


def test_source_auth_takes_the_token_given_before_the_environment(tmp_path, monkeypatch):
    from foresight.commands.ingest import source_auth

    monkeypatch.setenv("FORESIGHT_PROM_TOKEN", "from-env")
    monkeypatch.setenv("FORESIGHT_PROM_PASSWORD", "pw")
    f = tmp_path / "t"
    f.write_text("from-file\n")
    assert source_auth(None, f, None, None, False)["token"] == "from-file"
    assert source_auth("given", None, None, None, False)["token"] == "given"
    a = source_auth(None, None, "me", None, False, "team-a")
    assert (a["token"], a["password"], a["tenant"]) == ("from-env", "pw", "team-a")
