"""Bad input to replay, timeline, whatif, ingest and backfill found by a sweep: a GPU count
that would size arrays past memory, a pod no node can take, a value of the wrong type, a
range or step no pull can use, an output that cannot be created. One line, exit 2, before
the work (or, for the pod, a warning naming its row and a replay that does not collapse)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cli_support import one_line
from foresight.cli import main

FIX = Path(__file__).parent / "fixtures" / "whatif"
HEAD = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


@pytest.fixture
def openb(tmp_path):
    (tmp_path / "nodes.csv").write_text(HEAD + "".join(
        f"n{i},64000,262144,{1000000 if i == 1 else 8},V100\n" for i in range(4)))
    (tmp_path / "pods.csv").write_text(PODS + "".join(
        f"p{i},1000,1024,1,{200 + 50 * (i % 10)}\n" for i in range(30)))
    return tmp_path


def test_a_node_with_a_million_gpus_is_refused_by_replay_and_timeline(openb, capsys):
    nodes = str(openb / "nodes.csv")
    for args in (["replay", "--policy", "bestfit", "--pods", str(openb / "pods.csv")],
                 ["timeline", "--days", "0.1", "--policies", "bestfit"]):
        one_line(capsys, main([*args, "--nodes", nodes]), nodes, "column gpu",
                 "1000000", "data row 2", "at most 64")


def test_whatif_refuses_a_node_with_a_billion_gpus(tmp_path, capsys):
    nodes = pd.read_csv(FIX / "nodes.csv", dtype=str)
    nodes.loc[2, "gpus"] = "1e9"
    nodes.to_csv(tmp_path / "n.csv", index=False)
    one_line(capsys, main(["whatif", "--jobs", str(FIX / "jobs.csv"), "--nodes",
                           str(tmp_path / "n.csv"), "--warmup", "1h", "--right-size", "0",
                           "--workers", "1", "--no-report", "--out", str(tmp_path / "w")]),
             "n.csv", "column gpus", "1e9", "data row 3", "at most 64")


def test_whatif_data_with_a_gpu_request_that_is_not_a_number(tmp_path, capsys):
    data = tmp_path / "d"
    data.mkdir()
    t = pd.to_datetime(["2026-01-01T00:00", "2026-01-01T01:00"], utc=True)
    pd.DataFrame({"namespace": "a", "pod": ["p1", "p2"], "node": "n1",
                  "gpu_request": ["1", "1.0x"], "created": t, "started": t,
                  "finished": t + pd.Timedelta("2h")}).to_parquet(data / "pods.parquet")
    pd.DataFrame({"node": ["n1"], "gpus": [8]}).to_parquet(data / "nodes.parquet")
    one_line(capsys, main(["whatif", "--data", str(data), "--warmup", "1h", "--right-size",
                           "0", "--workers", "1", "--no-report", "--out", str(tmp_path / "w")]),
             "pods.parquet", "column 'gpu_request'", "row 2", "'1.0x'", "not a number")


def test_a_gpus_cell_that_is_not_a_number_is_a_problem_not_one_gpu(tmp_path):
    from features.history_csv import read_csv_history

    jobs = pd.read_csv(FIX / "jobs.csv", dtype=str)
    jobs.loc[3, "gpus"] = "abc"
    jobs.to_csv(tmp_path / "jobs.csv", index=False)
    lines = read_csv_history(tmp_path / "jobs.csv", FIX / "nodes.csv").notes.lines
    assert not [t for k, n, t in lines if "without a GPU count" in t], lines
    assert ("problem", 1) in [(k, n) for k, n, t in lines if "no readable GPU request" in t]


def test_a_pod_larger_than_every_node_is_named_and_left_out_of_the_tuning(openb, capsys):
    (openb / "nodes.csv").write_text(HEAD + "".join(f"n{i},64000,262144,8,V100\n"
                                                    for i in range(4)))
    pods = pd.read_csv(openb / "pods.csv")
    pods.loc[4, "num_gpu"] = 1000000
    pods.to_csv(openb / "big.csv", index=False)
    assert main(["replay", "--policy", "bestfit", "--pods", str(openb / "big.csv"), "--nodes",
                 str(openb / "nodes.csv"), "--out", str(openb / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "data row 5" in err and "num_gpu 1000000" in err and len(err.splitlines()) == 1, err
    got = json.loads((openb / "r.json").read_text())
    # 32 GPUs x 1.3 of pods asking 0.2-0.65 GPU: dozens, not the pods before the big one
    assert got["unplaceable"] == 1 and got["pods"] > 40 and got["alloc_at_100"] > 50, got


@pytest.fixture
def no_connect(monkeypatch):
    """A check that is missing would query Prometheus: fail instead of retrying."""
    def source(*a, **k):
        raise AssertionError("PrometheusSource built: the bad input was not refused first")
    monkeypatch.setattr("foresight.commands.ingest.PrometheusSource", source)


@pytest.mark.parametrize("args,needles", [
    (["--since", "1h", "--step", "0s"], ("--step must be > 0",)),
    (["--since", "100000d"], ("before 1970",)),
    (["--since", "1000000d"], ("--since 1000000d", "before year 1")),
    (["--start", "1900-01-01"], ("1900-01-01", "before 1970")),
    (["--since", "1h", "--step", "2h"], ("step of 7200 s is longer than the range",)),
    (["--since", "500d"], ("500 days", "at most 400")),
    (["--since", "300d", "--step", "1s"], ("points per series", "raise --step")),
    (["--out", "/proc/foresight-x"], ("--out /proc/foresight-x", "cannot write in /proc")),
])
def test_ingest_refuses_a_range_step_or_out_before_connecting(tmp_path, capsys, no_connect,
                                                              args, needles):
    argv = ["ingest", "--prometheus-url", "http://127.0.0.1:9", "--out", str(tmp_path / "i")]
    assert main([*argv, *args]) == 2
    one_line(capsys, 2, *needles)
    assert not (tmp_path / "i").exists()


def test_backfill_names_tsdb_when_it_cannot_be_created(tmp_path, capsys):
    om = tmp_path / "m.om"
    om.write_text("# TYPE x gauge\nx 1 1700000000\n# EOF\n")
    assert main(["backfill", "--openmetrics", str(om), "--tsdb", "/proc/foresight-x"]) == 2
    line = one_line(capsys, 2, "--tsdb /proc/foresight-x", "cannot write")
    assert "backfill-" not in line  # not promtool's staging directory


def test_timeline_nodes_that_is_a_directory(tmp_path, capsys):
    one_line(capsys, main(["timeline", "--nodes", str(tmp_path)]), "--nodes", str(tmp_path),
             "is a directory")
