"""OpenMetrics text: write the tidy tables as exporters would have, read them back, backfill.

The file is what `promtool tsdb create-blocks-from openmetrics` accepts: every family written
once and contiguously, series sorted by time, timestamps in seconds, `# EOF` last with no byte
after it. Every family is typed `gauge`: OpenMetrics counters need a `_total` sample suffix that
dcgm-exporter's names (e.g. `..._VOL_TOTAL`) do not have, and a gauge keeps the value exact.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Iterable

import numpy as np
import pandas as pd

from features import schema
from features.catalog import CATALOG, LabelConfig
from ground.errors import ForesightError


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs if v != "")
    return "{" + inner + "}" if inner else ""


def _fmt(values: np.ndarray) -> list[str]:
    # repr() is the shortest string that parses back to the same float: exact round trip.
    return [repr(float(v)) for v in values]


def _write_series(out: IO[str], name: str, labels: str, ts_s: np.ndarray, values: np.ndarray) -> int:
    ts_txt = [repr(float(t)) if t != int(t) else str(int(t)) for t in ts_s]
    prefix = f"{name}{labels} "
    out.write("".join(f"{prefix}{v} {t}\n" for v, t in zip(_fmt(values), ts_txt)))
    return len(ts_txt)


def _family_header(out: IO[str], name: str) -> None:
    help_ = CATALOG[name].help if name in CATALOG else name
    out.write(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")


def _seconds(ts: pd.Series) -> np.ndarray:
    ts = pd.to_datetime(ts, utc=True)
    return (ts - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def write_gpu_samples(out: IO[str], samples: pd.DataFrame, labels: LabelConfig) -> int:
    """Write the GPU sample table as dcgm-exporter families. Returns the sample count."""
    n = 0
    samples = samples.sort_values(["metric", "node", "gpu", "namespace", "pod", "ts"], kind="stable")
    for metric, fam in samples.groupby("metric", sort=True):
        _family_header(out, metric)
        for (node, gpu, uuid, ns, pod), s in fam.groupby(["node", "gpu", "uuid", "namespace", "pod"],
                                                         sort=True):
            lab = _labels([(labels.gpu, gpu), (labels.uuid, uuid), (labels.node, node),
                           (labels.namespace, ns), (labels.pod, pod)])
            n += _write_series(out, metric, lab, _seconds(s["ts"]), s["value"].to_numpy())
    return n


def pod_series(pods: pd.DataFrame, labels: LabelConfig, step_s: float,
               end: pd.Timestamp) -> dict[str, list[tuple[str, np.ndarray, np.ndarray]]]:
    """The kube-state-metrics series a pod table implies, sampled every `step_s` while each pod exists.

    Returns {family: [(label string, ts seconds, values)]}.
    """
    fams: dict[str, list] = {}
    end_s = pd.Timestamp(end).timestamp()
    for p in pods.itertuples(index=False):
        created = p.created.timestamp()
        last = p.finished.timestamp() if not pd.isna(p.finished) else end_s
        if last < created:
            continue
        # The grid plus both ends, so that even a pod shorter than one step leaves its series.
        grid = np.unique(np.concatenate([[created], np.arange(np.ceil(created / step_s) * step_s,
                                                              last, step_s), [last]]))
        one = np.ones(len(grid))
        base = [(labels.namespace, p.namespace), (labels.pod, p.pod)]
        fams.setdefault("kube_pod_info", []).append(
            (_labels(base + [(labels.pod_node, p.node), ("priority_class", str(int(p.priority)))]), grid, one))
        wl = [(labels.workload[0], p.workload)] if labels.workload else []
        fams.setdefault("kube_pod_labels", []).append(
            (_labels(base + [(labels.queue, p.queue)] + wl), grid, one))
        fams.setdefault("kube_pod_container_resource_requests", []).append(
            (_labels(base + [(labels.container, "main"), ("resource", labels.gpu_resource),
                             ("unit", "integer")]), grid, one * p.gpu_request))
        fams.setdefault("kube_pod_created", []).append((_labels(base), grid, one * created))
        started = p.started.timestamp() if not pd.isna(p.started) else np.inf
        for phase, mask in (("Pending", grid < started), ("Running", grid >= started)):
            fams.setdefault("kube_pod_status_phase", []).append(
                (_labels(base + [("phase", phase)]), grid, mask.astype(float)))
        if started < np.inf:
            sel = grid >= started
            if sel.any():
                fams.setdefault("kube_pod_start_time", []).append(
                    (_labels(base), grid[sel], one[sel] * started))
        if not pd.isna(p.finished):
            fams.setdefault("kube_pod_completion_time", []).append(
                (_labels(base), grid[-1:], one[-1:] * p.finished.timestamp()))
    return fams


def write_openmetrics(path: str | Path, *, samples: pd.DataFrame | None = None,
                      pods: pd.DataFrame | None = None, queues: pd.DataFrame | None = None,
                      labels: LabelConfig | None = None, pod_step_s: float = 60.0) -> int:
    """Write the tables as one OpenMetrics file for promtool. Returns the number of samples."""
    labels = labels or LabelConfig()
    n = 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        if samples is not None and len(samples):
            n += write_gpu_samples(out, schema.conform(samples, schema.GPU_SAMPLE_COLUMNS), labels)
        last = samples["ts"].max() if samples is not None and len(samples) else None
        n += _write_rest(out, pods, queues, labels, pod_step_s, last)
    return n


def _write_rest(out: IO[str], pods: pd.DataFrame | None, queues: pd.DataFrame | None,
                labels: LabelConfig, pod_step_s: float, last: pd.Timestamp | None) -> int:
    """The pod and queue families, then `# EOF`; pod series end at the last GPU sample."""
    n = 0
    if pods is not None and len(pods):
        pods = schema.conform(pods, schema.POD_COLUMNS)
        end = last if last is not None else pods[["created", "started", "finished"]].max().max()
        for fam, rows in sorted(pod_series(pods, labels, pod_step_s, end).items()):
            _family_header(out, fam)
            for lab, ts, vals in rows:
                n += _write_series(out, fam, lab, ts, vals)
    if queues is not None and len(queues):
        queues = schema.conform(queues, schema.QUEUE_SAMPLE_COLUMNS).sort_values(["metric", "queue", "ts"])
        for metric, fam in queues.groupby("metric", sort=True):
            _family_header(out, metric)
            for queue, s in fam.groupby("queue", sort=True):
                by = labels.volcano_queue if metric.startswith("volcano_") else labels.cluster_queue
                lab = _labels([(by, queue)])
                n += _write_series(out, metric, lab, _seconds(s["ts"]), s["value"].to_numpy())
    out.write("# EOF\n")
    return n


def write_openmetrics_dir(path: str | Path, data_dir: str | Path, *,
                          labels: LabelConfig | None = None, pod_step_s: float = 60.0) -> int:
    """`write_openmetrics` of a partitioned directory (`foresight simulate` / `ingest`): the
    same file, the GPU samples read one metric (every day of it) at a time. Returns the number
    of samples."""
    from features.ingest_store import read_partitioned_samples
    from features.sample_store import SampleStore

    labels, root, n, last = labels or LabelConfig(), Path(data_dir), 0, None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tables = {k: pd.read_parquet(root / f"{k}.parquet") if (root / f"{k}.parquet").is_file()
              else None for k in ("pods", "queues")}
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for metric in sorted(SampleStore(root).metrics):
            s = schema.conform(read_partitioned_samples(root, {metric}), schema.GPU_SAMPLE_COLUMNS)
            n += write_gpu_samples(out, s, labels)
            last = s["ts"].max() if last is None else max(last, s["ts"].max())
            del s
        n += _write_rest(out, tables["pods"], tables["queues"], labels, pod_step_s, last)
    return n


def validate_openmetrics(path: str | Path) -> int:
    """Parse the whole file with prometheus-client's OpenMetrics parser.

    Returns the number of samples; raises ForesightError naming the first bad line.
    """
    from prometheus_client.openmetrics.parser import text_fd_to_metric_families

    path = Path(path)
    if not path.is_file():
        raise ForesightError(f"OpenMetrics file {path} does not exist")
    n = 0
    seen = {"line": 0, "text": ""}

    def counted(fd):
        for seen["line"], seen["text"] in enumerate(fd, 1):
            yield seen["text"]

    try:
        with open(path, encoding="utf-8") as fd:
            for family in text_fd_to_metric_families(counted(fd)):
                n += len(family.samples)
    except (ValueError, UnicodeDecodeError) as exc:
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        where = f"line {seen['line']}: {seen['text'].rstrip()[:120]!r}: " if seen["line"] else ""
        raise ForesightError(f"{path}: malformed OpenMetrics at {where}{reason}") from None
    return n


def backfill(openmetrics: str | Path, tsdb_dir: str | Path, *, promtool: str = "promtool",
             block_duration: str | None = None) -> int:
    """Create TSDB blocks from an OpenMetrics file with promtool, into `tsdb_dir`.

    promtool writes into a fresh temporary directory beside `tsdb_dir`; only complete blocks
    are moved in, so a failure leaves `tsdb_dir` as it was. Returns the number of new blocks.
    A Prometheus started afterwards on `tsdb_dir` loads them at start-up.
    """
    exe = shutil.which(promtool)
    if exe is None:
        raise ForesightError("promtool is not on PATH: install Debian's prometheus package")
    source, target = Path(openmetrics), Path(tsdb_dir)
    if source.is_dir():
        raise ForesightError(f"OpenMetrics file {source} is a directory: give the file")
    if not source.is_file():
        raise ForesightError(f"OpenMetrics file {source} does not exist")
    if target.exists() and not target.is_dir():  # the input itself, say: never written over
        raise ForesightError(f"--tsdb {target} exists and is not a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-backfill-", dir=target.parent))
    try:
        cmd = [exe, "tsdb", "create-blocks-from", "openmetrics"]
        if block_duration:
            cmd.append(f"--max-block-duration={block_duration}")
        proc = subprocess.run(cmd + [str(source), str(staging)], capture_output=True, text=True)
        if proc.returncode != 0:
            # promtool names no line: our parser finds it (slow, so only on failure).
            validate_openmetrics(source)
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            raise ForesightError(f"promtool could not backfill {source}: "
                                 f"{(lines[-1] if lines else '?').strip()[:300]}")
        blocks = [b for b in staging.iterdir() if b.is_dir()]
        if not blocks and _has_sample(source):  # promtool drops what it cannot place, quietly
            raise ForesightError(f"promtool wrote no TSDB block from {source}, which has "
                                 "samples: are their timestamps seconds after 1970?")
        target.mkdir(parents=True, exist_ok=True)
        for block in blocks:
            os.replace(block, target / block.name)
        return len(blocks)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _has_sample(path: Path) -> bool:
    """Any line that is not a comment (# TYPE, # HELP, # EOF) nor blank: reads until the first."""
    with path.open(errors="replace") as fh:
        return any(ln.strip() and not ln.startswith("#") for ln in fh)
