"""The Prometheus source against a real `prometheus` binary, and its one-line errors."""
from __future__ import annotations

import shutil
import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pandas as pd
import pytest

from features.catalog import LabelConfig
from features.ingest import ingest, parse_duration, parse_time
from features.openmetrics import backfill, write_openmetrics
from features.prometheus import PrometheusSource, split_range
from foresight.errors import ForesightError, MetricMissing, SourceUnavailable
from promserver import PrometheusServer, free_port

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (make test installs Debian's package)")


def test_split_range_covers_every_point_within_the_limit():
    step = 15.0
    start, end = 1_000_000.0, 1_000_000.0 + 25_000 * step
    chunks = split_range(start, end, step, max_points=11_000)
    points = set()
    for lo, hi in chunks:
        grid = np.arange(lo, hi + step / 2, step)
        assert len(grid) <= 11_000
        points.update(grid.tolist())
    assert points == set(np.arange(start, end + step / 2, step).tolist())
    assert chunks[0][0] == start and chunks[-1][1] == end


def test_split_range_single_chunk_when_small():
    assert split_range(0, 100, 10) == [(0, 100)]


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("15m", 900), ("6h", 21600), ("7d", 604800)])
def test_parse_duration(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["7", "d7", "-1d", "7 days", ""])
def test_parse_duration_rejects(bad):
    with pytest.raises(ForesightError, match="invalid duration"):
        parse_duration(bad)


def test_parse_time_rejects_garbage():
    with pytest.raises(ForesightError, match="invalid time"):
        parse_time("yesterday-ish")


def _unreachable_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_unreachable_url_is_a_clear_error():
    src = PrometheusSource(_unreachable_url(), retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(SourceUnavailable, match="cannot reach Prometheus"):
        src.check()


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 twice, then a valid vector: the retries must absorb the 5xx."""

    calls = 0

    def do_GET(self):  # noqa: N802 - http.server API
        type(self).calls += 1
        if type(self).calls <= 2:
            self.send_response(503)
            self.end_headers()
            return
        body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(handler):
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_retries_absorb_transient_5xx():
    _Flaky.calls = 0
    server = _serve(_Flaky)
    try:
        src = PrometheusSource(f"http://127.0.0.1:{server.server_port}", retries=3, backoff_s=0.01)
        src.check()
        assert _Flaky.calls == 3
    finally:
        server.shutdown()


def test_persistent_5xx_names_the_status():
    class Down(_Flaky):
        def do_GET(self):  # noqa: N802
            self.send_response(502)
            self.end_headers()

    server = _serve(Down)
    try:
        src = PrometheusSource(f"http://127.0.0.1:{server.server_port}", retries=1, backoff_s=0.01)
        with pytest.raises(SourceUnavailable, match="HTTP 502"):
            src.check()
    finally:
        server.shutdown()


def test_timeout_is_a_clear_error():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)  # accepts connections, never answers
    try:
        src = PrometheusSource(f"http://127.0.0.1:{listener.getsockname()[1]}", retries=0, timeout_s=0.5)
        with pytest.raises(SourceUnavailable, match="did not answer within"):
            src.check()
    finally:
        listener.close()


def test_invalid_url_is_rejected_before_any_request():
    with pytest.raises(ForesightError, match="invalid Prometheus URL"):
        PrometheusSource("localhost:9090").check()


# -- against the real binary -----------------------------------------------------------------

STEP_S = 15
POINTS = 12_000  # more than the 11,000-point limit of one range query


def _history(end: pd.Timestamp) -> tuple[pd.DataFrame, pd.DataFrame]:
    ts = pd.date_range(end=end, periods=POINTS, freq=f"{STEP_S}s")
    rng = np.random.default_rng(7)
    frames = []
    for gpu, pod in (("0", "train-0"), ("1", "")):
        for metric, scale in (("DCGM_FI_DEV_GPU_UTIL", 100), ("DCGM_FI_DEV_FB_USED", 81920)):
            frames.append(pd.DataFrame({
                "ts": ts, "node": "gpu-node-1", "gpu": gpu, "uuid": f"GPU-{gpu}",
                "namespace": "ml" if pod else "", "pod": pod, "metric": metric,
                # awkward floats on purpose: exact round trip needs shortest-repr formatting
                "value": rng.random(POINTS) * scale / 3.0}))
    pods = pd.DataFrame({"namespace": ["ml"], "pod": ["train-0"], "node": ["gpu-node-1"], "queue": ["research"],
                         "priority": [100], "workload": ["resnet50"], "gpu_request": [1.0],
                         "created": [ts[0] - pd.Timedelta(minutes=2)], "started": [ts[0]], "finished": [pd.NaT]})
    return pd.concat(frames, ignore_index=True), pods


@contextmanager
def _served(root, **tables):
    """A real Prometheus over `tables` (write_openmetrics' keywords), backfilled with promtool."""
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("prometheus/promtool not installed (make test installs Debian's package)")
    write_openmetrics(root / "history.om", **tables)
    backfill(root / "history.om", root / "tsdb")
    with PrometheusServer(root / "tsdb", retention="30d") as server:
        yield server


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    end = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(hours=1)
    samples, pods = _history(end)
    with _served(tmp_path_factory.mktemp("prom"), samples=samples, pods=pods) as server:
        yield server, samples, pods


@needs_prometheus
def test_samples_round_trip_exactly_over_more_than_11000_points(backfilled):
    server, samples, _ = backfilled
    start, end = samples["ts"].min().to_pydatetime(), samples["ts"].max().to_pydatetime()
    got = ingest(PrometheusSource(server.url), start, end, step_s=STEP_S,
                 metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")).samples
    keys = ["metric", "node", "gpu", "ts"]
    got = got.sort_values(keys).reset_index(drop=True)
    want = samples.sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want) == 2 * 2 * POINTS
    assert got.groupby(["metric", "gpu"]).size().min() == POINTS
    assert (got["ts"].to_numpy() == want["ts"].to_numpy()).all()
    assert np.array_equal(got["value"].to_numpy(), want["value"].to_numpy())  # exact, not approx
    assert set(got["pod"]) == {"train-0", ""}


@needs_prometheus
def test_pods_table_from_kube_state_metrics(backfilled):
    server, samples, pods = backfilled
    start, end = samples["ts"].min().to_pydatetime(), samples["ts"].max().to_pydatetime()
    got = ingest(PrometheusSource(server.url), start, end, step_s=60,
                 metrics=("DCGM_FI_DEV_GPU_UTIL",)).pods
    assert len(got) == 1
    row = got.iloc[0]
    assert (row["namespace"], row["pod"], row["node"], row["queue"], row["workload"]) == \
        ("ml", "train-0", "gpu-node-1", "research", "resnet50")
    assert row["priority"] == 100 and row["gpu_request"] == 1.0
    assert row["created"] == pods["created"].iloc[0] and row["started"] == pods["started"].iloc[0]
    assert pd.isna(row["finished"])


@needs_prometheus
def test_missing_metric_is_named(backfilled):
    server, samples, _ = backfilled
    start, end = samples["ts"].min().to_pydatetime(), samples["ts"].max().to_pydatetime()
    with pytest.raises(MetricMissing, match="DCGM_FI_DEV_POWER_USAGE"):
        ingest(PrometheusSource(server.url), start, end, step_s=60, metrics=("DCGM_FI_DEV_POWER_USAGE",))


@needs_prometheus
def test_empty_time_range_is_rejected(backfilled):
    server, samples, _ = backfilled
    t = samples["ts"].max().to_pydatetime()
    with pytest.raises(ForesightError, match="empty time range"):
        ingest(PrometheusSource(server.url), t, t, step_s=60)


@needs_prometheus
def test_wrong_credentials_are_a_clear_error(tmp_path):
    bcrypt = pytest.importorskip("bcrypt")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = f"basic_auth_users:\n  foresight: {hashed}\n"
    with PrometheusServer(tmp_path / "tsdb", web_config=web) as server:
        PrometheusSource(server.url, username="foresight", password="s3cret").check()
        with pytest.raises(SourceUnavailable, match="rejected the credentials"):
            PrometheusSource(server.url, username="foresight", password="wrong", retries=0).check()
        with pytest.raises(SourceUnavailable, match="rejected the credentials"):
            PrometheusSource(server.url, token="not-a-valid-token", retries=0).check()


@needs_prometheus
def test_tls_with_ca_file_and_a_clear_error_without(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed: cannot make a test certificate")
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    web = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    with PrometheusServer(tmp_path / "tsdb", web_config=web) as server:
        assert server.url.startswith("https://")
        PrometheusSource(server.url, ca_file=str(cert)).check()
        PrometheusSource(server.url, insecure=True).check()
        with pytest.raises(SourceUnavailable, match="TLS handshake"):
            PrometheusSource(server.url, retries=0).check()


@pytest.fixture(scope="module")
def volcano(tmp_path_factory):
    """A cluster scheduled by Volcano, not Kueue: pods carry volcano.sh/queue-name, and the
    queue gauges are Volcano's, labelled queue_name."""
    end = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(hours=1)
    ts = pd.date_range(end=end, periods=120, freq="60s")
    samples = pd.DataFrame({"ts": ts, "node": "n1", "gpu": "0", "uuid": "GPU-0", "namespace": "ml",
                            "pod": "train-0", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 50.0})
    pods = pd.DataFrame({"namespace": ["ml"], "pod": ["train-0"], "node": ["n1"], "queue": ["vq-a"],
                         "priority": [0], "workload": ["bert"], "gpu_request": [2.0],
                         "created": [ts[0]], "started": [ts[1]], "finished": [pd.NaT]})
    queues = pd.DataFrame({"ts": ts, "queue": "vq-a", "metric": "volcano_queue_pod_group_pending_count",
                           "value": np.arange(len(ts)) % 4.0})
    with _served(tmp_path_factory.mktemp("volcano"), samples=samples, pods=pods, queues=queues,
                 labels=LabelConfig(queue="label_volcano_sh_queue_name")) as server:
        yield server, ts, queues


@needs_prometheus
def test_volcano_queues_are_read_where_kueue_is_absent(volcano):
    server, ts, queues = volcano
    got = ingest(PrometheusSource(server.url), ts[0].to_pydatetime(), ts[-1].to_pydatetime(),
                 step_s=60, metrics=("DCGM_FI_DEV_GPU_UTIL",))  # the default labels: Kueue's first
    assert got.pods["queue"].tolist() == ["vq-a"]  # from volcano.sh/queue-name
    q = got.queues
    assert set(q["metric"]) == {"volcano_queue_pod_group_pending_count"}
    assert set(q["queue"]) == {"vq-a"}
    want = queues.set_index("ts")["value"]
    assert np.array_equal(q.set_index("ts")["value"].reindex(want.index).to_numpy(), want.to_numpy())
    # a Kueue queue label, where a pod has one, still wins over the fallback
    kueue_first = LabelConfig(queue="label_volcano_sh_queue_name", queue_fallback=("label_nope",))
    got2 = ingest(PrometheusSource(server.url), ts[0].to_pydatetime(), ts[-1].to_pydatetime(),
                  step_s=60, metrics=("DCGM_FI_DEV_GPU_UTIL",), labels=kueue_first)
    assert got2.pods["queue"].tolist() == ["vq-a"]
    none = LabelConfig(queue_fallback=())
    got3 = ingest(PrometheusSource(server.url), ts[0].to_pydatetime(), ts[-1].to_pydatetime(),
                  step_s=60, metrics=("DCGM_FI_DEV_GPU_UTIL",), labels=none)
    assert got3.pods["queue"].tolist() == [""]  # without the fallback the Volcano queue is unseen


def _mimir_gateway(upstream: str):
    """A Mimir-like front: 401 "no org id" without X-Scope-OrgID, else the real Prometheus
    behind it answers."""
    import requests

    class Gateway(BaseHTTPRequestHandler):
        tenants: list = []

        def _relay(self, body: bytes | None = None):
            org = self.headers.get("X-Scope-OrgID")
            type(self).tenants.append(org)
            if not org:
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b"no org id\n")
                return
            r = requests.request(self.command, upstream + self.path, data=body, timeout=30,
                                 headers={"Content-Type": self.headers.get("Content-Type", "")})
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        def do_GET(self):  # noqa: N802 - http.server API
            self._relay()

        def do_POST(self):  # noqa: N802
            self._relay(self.rfile.read(int(self.headers.get("Content-Length", 0))))

        def log_message(self, *args):
            pass

    return Gateway


@needs_prometheus
def test_a_mimir_tenant_is_sent_and_its_absence_named(backfilled, tmp_path, capsys):
    from foresight.cli import main

    server, samples, _ = backfilled
    gw = _mimir_gateway(server.url)
    front = _serve(gw)
    url = f"http://127.0.0.1:{front.server_port}"
    start, end = samples["ts"].min(), samples["ts"].max()
    try:
        args = ["ingest", "--prometheus-url", url, "--start", start.isoformat(), "--end",
                end.isoformat(), "--step", "60s", "--metric", "DCGM_FI_DEV_GPU_UTIL",
                "--retries", "0"]
        assert main([*args, "--out", str(tmp_path / "none")]) == 2
        err = capsys.readouterr().err
        assert "wants a tenant" in err and "--tenant" in err and len(err.strip().splitlines()) == 1
        assert main([*args, "--out", str(tmp_path / "ok"), "--tenant", "team-a"]) == 0
        assert gw.tenants[-1] == "team-a"
        got = pd.read_parquet(next((tmp_path / "ok").rglob("DCGM_FI_DEV_GPU_UTIL*.parquet")))
        assert len(got) > 0
    finally:
        front.shutdown()


@needs_prometheus
def test_pods_are_keyed_by_workload_as_the_extender_keys_them(tmp_path):
    """foresight.io/workload first, then app.kubernetes.io/name, then job-name: the order of
    scheduler_hook's workload_labels, so history and scheduling ask by one name."""
    from scheduler_hook.podspec import parse_pod

    end = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(hours=1)
    ts = [int((end - pd.Timedelta(minutes=m)).timestamp()) for m in (20, 10, 0)]
    pods = {"a": {"foresight.io/workload": "wa", "app.kubernetes.io/name": "appa"},
            "b": {"job-name": "job-b"}, "c": {"app.kubernetes.io/name": "appc",
                                             "job-name": "job-c"}, "d": {}}
    ksm = {"foresight.io/workload": "label_foresight_io_workload", "job-name": "label_job_name",
           "app.kubernetes.io/name": "label_app_kubernetes_io_name"}
    lines = ["# TYPE kube_pod_info gauge"]
    lines += [f'kube_pod_info{{namespace="ml",pod="{p}",node="n1",priority_class="0"}} 1 {t}'
              for p in pods for t in ts]
    lines.append("# TYPE kube_pod_labels gauge")
    for p, lab in pods.items():
        extra = "".join(f',{ksm[k]}="{v}"' for k, v in lab.items())
        lines += [f'kube_pod_labels{{namespace="ml",pod="{p}"{extra}}} 1 {t}' for t in ts]
    lines.append("# TYPE kube_pod_container_resource_requests gauge")  # GPU pods only
    lines += [f'kube_pod_container_resource_requests{{namespace="ml",pod="{p}",container="m",'
              f'resource="nvidia_com_gpu",unit="integer"}} 1 {t}' for p in pods for t in ts]
    (tmp_path / "h.om").write_text("\n".join(lines) + "\n# EOF\n")
    backfill(tmp_path / "h.om", tmp_path / "tsdb")
    with PrometheusServer(tmp_path / "tsdb", retention="30d") as server:
        from features.telemetry import pods_from_source

        got = pods_from_source(PrometheusSource(server.url), (end - pd.Timedelta(hours=1))
                               .to_pydatetime(), end.to_pydatetime(), LabelConfig())
    keys = dict(zip(got["pod"], got["workload"]))
    assert keys == {"a": "wa", "b": "job-b", "c": "appc", "d": ""}
    for p, lab in pods.items():  # the extender's own reading of the same labels
        spec = {"metadata": {"name": p, "namespace": "ml", "labels": lab},
                "spec": {"containers": [{"name": "m", "image": ""}]}}
        assert parse_pod(spec).workload == keys[p]
