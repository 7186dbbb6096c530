"""Where the retraining job's history comes from: synthetic, Parquet tables or Prometheus.

Each returns a `History` (the tidy tables of features.schema plus what the kinds need that is
cluster configuration rather than telemetry). Prometheus history that does not cover the
requested window is refused: a model fitted on half a month would silently replace one fitted
on a full month.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from features.pairs import PROGRESS_METRIC, TELEMETRY_FEATURES
from ground.errors import ForesightError
from training.hygiene import coverage

#: The metrics the wired kinds read (the pair builder's solo features + progress counter).
TRAINING_METRICS = tuple(TELEMETRY_FEATURES) + (PROGRESS_METRIC,)


@dataclass
class History:
    samples: pd.DataFrame
    pods: pd.DataFrame
    queues: pd.DataFrame
    start: pd.Timestamp
    end: pd.Timestamp
    source: str
    pod_labels: pd.DataFrame | None = None
    gpu_sharing: dict[str, str] = field(default_factory=dict)
    gpu_model: str | None = None
    notes: list[str] = field(default_factory=list)
    #: partitioned samples read node group by node group (samples is then None)
    store: object | None = None
    step_s: float | None = None
    #: a directory the source made for this run (split or pulled partitions): the caller
    #: removes it when the run is over
    scratch: Path | None = None


def synthetic_config(seed: int = 0, days: float = 4.0, nodes: int = 4, gpus_per_node: int = 4,
                     step_s: float = 30.0, sharing_calibration: str = "h200",
                     fractional_share: float | None = 0.6):
    """The SimConfig `synthetic` generates, refused (one line) when its options are out of
    range or the history too large: callers check it before they write anything."""
    from simulator import SimConfig
    from simulator.limits import check_size

    try:
        cfg = SimConfig(seed=seed, days=days, nodes=nodes, gpus_per_node=gpus_per_node,
                        step_s=step_s, load=1.0, mps_node_fraction=0.5, metrics=TRAINING_METRICS,
                        sharing_calibration=sharing_calibration,
                        fractional_share=fractional_share)
    except ValueError as exc:  # --seed / --days / --nodes out of range: user input
        raise ForesightError(f"synthetic history: {exc}") from None
    check_size(cfg)
    return cfg


def synthetic(seed: int = 0, days: float = 4.0, nodes: int = 4, gpus_per_node: int = 4,
              step_s: float = 30.0, sharing_calibration: str = "h200",
              fractional_share: float | None = 0.6) -> History:
    """A generated cluster (simulator); the node -> sharing map is cluster config it knows.
    Its GPU-sharing slowdowns come from the real H200 measurement (simulator/sharing.py) unless
    `sharing_calibration="gavel"` (the older V100-calibrated form). `fractional_share` of the
    single-GPU jobs ask for a GPU fraction (None: openb's 0.44): at openb's share the 16-GPU
    demo cluster measures ~20 GPU-shared sides a day, too few to fit either sharing mode."""
    from simulator import generate_cluster

    cfg = synthetic_config(seed, days, nodes, gpus_per_node, step_s, sharing_calibration,
                           fractional_share)
    c = generate_cluster(cfg)
    node_of = dict(zip(c.pods["namespace"] + "/" + c.pods["pod"], c.pods["node"]))
    truth = c.truth["interference"]
    shared = truth[truth["sharing"] != "node"]
    sharing = {node_of.get(f"{r.namespace}/{r.pod}"): r.sharing for r in shared.itertuples()}
    end = cfg.start + pd.Timedelta(seconds=cfg.duration_s)
    return History(c.samples, c.pods, c.queues, cfg.start, end,
                   f"synthetic seed={seed} {days:g}d {cfg.n_gpus} GPUs", c.pod_labels,
                   {k: v for k, v in sharing.items() if k}, cfg.gpu_model)


def from_partitions(data_dir: str, tables_dir: str | None = None) -> History:
    """An ingest directory (`samples/day=*/<metric>.parquet`, pods.parquet, ...) whose samples
    stay on disk: the pipeline reads them node group by node group (training.streaming).
    `tables_dir`: where pods.parquet and the other tables are, when not beside the samples."""
    import json

    from features import schema
    from features.ingest_store import check_parquet, read_parquet
    from features.sample_store import SampleStore

    store = SampleStore(Path(data_dir), set(TRAINING_METRICS))
    root = Path(tables_dir or data_dir)
    if not store.files:
        raise ForesightError(f"{data_dir}: no partitioned samples of the training metrics")
    man = store.manifest
    if man and not man.get("complete", False):
        raise ForesightError(f"{data_dir}: the ingest is not complete (rerun `foresight ingest` "
                             "with the same --out to resume it)")
    check_parquet(store.files)
    tables = {}
    for name, cols in (("pods", schema.POD_COLUMNS), ("queues", schema.QUEUE_SAMPLE_COLUMNS)):
        p = root / f"{name}.parquet"
        tables[name] = schema.conform(read_parquet(p), cols) if p.is_file() else None
    if tables["pods"] is None or tables["pods"].empty:
        raise ForesightError(f"{data_dir}: no pods table (pods.parquet): the models need pods")
    queues = tables["queues"] if tables["queues"] is not None else schema.empty(
        schema.QUEUE_SAMPLE_COLUMNS)
    lp = root / "pod_labels.parquet"
    cp = root / "cluster.json"  # node -> GPU sharing, GPU model (when known)
    cluster = json.loads(cp.read_text()) if cp.is_file() else {}
    if man:
        start, end = pd.Timestamp(man["start"]), pd.Timestamp(man["end"])
    else:  # no manifest: the span of the partitions' timestamps
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        ts = [pq.read_table(f, columns=["ts"]).column("ts") for f in (store.files[0],
                                                                       store.files[-1])]
        start, end = pd.Timestamp(pc.min(ts[0]).as_py()), pd.Timestamp(pc.max(ts[1]).as_py())
    return History(None, tables["pods"], queues, start, end,
                   man.get("source", f"partitions {data_dir}"),
                   read_parquet(lp) if lp.is_file() else None,
                   cluster.get("gpu_sharing", {}), cluster.get("gpu_model"),
                   store=store, step_s=man.get("step_s"))


def from_tables(data_dir: str, scratch: str | Path | None = None) -> History:
    """A directory with one flat samples.parquet (and pods.parquet, ...): the table is split
    on read into partitions in a new directory under `scratch` (features.ingest_store.
    split_flat, never loaded whole), then read as `from_partitions` reads; that directory is
    `History.scratch`, for the caller to remove."""
    import shutil
    import tempfile

    from features.ingest import TABLE_FILES
    from features.ingest_store import split_flat

    table = Path(data_dir) / TABLE_FILES["samples"]
    if not Path(data_dir).is_dir():
        raise ForesightError(f"data directory {data_dir} does not exist"
                             if not Path(data_dir).exists() else
                             f"--data {data_dir} is a file: give the directory `foresight "
                             "ingest` wrote")
    if not table.is_file():
        raise ForesightError(f"{data_dir} has no {table.name}: run `foresight ingest` or "
                             "`foresight simulate` first")
    if scratch:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="foresight-split-", dir=scratch))
    try:
        split_flat(table, tmp)
        h = from_partitions(str(tmp), tables_dir=data_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    h.source, h.scratch = f"tables {data_dir}", tmp
    return h


def pull_dir(scratch: str | Path | None) -> Path:
    """Where `train --prometheus-url` pulls: a fixed place under `scratch` (default: the
    system's temp directory), so that a job killed mid-pull resumes there."""
    import tempfile

    return Path(scratch or tempfile.gettempdir()) / "foresight-prometheus-pull"


def _leftover(root: Path, step_s: float, max_age: pd.Timedelta, labels=None) -> bool:
    """Keep what an earlier run left in `root` (an interrupted pull resumes over its own
    window; a complete one is trained from) unless it is older than `max_age` or was pulled
    with another step or other label names: that is removed and pulled anew."""
    import json
    import shutil
    from dataclasses import asdict

    from features.catalog import LabelConfig
    from features.ingest import now_utc
    from features.ingest_store import MANIFEST

    man = root / MANIFEST
    try:
        have = json.loads(man.read_text()) if man.is_file() else None
    except (OSError, ValueError):
        have = {}
    want = json.loads(json.dumps(asdict(labels or LabelConfig()), default=list))
    fresh = bool(have) and have.get("step_s") == step_s and have.get("labels", want) == want \
        and list(have.get("metrics", [])) == list(TRAINING_METRICS) and \
        pd.Timestamp(now_utc()) - pd.Timestamp(have["end"]) <= max_age
    if root.exists() and not fresh:
        shutil.rmtree(root)
    return fresh and have.get("complete", False)


def partition_coverage(store, start: pd.Timestamp, end: pd.Timestamp, step_s: float,
                       metrics) -> dict[str, float]:
    """training.hygiene.coverage of partitioned samples: one day's timestamps at a time."""
    import numpy as np
    import pyarrow.parquet as pq

    expected = max(1.0, (end - start).total_seconds() / step_s)
    step_ns = int(round(step_s * 1e9))
    out = {}
    for m in metrics:
        seen = [np.unique(pq.read_table(f, columns=["ts"]).column("ts").to_pandas()
                          .to_numpy(dtype="datetime64[ns]").astype(np.int64) // step_ns)
                for f in store.files if f.stem == m]
        n = len(np.unique(np.concatenate(seen))) if seen else 0
        out[m] = float(min(1.0, n / expected))
    return out


def from_prometheus(url: str, start: datetime, end: datetime, step_s: float = 30.0,
                    min_coverage: float = 0.9, source=None, scratch: str | Path | None = None,
                    progress=None, max_age: pd.Timedelta = pd.Timedelta("1D"),
                    labels=None, **auth) -> History:
    """Pull [start, end] from Prometheus (or Thanos/Mimir/VictoriaMetrics: same query API)
    into partitions under `scratch` and read them as `from_partitions` does: the pull is
    `foresight ingest`'s (features.ingest_store, one day x metric at a time, resumable), so
    memory does not grow with the window. The caller removes `History.store.root` when done.

    Raises SourceUnavailable when the server is down and ForesightError when what it returns
    covers less than `min_coverage` of the window for any metric the models need.
    """
    from features.ingest_store import ingest_to_dir
    from features.prometheus import PrometheusSource

    root = pull_dir(scratch)
    src = source or PrometheusSource(url, **auth)
    if not _leftover(root, step_s, max_age, labels):
        # the training metrics, each optional (profiling metrics and the app progress
        # counter are often not exported): absent ones are reported, not refused
        ingest_to_dir(src, start, end, root, step_s=step_s, metrics=TRAINING_METRICS,
                      required=False, progress=progress, labels=labels)
    try:  # a pull that cannot be trained from is not kept for the next run
        h = from_partitions(str(root))
        t0, t1 = h.start, h.end
        missing = [m for m in TRAINING_METRICS if m not in h.store.metrics]
        # the progress counter exists only while a pod that exports it runs: its share of
        # the window says how busy such pods were, not whether the pull was complete
        cov = partition_coverage(h.store, t0, t1, step_s, [m for m in TRAINING_METRICS
                                                           if m not in missing
                                                           and m != PROGRESS_METRIC])
        short = {m: c for m, c in cov.items() if c < min_coverage}
        if short:
            worst = min(short, key=short.get)
            raise ForesightError(
                f"partial data from {url}: {worst} covers {short[worst]:.0%} of "
                f"{t0.isoformat()}..{t1.isoformat()} (need {min_coverage:.0%}; {len(short)} "
                "metric(s) short); models in service left untouched")
    except ForesightError:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        raise
    h.source, h.scratch = f"prometheus {url}", root
    h.notes = [f"metrics absent at the source: {', '.join(missing)}"] if missing else []
    return h
