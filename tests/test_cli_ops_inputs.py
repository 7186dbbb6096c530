"""Bad input to `serve`, `registry` and `ingest`: one `error:` line, a non-zero exit, nothing
stored changed and no server started."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from artifacts.registry import Registry
from foresight.cli import main
from netutil import free_port

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "mig" / "demo_snapshot.json"
FIELDS = {"features": ["x"], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
          "data_hash": "abc", "metrics": {"primary": "mae", "mae": 0.1}, "code_version": "test"}


def one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def no_server(monkeypatch):
    """A check that is missing would start a server: fail instead of hanging."""
    def run(*a, **k):
        raise AssertionError("uvicorn.run reached: the bad input was not refused")
    monkeypatch.setattr("uvicorn.run", run)


def serve(*args: str) -> int:
    return main(["serve", "--snapshot", str(SNAPSHOT), "--host", "127.0.0.1",
                 "--port", str(free_port()), *args])


# ------------------------------------------------------------------ serve --config
@pytest.mark.parametrize("text,needles", [
    ("weights: 5\n", ("weights must be a mapping",)),
    ("fragmentation: 3\n", ("fragmentation must be a mapping",)),
    ("runtime: 7\n", ("runtime must be a mapping",)),
    ("power:\n  rack_caps_w: 5\n", ("power.rack_caps_w must be a mapping",)),
    ("nosuchweight: 5\n", ("unknown key 'nosuchweight'", "known: ", "weights")),
    ("demand:\n  serie: x.csv\n", ("unknown key demand.serie", "known: ", "series")),
    ("power:\n  rack_caps_w: {r1: 9000}\n  idle_watts: 50\n", ("unknown key power.idle_watts",)),
    ("carbon:\n  intensity: f.csv\n", ("unknown key carbon.intensity",)),
    ("demand:\n  prometheus_url: prometheus:9090\n", ("demand.prometheus_url", "http(s)://")),
    ("demand:\n  history: forever\n", ("demand.history 'forever'", "8d")),
    ("demand:\n  reserve_queues: prod\n", ("demand.reserve_queues must be a list",)),
    ("demand:\n  reserve_quantile: p95\n", ("demand.reserve_quantile",)),
    ("demand:\n  series: s.csv\n  prometheus_url: http://p:9090\n", ("give one",)),
])
def test_serve_config_section_of_the_wrong_shape(tmp_path, capsys, no_server, text, needles):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert serve("--config", str(cfg)) == 2
    one_line_error(capsys, f"config {cfg}", *needles)


def test_serve_config_directory_or_not_utf8(tmp_path, capsys, no_server):
    assert serve("--config", str(tmp_path)) == 2
    one_line_error(capsys, f"cannot read config {tmp_path}", "directory")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("weights: {memory_fit: 1}  # d\xe9faut\n".encode("latin-1"))
    assert serve("--config", str(bad)) == 2
    one_line_error(capsys, f"config {bad}", "not UTF-8")


# ------------------------------------------------------------------ serve inputs
def test_serve_snapshot_that_is_a_directory(tmp_path, capsys, no_server):
    assert main(["serve", "--snapshot", str(tmp_path), "--port", str(free_port())]) == 2
    one_line_error(capsys, "--snapshot", str(tmp_path), "directory")


@pytest.mark.parametrize("name,write", [
    ("abc.csv", lambda p: p.write_text("a,b,c\n1,2,3\n")),
    ("abc.parquet", lambda p: __import__("pandas").DataFrame(
        {"a": [1], "b": [2], "c": [3]}).to_parquet(p)),
])
def test_serve_demand_series_with_wrong_columns(tmp_path, capsys, no_server, name, write):
    series = tmp_path / name
    write(series)
    assert serve("--only", "api", "--demand-series", str(series)) == 2
    one_line_error(capsys, "--demand-series", name, "lacks columns")


def test_serve_port_in_use(capsys, no_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["serve", "--snapshot", str(SNAPSHOT), "--host", "127.0.0.1",
                   "--port", str(port)])
    assert rc == 2
    one_line_error(capsys, f"cannot listen on 127.0.0.1:{port}", "in use")


# ------------------------------------------------------------------ registry
def _published(tmp_path: Path) -> Path:
    src = tmp_path / "m"
    src.mkdir()
    (src / "model.json").write_text('{"a": 1}')
    root = tmp_path / "reg"
    Registry(root).publish("usage", src, FIELDS)
    return root


def test_registry_verify_refuses_a_directory_that_is_not_a_registry(tmp_path, capsys):
    assert main(["registry", "verify", "--registry", str(tmp_path)]) == 2
    one_line_error(capsys, str(tmp_path), "not a Foresight registry")
    assert list(tmp_path.iterdir()) == []


def test_registry_current_pointer_that_is_a_directory(tmp_path, capsys):
    root = _published(tmp_path)
    ptr = root / "models" / "usage" / "current"
    ptr.unlink()
    ptr.mkdir()
    assert main(["registry", "list", "--registry", str(root)]) == 0
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if "usage" in ln and "current" in ln]
    assert row and "pointer is a directory" in row[0], out
    with pytest.raises(SystemExit) as exc:
        main(["registry", "verify", "--registry", str(root)])
    assert exc.value.code == 1
    captured = capsys.readouterr()
    assert f"FAIL {ptr}: pointer is a directory" in captured.out and not captured.err
    assert ptr.is_dir() and list(ptr.iterdir()) == []


def test_registry_list_flags_a_pointer_to_a_missing_version(tmp_path, capsys):
    root = _published(tmp_path)
    ptr = root / "models" / "usage" / "current"
    ptr.write_text(json.dumps({"version": "7"}))
    assert main(["registry", "list", "--registry", str(root)]) == 0
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if "usage" in ln and "current" in ln]
    assert row and "points at version 7, which does not exist" in row[0], out
    assert "*" not in out  # no version is in service
    ptr.write_text("7\n")  # not JSON at all: listed too, not a one-line abort
    assert main(["registry", "list", "--registry", str(root)]) == 0
    assert "pointer is not valid JSON" in capsys.readouterr().out


# ------------------------------------------------------------------ ingest
@pytest.mark.parametrize("args,needle,code", [
    (["--timeout", "-1"], "--timeout -1.0: must be > 0", 2),
    (["--timeout", "0"], "--timeout 0.0: must be > 0", 2),
    (["--timeout", "nan"], "--timeout nan: must be > 0", 2),
    (["--retries=-3"], "--retries", 2),
])
def test_ingest_timeout_and_retries_bounds(tmp_path, capsys, args, needle, code):
    out = tmp_path / "o"
    rc = main(["ingest", "--prometheus-url", f"http://127.0.0.1:{free_port()}", "--since", "1h",
               "--out", str(out), *args])
    assert rc == code
    line = one_line_error(capsys, needle)
    assert "Prometheus" not in line
    assert not out.exists()


def test_timeline_help_names_every_policy_all_runs():
    import inspect

    from foresight.commands.timeline import timeline_cmd
    from simulator.timeline.policies import POLICIES

    opt = inspect.signature(timeline_cmd).parameters["policies"].default
    listed = {p.strip(" .") for p in opt.help.split(":", 1)[1].split(";")[0].split(",")}
    assert listed == set(POLICIES)
