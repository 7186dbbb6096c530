"""Bad input at the command line: one line on stderr, a non-zero exit, no traceback."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from promserver import PrometheusServer, free_port


def run_cli(*args: str, timeout: float = 120, env_password: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    if env_password is not None:
        env["FORESIGHT_PROM_PASSWORD"] = env_password
    return subprocess.run([sys.executable, "-m", "foresight.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_help_lists_commands():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for cmd in ("ingest", "backfill", "demo"):
        assert cmd in proc.stdout


def test_ingest_unreachable_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_cli("ingest", "--prometheus-url", url, "--since", "1h", "--out", str(tmp_path / "o"),
                   "--retries", "0")
    assert_one_line_error(proc, "cannot reach Prometheus", url)
    assert not (tmp_path / "o").exists()


def test_ingest_empty_time_range(tmp_path):
    proc = run_cli("ingest", "--prometheus-url", "http://127.0.0.1:1", "--start", "2026-01-02T00:00:00Z",
                   "--end", "2026-01-01T00:00:00Z", "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "empty time range")


def test_ingest_bad_duration(tmp_path):
    proc = run_cli("ingest", "--prometheus-url", "http://127.0.0.1:1", "--since", "a week",
                   "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "invalid duration")


def test_ingest_unknown_metric(tmp_path):
    proc = run_cli("ingest", "--prometheus-url", "http://127.0.0.1:1", "--metric", "GPU_UTIL",
                   "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "unknown GPU metric", "GPU_UTIL")


def test_backfill_malformed_openmetrics_line(tmp_path):
    om = tmp_path / "bad.om"
    om.write_text('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
                  'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 12 1700000000\n'
                  'DCGM_FI_DEV_GPU_UTIL{gpu="0"} twelve 1700000015\n# EOF\n')
    tsdb = tmp_path / "tsdb"
    tsdb.mkdir()
    (tsdb / "existing-block").mkdir()
    proc = run_cli("backfill", "--openmetrics", str(om), "--tsdb", str(tsdb))
    assert_one_line_error(proc, "malformed OpenMetrics", "line 3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.om", "tsdb"]  # no staging left
    assert [p.name for p in tsdb.iterdir()] == ["existing-block"]


def test_backfill_missing_eof(tmp_path):
    om = tmp_path / "noeof.om"
    om.write_text('# TYPE x gauge\nx 1 1700000000\n')
    assert_one_line_error(run_cli("backfill", "--openmetrics", str(om), "--tsdb", str(tmp_path / "t")),
                          "EOF")


needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None,
                                      reason="prometheus not installed (make test installs it)")


@needs_prometheus
def test_ingest_missing_metric_and_wrong_credentials(tmp_path):
    bcrypt = pytest.importorskip("bcrypt")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    out = tmp_path / "out"
    out.mkdir()
    (out / "samples.parquet").write_bytes(b"precious")  # must survive failed runs
    with PrometheusServer(tmp_path / "tsdb", web_config=f"basic_auth_users:\n  u: {hashed}\n") as server:
        proc = run_cli("ingest", "--prometheus-url", server.url, "--since", "1h", "--out", str(out),
                       "--username", "u", "--metric", "DCGM_FI_DEV_GPU_UTIL",
                       env_password="wrong")
        assert_one_line_error(proc, "rejected the credentials")
        proc = run_cli("ingest", "--prometheus-url", server.url, "--since", "1h", "--out", str(out),
                       "--username", "u", "--metric", "DCGM_FI_DEV_GPU_UTIL", env_password="s3cret")
        assert_one_line_error(proc, "DCGM_FI_DEV_GPU_UTIL", "no series")
    assert (out / "samples.parquet").read_bytes() == b"precious"


def test_exit_codes_of_commands_reach_the_shell(monkeypatch):
    import typer

    from foresight import cli

    probe = typer.Typer()

    @probe.command()
    def fail(code: int = 4) -> None:
        raise typer.Exit(code)

    @probe.command()
    def ok() -> None:
        pass

    monkeypatch.setattr(cli, "app", probe)
    assert cli.main(["fail", "--code", "4"]) == 4
    assert cli.main(["ok"]) == 0


def test_a_missing_required_option_is_one_line_not_a_traceback():
    proc = run_cli("interference", "predict", "--model-dir", "nowhere", "--pairs", "nothing.csv")
    assert proc.returncode == 2
    assert_one_line_error(proc, "Missing option '--out'", "foresight interference predict --help")


def test_an_unknown_command_is_one_line():
    assert_one_line_error(run_cli("no-such-command"), "No such command")
