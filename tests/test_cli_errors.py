"""Bad input at the command line: one line on stderr, a non-zero exit, no traceback."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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


# --- bad-input sweep: each of these was a traceback, a silent exit 0 or lost data ---------

@pytest.mark.parametrize("flag", ["--days", "--step", "--load"])
def test_simulate_nan_option_is_one_line(tmp_path, flag):
    proc = run_cli("simulate", "--out", str(tmp_path / "o"), "--days", "0.05", flag, "nan")
    assert_one_line_error(proc, "finite")


def test_simulate_refuses_to_overwrite_an_ingested_history(tmp_path):
    out = tmp_path / "ingest"
    (out / "samples" / "day=2026-01-01").mkdir(parents=True)
    (out / "ingest.json").write_text('{"start": "2026-01-01T00:00:00+00:00", "complete": true}')
    (out / "samples" / "day=2026-01-01" / "DCGM_FI_DEV_GPU_UTIL.parquet").write_bytes(b"precious")
    proc = run_cli("simulate", "--out", str(out), "--days", "0.05", "--nodes", "1")
    assert_one_line_error(proc, "ingested history", "another --out")
    assert (out / "samples" / "day=2026-01-01" / "DCGM_FI_DEV_GPU_UTIL.parquet").read_bytes() \
        == b"precious"


def test_ingest_missing_ca_file(tmp_path):
    proc = run_cli("ingest", "--prometheus-url", "https://127.0.0.1:9", "--since", "1h",
                   "--out", str(tmp_path / "o"), "--ca-file", str(tmp_path / "none.pem"),
                   "--retries", "0")
    assert_one_line_error(proc, "CA bundle not found")


def test_replay_non_numeric_pod_column(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n"
                    "p1,1000,1024,one,1000\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    proc = run_cli("replay", "--pods", str(pods), "--nodes", str(nodes), "--policy", "bestfit")
    assert_one_line_error(proc, "num_gpu", "'one'", "row 2")


@pytest.mark.parametrize("mode", ["--colocation", "--power"])
@pytest.mark.parametrize("content", ["", "a,b\n1,2\n"])
def test_replay_mode_table_empty_or_wrong_columns(tmp_path, mode, content):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    table = tmp_path / "t.csv"
    table.write_text(content)
    proc = run_cli("replay", "--pods", str(pods), "--nodes", str(nodes), "--policy", "bestfit",
                   mode, str(table))
    assert_one_line_error(proc, str(table))


def test_replay_compare_checks_tune():
    assert_one_line_error(run_cli("replay", "--compare", "--tune", "-1", "--seeds", "42",
                                  "--policies", "bestfit", "--traces", "gpushare100"), "--tune")


@pytest.mark.parametrize("args", [["--days", "0"], ["--days", "nan"], ["--nodes", "0"]])
def test_train_synthetic_out_of_range_is_one_line(tmp_path, args):
    proc = run_cli("train", "--registry", str(tmp_path / "reg"), "--synthetic", *args,
                   "--out", str(tmp_path / "rep"))
    assert_one_line_error(proc, "synthetic history")
    assert not (tmp_path / "reg").exists()


@pytest.mark.parametrize("args,needle", [
    (["--n-estimators", "0"], "--n-estimators"),
    (["--tolerance", "nan"], "--tolerance"),
    (["--min-coverage", "2"], "--min-coverage"),
])
def test_train_bad_numbers_are_refused_before_fetching(tmp_path, args, needle):
    proc = run_cli("train", "--registry", str(tmp_path / "reg"), "--synthetic", "--days", "1",
                   "--nodes", "1", "--dry-run", "--out", str(tmp_path / "rep"), *args)
    assert_one_line_error(proc, needle)


#: Command lines with an output of the wrong kind: F is an existing file, D an existing
#: directory, X a path that is never reached (the output is refused before any work).
WRONG_KIND_OUTPUTS = [
    "replay --pods X --nodes X --out D",
    "timeline --days 0.1 --policies bestfit --out D",
    "timeline --days 0.1 --policies bestfit --plot D",
    "whatif --jobs X --nodes X --out F",
    "demand backtest --series X --test-start 2026-01-01 --out D",
    "demand forecast --series X --save F",
    "fingerprint build --data X --out D",
    "fingerprint build --data X --out X --predictor F",
    "fingerprint show w --fingerprint X --out D",
    "interference fit --pairs X --model-dir F",
    "interference predict --model-dir X --pairs X --out D",
    "interference evaluate --pairs X --out F",
    "usage series --data X --out D",
    "usage backtest --series X --test-start 2026-01-01 --out D",
    "usage backtest --series X --test-start 2026-01-01 --out X --save F",
    "train --registry X --synthetic --days 1 --nodes 1 --dry-run --out F",
    "train --registry F --synthetic --days 1 --nodes 1 --dry-run",
    "train --registry X --synthetic --days 1 --nodes 1 --dry-run --scratch F",
]


@pytest.mark.parametrize("line", WRONG_KIND_OUTPUTS)
def test_an_output_path_of_the_wrong_kind_is_refused_up_front(tmp_path, line):
    f, d = tmp_path / "afile", tmp_path / "adir"
    f.write_text("keep")
    d.mkdir()
    paths = {"F": str(f), "D": str(d), "X": str(tmp_path / "unused")}
    proc = run_cli(*[paths.get(a, a) for a in line.split()])
    assert_one_line_error(proc, str(d) if " D" in line else str(f), "directory")
    assert f.read_text() == "keep" and list(d.iterdir()) == []


def test_registry_that_does_not_exist_is_not_an_empty_one(tmp_path):
    for sub in ("list", "verify"):
        assert_one_line_error(run_cli("registry", sub, "--registry", str(tmp_path / "nope")),
                              "does not exist")


@pytest.mark.parametrize("value", ["-2", "nan"])
def test_fingerprint_predict_gpus_must_be_positive(tmp_path, value):
    proc = run_cli("fingerprint", "predict", "--predictor", str(tmp_path), "--gpus", value)
    assert_one_line_error(proc, "--gpus")


def test_interference_evaluate_zero_rounds():
    proc = run_cli("interference", "evaluate", "--pairs", "nothing.csv", "--out", "o",
                   "--n-estimators", "0")
    assert_one_line_error(proc, "--n-estimators")


def test_usage_backtest_empty_phases_file(tmp_path):
    series = tmp_path / "s.csv"
    series.write_text("unique_id,ds,y\n" + "".join(
        f"a,2026-01-01T00:{m:02d}:00Z,{m % 7}\n" for m in range(30)))
    phases = tmp_path / "phases.csv"
    phases.write_text("")
    proc = run_cli("usage", "backtest", "--series", str(series), "--test-start",
                   "2026-01-01T00:20:00Z", "--out", str(tmp_path / "p.csv"), "--phases",
                   str(phases))
    assert_one_line_error(proc, "phases file", "empty")


def test_mig_plan_empty_forecast_file(tmp_path):
    fc = tmp_path / "fc.csv"
    fc.write_text("")
    assert_one_line_error(run_cli("mig", "plan", "--demo", "--forecast", str(fc)), "is empty")


@pytest.mark.parametrize("args,needle", [
    (["--log-level", "loud"], "--log-level"),
    (["--max-body-mb", "0"], "--max-body-mb"),
    (["--kubeconfig", "no-such-kubeconfig"], "kubeconfig not found"),
    (["--tls-cert", "no-such.pem", "--tls-key", "no-such.key"], "--tls-cert"),
])
def test_serve_bad_options_fail_before_listening(args, needle):
    snapshot = Path(__file__).resolve().parents[1] / "data" / "mig" / "demo_snapshot.json"
    proc = run_cli("serve", "--snapshot", str(snapshot), "--host", "127.0.0.1", "--port",
                   str(free_port()), *args, timeout=60)
    assert_one_line_error(proc, needle)


@pytest.mark.parametrize("args", [
    ("interference", "predict", "--model-dir", "{d}", "--pairs", "{f}", "--out", "{f}"),
    ("demand", "backtest", "--series", "{f}", "--test-start", "2024-01-01", "--out", "{f}"),
    ("usage", "series", "--data", "{d}", "--out", "{f}"),
    ("fingerprint", "show", "w", "--fingerprint", "{f}", "--out", "{f}"),
    ("replay", "--pods", "{f}", "--out", "{f}"),
])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, args):
    f = tmp_path / "table.csv"
    f.write_text("unique_id,ds,y\nq,2024-01-01,1\n")
    before = f.read_bytes()
    proc = run_cli(*(a.format(d=tmp_path, f=f) for a in args))
    assert_one_line_error(proc, "would overwrite the input")
    assert f.read_bytes() == before


def test_a_new_output_inside_an_input_directory_is_fine(tmp_path):
    from foresight.commands import check_output

    check_output(tmp_path / "new.csv", "--out", inputs={"--data": tmp_path})  # nothing to lose
    (tmp_path / "old.csv").write_text("x\n")
    with pytest.raises(Exception, match="would overwrite the input given as --data"):
        check_output(tmp_path / "old.csv", "--out", inputs={"--data": tmp_path})


def test_a_backwards_seed_range_is_named_not_called_empty():
    from ground.errors import ForesightError
    from simulator.replay.compare import parse_seeds

    assert parse_seeds("2-4,7") == [2, 3, 4, 7]
    with pytest.raises(ForesightError, match="runs backwards"):
        parse_seeds("5-2")
    with pytest.raises(ForesightError, match="empty"):
        parse_seeds(",")
