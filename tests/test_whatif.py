"""`foresight whatif` (issue 29): an ingest of the demo's synthetic cluster and the same history
as CSV give equal results; a small hand-made history's result is pinned; bad input is said
line by line with counts and the run goes on; every plot of report.html has its reading."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foresight.cli import main

DATA = Path(__file__).parent / "fixtures" / "whatif"
TIMING = {"seconds", "cpu_seconds", "replay_seconds", "replay_cpu_seconds",
          "forecast_seconds", "peak_rss_mb", "peak_rss_worker_mb", "workers",
          "source", "report"}


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _run(args: list[str], out: Path, capsys) -> tuple[dict, str]:
    rc = main(["whatif", *args, "--out", str(out)])
    got = capsys.readouterr()
    assert rc == 0, got.err
    return json.loads((out / "whatif.json").read_text()), got.out


def export_csv(data: Path, jobs: Path, nodes: Path) -> None:
    """The history as a user would export it: one row per pod, times as RFC 3339."""
    p = pd.read_parquet(data / "pods.parquet")

    def iso(c):
        return p[c].map(lambda t: "" if pd.isna(t) else t.isoformat())

    pd.DataFrame({"job": p["namespace"] + "/" + p["pod"], "arrival": iso("created"),
                  "start": iso("started"), "finish": iso("finished"), "gpus": p["gpu_request"],
                  "queue": p["queue"], "namespace": p["namespace"], "priority": p["priority"],
                  "workload": p["workload"], "node": p["node"]}).to_csv(jobs, index=False)
    s = pd.read_parquet(data / "samples.parquet", columns=["node", "uuid"]).drop_duplicates()
    s.groupby("node")["uuid"].nunique().rename("gpus").rename_axis("node").reset_index() \
        .to_csv(nodes, index=False)


@pytest.fixture(scope="module")
def demo_history(tmp_path_factory):
    from features.ingest import write_tables
    from training.sources import synthetic

    root = tmp_path_factory.mktemp("whatif")
    h = synthetic(seed=5, days=2.5, nodes=3)  # what `foresight demo` writes, smaller
    write_tables(root / "data", {"samples": h.samples, "pods": h.pods, "queues": h.queues})
    export_csv(root / "data", root / "jobs.csv", root / "nodes.csv")
    return root


def test_ingest_dir_and_csv_export_give_equal_results(demo_history, tmp_path, capsys):
    r = demo_history
    a, out_a = _run(["--data", str(r / "data"), "--right-size", "1", "--no-report"],
                    tmp_path / "a", capsys)
    b, out_b = _run(["--jobs", str(r / "jobs.csv"), "--nodes", str(r / "nodes.csv"),
                     "--right-size", "1", "--no-report", "--workers", "1"], tmp_path / "b",
                    capsys)  # one process here, two there: the same results
    assert [p["policy"] for p in a["policies"]] == ["kube-default", "bestfit", "fgd",
                                                    "foresight", "foresight-reserve",
                                                    "foresight-backfill"]
    assert a["window"]["jobs"] > 100
    assert _strip(a) == _strip(b)
    assert [p["digest"] for p in a["policies"]] == [p["digest"] for p in b["policies"]]
    def body(out: str) -> str:  # the summary less the first line(s): the source's name
        return "History" + out.split("History", 1)[1].split("Replays took")[0]

    assert body(out_a) == body(out_b)


def test_pinned_small_handmade_history(tmp_path, capsys):
    doc, out = _run(["--jobs", str(DATA / "jobs.csv"), "--nodes", str(DATA / "nodes.csv"),
                     "--warmup", "1h", "--right-size", "2", "--no-report"], tmp_path, capsys)
    by = {p["policy"]: p for p in doc["policies"]}
    assert doc["window"]["jobs"] == 11 and doc["window"]["gpus"] == 16
    assert by["kube-default"]["2-4"]["p95_min"] >= 4.7 * 60 * 0.9
    assert job_delays("kube-default")["c"] == 348.0 and job_delays("bestfit")["c"] == 0.0
    pinned = {p: (by[p]["all"]["p50_min"], by[p]["all"]["p95_min"], by[p]["alloc_mean"])
              for p in by}
    assert pinned == PINNED, pinned
    assert doc["pick"]["policy"] == "bestfit" and "foresight" in doc["pick"]["tied"]
    assert doc["right_size"]["spare_gpus"] == 0  # one 4-GPU node fewer: p95 379 > 279 min
    assert doc["gang_baseline"]["policy"] == "kube-default pod-by-pod"
    assert max(len(line) for line in out.splitlines()) <= 80


def job_delays(policy: str) -> dict[str, float]:
    """By hand: the 8-GPU node is busy with x0 all along; kube-default (least allocated)
    spreads a and b over the two 4-GPU nodes, so the 4-GPU job c (12 min in) cannot start
    until one of them is whole again (6 h in: 348 min); bestfit packs a and b on one node and
    c starts on arrival."""
    from features.history_csv import read_csv_history
    from simulator.timeline.engine import run_timeline
    from simulator.whatif.jobs import replay_input

    h = read_csv_history(DATA / "jobs.csv", DATA / "nodes.csv")
    inp = replay_input(h, 3600.0)
    r = run_timeline(inp.nodes, inp.jobs, policy, 0.0, inp.t_end, seed=0)
    return {n: round((s - a) / 60, 1) for n, a, s in zip(h.jobs["job"], inp.jobs.arrival,
                                                         r.start) if a >= 0}


PINNED = {"kube-default": (0.0, 279.0, 80.9), "bestfit": (0.0, 120.0, 84.624),
          "fgd": (0.0, 120.0, 84.624), "foresight": (0.0, 120.0, 84.624),
          "foresight-reserve": (0.0, 120.0, 84.624), "foresight-backfill": (0.0, 120.0, 84.624)}


def test_bad_input_one_line_each_with_counts_and_the_run_goes_on(tmp_path, capsys):
    jobs = tmp_path / "jobs.csv"
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("node,gpus,model\nn1,4,A100\nn2,4,A100\nn3,0,\nn1,8,A100\n")
    jobs.write_text(
        "job,arrival,runtime,gpu_fraction,queue,node\n"
        "a,0,2h,,q1,n1\n"
        "b,600,3 fortnights,,q1,n1\n"      # unknown unit
        "c,1200,90m,0.5,q2,ghost\n"        # a node that is not in the node list
        "d,1800,-600,,q2,n2\n"             # negative run time
        "e,not-a-time,1h,,q2,n2\n"         # unreadable arrival
        "f,3600,1h,,,\n"                   # no queue, no namespace
        "g,4000,2h,,q1,n2\n"
        "h,5000,45min,,q1,n1\n"
        "i,90000,1h,,q1,n1\n")
    doc, out = _run(["--jobs", str(jobs), "--nodes", str(nodes), "--warmup", "10m",
                     "--right-size", "0", "--policies", "kube-default,bestfit",
                     "--no-report"], tmp_path / "o", capsys)
    notes = "\n".join(doc["notes"])
    for pat in (r"problem: 1 values of runtime have an unknown unit \(fortnights\)",
                r"problem: 1 rows ran on nodes missing from the node list \(ghost\)",
                r"problem: 1 rows finish before they start",
                r"problem: 1 values of arrival are not times",
                r"problem: 1 rows without a readable arrival time",
                r"problem: 1 nodes without GPUs",
                r"problem: 1 nodes listed twice \(n1\)",
                r"inferred: 1 rows have neither queue nor namespace",
                r"inferred: 2 rows without a run time"):
        assert re.search(pat, notes), (pat, notes)
    assert "inferred: 8 rows without a GPU count: 1 GPU per pod" in notes
    assert doc["window"]["history_jobs"] == 8  # e left out (said), the rest replayed
    assert "unknown unit (fortnights)" in out.replace("\n  ", " ")


def test_missing_required_column_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "j.csv").write_text("job,gpus,runtime\na,1,1h\n")
    (tmp_path / "n.csv").write_text("node,gpus\nn1,8\n")
    rc = main(["whatif", "--jobs", str(tmp_path / "j.csv"), "--nodes", str(tmp_path / "n.csv"),
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "lacks column 'arrival'" in err and len(err.strip().splitlines()) == 1


class _Figures(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.figs: list[dict] = []
        self.tags: set[str] = set()
        self._cap = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "figure":
            self.figs.append({"img": 0, "caption": ""})
        elif tag == "img" and self.figs:
            self.figs[-1]["img"] += 1
            assert dict(attrs)["src"].startswith("data:image/png;base64,")
        elif tag == "figcaption":
            self._cap = self.figs[-1]

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self._cap = None

    def handle_data(self, data):
        if self._cap is not None:
            self._cap["caption"] += data


def test_report_every_plot_has_its_reading(tmp_path, capsys):
    _run(["--jobs", str(DATA / "jobs.csv"), "--nodes", str(DATA / "nodes.csv"),
          "--warmup", "1h", "--right-size", "1"], tmp_path, capsys)
    p = _Figures()
    p.feed((tmp_path / "report.html").read_text())
    assert len(p.figs) >= 7
    for f in p.figs:
        assert f["img"] == 1 and len(f["caption"].strip()) > 20, f
        assert "\n" not in f["caption"].strip()
    assert "script" not in p.tags


def test_summary_fits_80_columns_on_the_demo_history(demo_history, tmp_path, capsys):
    _, out = _run(["--data", str(demo_history / "data"), "--right-size", "0", "--no-report",
                   "--policies", "kube-default,foresight"], tmp_path, capsys)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "\x1b[" not in out  # no colour codes in a pipe
    assert np.isfinite(json.loads((tmp_path / "whatif.json").read_text())["peak_rss_mb"])


@pytest.mark.skipif(__import__("shutil").which("prometheus") is None
                    or __import__("shutil").which("promtool") is None,
                    reason="prometheus/promtool not installed (make test installs them)")
def test_prometheus_url_ingest_then_replay_equals_its_csv_export(tmp_path, capsys):
    """One command against a real Prometheus holding the demo generator's cluster; the pods
    it ingested, exported to CSV, give the same result."""
    from features.ingest_store import read_partitioned_samples
    from features.openmetrics import backfill, write_openmetrics
    from promserver import PrometheusServer
    from simulator import SimConfig, generate_cluster

    end = pd.Timestamp.now(tz="UTC").floor("h") - pd.Timedelta(hours=1)
    cl = generate_cluster(SimConfig(seed=5, start=end - pd.Timedelta(days=2.5), days=2.5,
                                    step_s=60, nodes=3, gpus_per_node=4, load=1.0,
                                    metrics=("DCGM_FI_DEV_GPU_UTIL",), fractional_share=0.6))
    write_openmetrics(tmp_path / "h.om", samples=cl.samples, pods=cl.pods, queues=cl.queues,
                      pod_step_s=600)
    # kube-state-metrics' allocatable GPUs per node, which the generator does not write
    om = (tmp_path / "h.om").read_text()
    assert om.endswith("# EOF\n")
    rows = [f'kube_node_status_allocatable{{node="{n}",resource="nvidia_com_gpu"}} 4 '
            f"{int(t.timestamp())}" for n in sorted(cl.samples["node"].unique())
            for t in pd.date_range(end - pd.Timedelta(days=2), end, freq="6h")]
    (tmp_path / "h.om").write_text(om[:-len("# EOF\n")] + "# TYPE kube_node_status_allocatable"
                                   " gauge\n" + "\n".join(rows) + "\n# EOF\n")
    backfill(tmp_path / "h.om", tmp_path / "tsdb")
    with PrometheusServer(tmp_path / "tsdb", retention="15d") as prom:
        a, _ = _run(["--prometheus-url", prom.url, "--since", "3d", "--end", end.isoformat(),
                     "--right-size", "1", "--no-report"], tmp_path / "a", capsys)
    ing = tmp_path / "a" / "ingest"
    nodes = pd.read_parquet(ing / "nodes.parquet")  # from kube_node_status_allocatable
    assert len(nodes) == 3 and (nodes["gpus"] == 4).all()
    read_partitioned_samples(ing).to_parquet(ing / "samples.parquet")
    export_csv(ing, tmp_path / "jobs.csv", tmp_path / "nodes.csv")
    b, _ = _run(["--jobs", str(tmp_path / "jobs.csv"), "--nodes", str(tmp_path / "nodes.csv"),
                 "--end", end.isoformat(), "--right-size", "1", "--no-report"],
                tmp_path / "b", capsys)
    assert a["window"]["jobs"] > 50 and a["window"]["gpus"] == 12
    assert _strip(a) == _strip(b)


def test_ingest_gangs_from_names_or_the_gang_column(tmp_path):
    from features.history_ingest import read_ingest_history

    t = pd.Timestamp("2026-02-02", tz="UTC")
    names = ["ddp-worker-0", "ddp-worker-1", "ddp-worker-2", "solo-0", "nb-master-0"]
    pods = pd.DataFrame({"namespace": "x", "pod": names, "node": "", "queue": "q",
                         "priority": 0, "workload": "w", "gpu_request": [8, 8, 8, 1, 1],
                         "created": [t] * 5, "started": [t] * 5,
                         "finished": [t + pd.Timedelta(hours=1)] * 5})
    pods.to_parquet(tmp_path / "pods.parquet")
    pd.DataFrame({"node": ["a", "b", "c"], "gpus": 8, "model": "H100"}).to_parquet(
        tmp_path / "nodes.parquet")
    h = read_ingest_history(tmp_path)
    assert sorted(h.jobs["pods"]) == [1, 1, 3]  # nb-master-0 alone is no gang
    assert any("pods are in 1 gangs inferred from their names" in n for n in h.notes.render())
    pods["gang"] = ["", "", "", "g1", "g1"]  # a gang label wins over names
    pods.to_parquet(tmp_path / "pods.parquet")
    assert sorted(read_ingest_history(tmp_path).jobs["pods"]) == [1, 1, 1, 2]


def test_backfill_schedule_from_the_shared_fit_equals_its_own_fit():
    from features.history_csv import read_csv_history
    from simulator.timeline.forecast import ReservedSchedule
    from simulator.whatif.jobs import replay_input

    inp = replay_input(read_csv_history(DATA / "jobs.csv", DATA / "nodes.csv"), 3600.0)
    kw = dict(horizon=3, quantile="p90", reserve_for="big")
    own = ReservedSchedule(inp.jobs, "forecast", 0.0, inp.t_end, decay_bins=6, **kw)
    shared = ReservedSchedule(inp.jobs, "forecast", 0.0, inp.t_end, **kw).with_decay(6)
    assert own.values.any() and np.array_equal(own.values, shared.values)


def test_nodes_and_gangs_from_kube_state_metrics():
    from features.history_ingest import gangs_from_source, nodes_from_source

    class Source:  # what PrometheusSource.query returns: one row per series, labels as columns
        def query(self, expr, at):
            if "kube_node_status_allocatable" in expr:
                return pd.DataFrame({"node": ["a", "b", "a"], "value": [8.0, 4.0, 8.0]})
            if "kube_node_labels" in expr:
                return pd.DataFrame({"node": ["a"], "label_nvidia_com_gpu_product": ["H100"]})
            return pd.DataFrame({"namespace": ["x", "x", "y"], "pod": ["p", "q", "r"],
                                 "label_scheduling_x_k8s_io_pod_group": ["pg", "pg", None],
                                 "label_volcano_sh_job_name": [None, None, "vj"]})

    n = nodes_from_source(Source(), None, 60)
    assert n.to_dict("list") == {"node": ["a", "b"], "gpus": [8.0, 4.0], "model": ["H100", ""]}
    g = gangs_from_source(Source(), None, 60)
    assert g["gang"].tolist() == ["x/pg", "x/pg", "y/vj"]


@pytest.mark.parametrize("values, log", [([[0.0, 0.0], [0.0, np.nan]], False),
                                         ([[1.0, 2.0], [1.5, 400.0]], True)])
def test_report_bars_without_a_positive_value_warn_nothing(values, log):
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulator.whatif.report import _bars

    fig, ax = plt.subplots()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "All-NaN slice" printed on every quiet run
        _bars(ax, ["a", "b"], ["x", "y"], np.array(values), "wait")
    assert (ax.get_yscale() == "symlog") == log
    plt.close(fig)


def test_a_node_over_the_gpu_bound_in_a_table_is_a_problem_left_out():
    from features.history import Notes, node_table

    notes = Notes()
    got = node_table(pd.DataFrame({"node": ["a", "b"], "gpus": [8, 1e9]}), notes)
    assert got["node"].tolist() == ["a"]  # not an array of a billion GPUs in the replay
    assert any("more than 64 GPUs (b)" in t for _, _, t in notes.lines), notes.lines
