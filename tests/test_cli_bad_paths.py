"""Bad paths and values to the replay, simulate, train, whatif and MIG commands (found by a CLI
fuzz): one line and a non-zero exit, found before the work, and nothing stored written over."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from foresight.cli import main
from cli_support import one_line

FIX = Path(__file__).parent / "fixtures" / "whatif"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,64000,262144,4,V100\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,2,1000\n"


@pytest.fixture
def csvs(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path


@pytest.mark.parametrize("args", [["simulate", "--out", "{t}/s", "--seed", "-1"],
                                  ["replay", "--pods", "{t}/pods.csv", "--nodes",
                                   "{t}/nodes.csv", "--seed", "-1"],
                                  ["timeline", "--nodes", "{t}/nodes.csv", "--seeds=-1"],
                                  ["timeline", "--nodes", "{t}/nodes.csv", "--seeds", "0-5000"]])
def test_negative_or_runaway_seeds_are_refused(csvs, capsys, args):
    one_line(capsys, main([a.format(t=csvs) for a in args]), "seed")


def test_an_output_where_nothing_can_be_created_is_refused_before_the_run(csvs, capsys):
    # /proc takes no new file, even from root (a chmod-ed directory does not stop root)
    one_line(capsys, main(["replay", "--pods", str(csvs / "pods.csv"), "--nodes",
                           str(csvs / "nodes.csv"), "--out", "/proc/foresight-x/r.json"]),
             "--out", "cannot write in /proc")


def test_an_os_error_deeper_in_is_one_line(monkeypatch, capsys, tmp_path):
    import foresight.commands.ingest as ingest

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied", "/srv/tsdb")

    monkeypatch.setattr(ingest, "backfill", denied)
    om = tmp_path / "h.om"
    om.write_text("# EOF\n")
    assert one_line(capsys, main(["backfill", "--openmetrics", str(om), "--tsdb",
                                  str(tmp_path / "t")])) == "error: /srv/tsdb: Permission denied"


def test_simulate_keeps_out_of_a_foreign_directory_and_drops_its_own_stale_export(tmp_path,
                                                                                  capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    one_line(capsys, main(["simulate", "--out", str(mine), "--days", "0.05", "--nodes", "1"]),
             "not empty", "no Foresight dataset")
    assert (mine / "notes.txt").read_text() == "precious"
    sim = tmp_path / "sim"
    assert main(["simulate", "--out", str(sim), "--days", "0.05", "--nodes", "1",
                 "--gpus-per-node", "1", "--openmetrics"]) == 0
    assert (sim / "history.om").is_file()
    assert main(["simulate", "--out", str(sim), "--days", "0.05", "--nodes", "1",
                 "--gpus-per-node", "1", "--seed", "3"]) == 0
    assert not (sim / "history.om").exists()  # it described the pods of the earlier run
    capsys.readouterr()
    one_line(capsys, main(["simulate", "--out", str(tmp_path / "x"), "--metrics", ","]),
             "--metrics")


def test_timeline_refuses_one_file_for_out_and_plot(csvs, capsys):
    same = csvs / "same.png"
    one_line(capsys, main(["timeline", "--nodes", str(csvs / "nodes.csv"), "--days", "0.1",
                           "--policies", "bestfit", "--out", str(same), "--plot", str(same)]),
             "--out and --plot")


@pytest.mark.parametrize("table, row, needle", [
    ("nodes", "n2,64000,262144,-4,V100", "column gpu has -4"),
    ("nodes", "n2,64000,262144,1.5,V100", "column gpu has 1.5"),
    ("pods", "p2,1000,1024,99999999999999999999,1000", "column num_gpu"),
])
def test_replay_counts_must_be_whole_and_not_negative(csvs, capsys, table, row, needle):
    with (csvs / f"{table}.csv").open("a") as fh:
        fh.write(row + "\n")
    one_line(capsys, main(["replay", "--pods", str(csvs / "pods.csv"), "--nodes",
                           str(csvs / "nodes.csv"), "--policy", "bestfit"]), needle)


def test_replay_names_a_directory_given_as_a_csv(csvs, capsys):
    one_line(capsys, main(["replay", "--pods", str(csvs), "--nodes", str(csvs / "nodes.csv")]),
             "is a directory")


def test_whatif_says_which_job_values_it_could_not_use(tmp_path):
    from features.history_csv import read_csv_history

    jobs = pd.read_csv(FIX / "jobs.csv", dtype=str)
    jobs.loc[1, "gpu_fraction"] = "7"
    jobs.loc[2, "mig_profile"] = "9g.999gb"
    jobs.to_csv(tmp_path / "jobs.csv", index=False)
    said = "\n".join(read_csv_history(tmp_path / "jobs.csv", FIX / "nodes.csv").notes.render())
    assert "1 values of gpu_fraction / gpu_milli are not a share of one GPU" in said
    assert "1 values of mig_profile are not a profile like 1g.10gb" in said


def test_a_corrupt_parquet_file_is_named(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["simulate", "--out", str(data), "--days", "0.05", "--nodes", "1",
                 "--gpus-per-node", "1"]) == 0
    (data / "pods.parquet").write_bytes(b"x\n")
    capsys.readouterr()
    one_line(capsys, main(["whatif", "--data", str(data), "--warmup", "1h", "--out",
                           str(tmp_path / "w"), "--no-report"]),
             "pods.parquet: not a readable Parquet file")
    one_line(capsys, main(["whatif", "--data", str(data / "ingest.json"), "--out",
                           str(tmp_path / "w")]), "--data", "not a directory")


def test_mig_plan_names_a_forecast_profile_no_gpu_has_and_a_directory(tmp_path, capsys):
    demo = Path(__file__).resolve().parents[1] / "data" / "mig"
    fc = pd.read_csv(demo / "demo_forecast.csv")
    fc.loc[0, "unique_id"] = "inference|mig:99g.5gb"
    fc.to_csv(tmp_path / "fc.csv", index=False)
    one_line(capsys, main(["mig", "plan", "--snapshot", str(demo / "demo_snapshot.json"),
                           "--forecast", str(tmp_path / "fc.csv")]), "99g.5gb",
             "not a MIG profile")
    shutil.copy(demo / "demo_snapshot.json", tmp_path / "snap.json")
    one_line(capsys, main(["mig", "plan", "--snapshot", str(tmp_path), "--forecast",
                           str(tmp_path / "fc.csv")]), "--snapshot", "is a directory")


def test_check_output_guards_models_images_and_inputs_inside_an_output(tmp_path):
    import json

    from foresight.commands import check_output, distinct_outputs
    from ground.errors import ForesightError

    usage = tmp_path / "usage"
    usage.mkdir()
    (usage / "manifest.json").write_text(json.dumps({"kind": "usage"}))
    check_output(usage, "--save", directory=True, model="usage")  # the earlier run's: replaced
    with pytest.raises(ForesightError, match="holds a usage model, not a demand model"):
        check_output(usage, "--save", directory=True, model="demand")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "series.csv").write_text("unique_id,ds,y\n")
    with pytest.raises(ForesightError, match="holds other files"):
        check_output(tmp_path / "mine", "--save", directory=True, model="demand")
    with pytest.raises(ForesightError, match="would overwrite the input given as --series"):
        check_output(tmp_path / "mine", "--save", directory=True,
                     inputs={"--series": tmp_path / "mine" / "series.csv"})
    check_output(tmp_path / "new", "--save", directory=True, model="demand")
    with pytest.raises(ForesightError, match="an image path ends in one of .png"):
        check_output(tmp_path / "plot.txt", "--plot", image=True)
    check_output(tmp_path / "plot.PNG", "--plot", image=True)
    with pytest.raises(ForesightError, match="--out and --save both name"):
        distinct_outputs({"--out": tmp_path / "a.csv", "--save": tmp_path / "." / "a.csv"})


def test_demand_backtest_checks_its_default_plot_before_writing(tmp_path, capsys):
    series = tmp_path / "s.png"  # an input that happens to sit where the default plot goes
    series.write_text("unique_id,ds,y\nq,2026-01-01T00:00:00Z,1\n")
    one_line(capsys, main(["demand", "backtest", "--series", str(series), "--test-start",
                           "2026-01-01", "--out", str(tmp_path / "s.csv")]),
             "would overwrite the input given as --series")
    assert series.read_text().startswith("unique_id")


# --- second fuzz round ---------------------------------------------------------------------

def test_second_round_values_are_refused_in_one_line(tmp_path, capsys):
    one_line(capsys, main(["simulate", "--out", str(tmp_path / "s"), "--days", "1e-9"]),
             "shorter than two samples")
    one_line(capsys, main(["whatif", "--jobs", str(FIX / "jobs.csv"), "--nodes",
                           str(FIX / "nodes.csv"), "--end", "3000-01-01T00:00:00Z",
                           "--out", str(tmp_path / "w")]), "check --end")
    one_line(capsys, main(["whatif", "--prometheus-url", "notaurl", "--since", "1h",
                           "--out", str(tmp_path / "w2")]), "invalid Prometheus URL")
    for opt in ("--threads", "--group-gpus", "--step"):
        one_line(capsys, main(["train", "--registry", str(tmp_path / "r"), "--synthetic",
                               opt, "0", "--dry-run", "--out", str(tmp_path / "o")]), opt)


def test_runtime_backtest_names_rows_a_run_time_cannot_come_from(tmp_path, capsys):
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase," \
           "creation_time,deletion_time,scheduled_time\n"
    ok = "".join(f"p{i},1000,1024,1,1000,,LS,Running,{i * 60},{i * 60 + 600},{i * 60}\n"
                 for i in range(20))
    for row, says in (("px,1000,1024,1,1000,,LS,Running,5000,100,5000", "deleted before"),
                      ("px,1000,1024,-4,0,,LS,Running,5000,6000,5000", "counts >= 0")):
        (tmp_path / "ob.csv").write_text(head + ok + row + "\n")
        one_line(capsys, main(["runtime", "backtest", "--openb", str(tmp_path / "ob.csv")]),
                 "data row 21", says)


def test_whatif_leaves_no_earlier_report_beside_a_new_result(tmp_path):
    out = tmp_path / "w"
    out.mkdir()
    (out / "report.html").write_text("<html>an earlier run</html>")
    assert main(["whatif", "--jobs", str(FIX / "jobs.csv"), "--nodes", str(FIX / "nodes.csv"),
                 "--policies", "bestfit", "--right-size", "0", "--workers", "1",
                 "--no-report", "--out", str(out), "--warmup", "1h"]) == 0
    assert (out / "whatif.json").is_file() and not (out / "report.html").exists()


def test_mig_forecast_with_a_byte_order_mark_reads(tmp_path, capsys):
    demo = Path(__file__).resolve().parents[1] / "data" / "mig"
    (tmp_path / "fc.csv").write_bytes(b"\xef\xbb\xbf" + (demo / "demo_forecast.csv").read_bytes())
    assert main(["mig", "plan", "--snapshot", str(demo / "demo_snapshot.json"), "--forecast",
                 str(tmp_path / "fc.csv"), "--json"]) == 0
    assert '"demand"' in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(make test installs Debian's prometheus)")
def test_backfill_that_writes_no_block_from_samples_is_an_error(tmp_path, capsys):
    om = tmp_path / "neg.om"
    om.write_text('# TYPE m gauge\nm{a="1"} 1 -5\n# EOF\n')
    one_line(capsys, main(["backfill", "--openmetrics", str(om), "--tsdb", str(tmp_path / "t")]),
             "wrote no TSDB block")
