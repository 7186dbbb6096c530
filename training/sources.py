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
from foresight.errors import ForesightError
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


def synthetic(seed: int = 0, days: float = 4.0, nodes: int = 4, gpus_per_node: int = 4,
              step_s: float = 30.0, sharing_calibration: str = "h200",
              fractional_share: float | None = 0.6) -> History:
    """A generated cluster (simulator); the node -> sharing map is cluster config it knows.
    Its GPU-sharing slowdowns come from the real H200 measurement (simulator/sharing.py) unless
    `sharing_calibration="gavel"` (the older V100-calibrated form). `fractional_share` of the
    single-GPU jobs ask for a GPU fraction (None: openb's 0.44): at openb's share the 16-GPU
    demo cluster measures ~20 GPU-shared sides a day, too few to fit either sharing mode."""
    from simulator import SimConfig, generate_cluster

    cfg = SimConfig(seed=seed, days=days, nodes=nodes, gpus_per_node=gpus_per_node,
                    step_s=step_s, load=1.0, mps_node_fraction=0.5, metrics=TRAINING_METRICS,
                    sharing_calibration=sharing_calibration, fractional_share=fractional_share)
    c = generate_cluster(cfg)
    node_of = dict(zip(c.pods["namespace"] + "/" + c.pods["pod"], c.pods["node"]))
    truth = c.truth["interference"]
    shared = truth[truth["sharing"] != "node"]
    sharing = {node_of.get(f"{r.namespace}/{r.pod}"): r.sharing for r in shared.itertuples()}
    end = cfg.start + pd.Timedelta(seconds=cfg.duration_s)
    return History(c.samples, c.pods, c.queues, cfg.start, end,
                   f"synthetic seed={seed} {days:g}d {cfg.n_gpus} GPUs", c.pod_labels,
                   {k: v for k, v in sharing.items() if k}, cfg.gpu_model)


def from_partitions(data_dir: str) -> History:
    """An ingest directory (`samples/day=*/<metric>.parquet`, pods.parquet, ...) whose samples
    stay on disk: the pipeline reads them node group by node group (training.streaming)."""
    import json

    from features import schema
    from features.sample_store import SampleStore

    root = Path(data_dir)
    store = SampleStore(root, set(TRAINING_METRICS))
    if not store.files:
        raise ForesightError(f"{data_dir}: no partitioned samples of the training metrics")
    man = store.manifest
    if man and not man.get("complete", False):
        raise ForesightError(f"{data_dir}: the ingest is not complete (rerun `foresight ingest` "
                             "with the same --out to resume it)")
    tables = {}
    for name, cols in (("pods", schema.POD_COLUMNS), ("queues", schema.QUEUE_SAMPLE_COLUMNS)):
        p = root / f"{name}.parquet"
        tables[name] = schema.conform(pd.read_parquet(p), cols) if p.is_file() else None
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
                   pd.read_parquet(lp) if lp.is_file() else None,
                   cluster.get("gpu_sharing", {}), cluster.get("gpu_model"),
                   store=store, step_s=man.get("step_s"))


def from_tables(data_dir: str) -> History:
    from features.ingest import read_tables

    t = read_tables(data_dir)
    s = t["samples"]
    if s.empty:
        raise ForesightError(f"{data_dir}: samples table is empty")
    pods = t.get("pods")
    if pods is None or pods.empty:
        raise ForesightError(f"{data_dir}: no pods table (pods.parquet): the models need pods")
    queues = t.get("queues", pd.DataFrame(columns=["ts", "queue", "metric", "value"]))
    lp = Path(data_dir) / "pod_labels.parquet"  # optional: workload keys for fingerprints
    labels = pd.read_parquet(lp) if lp.exists() else None
    return History(s, pods, queues, s["ts"].min(), s["ts"].max(), f"tables {data_dir}", labels)


def from_prometheus(url: str, start: datetime, end: datetime, step_s: float = 30.0,
                    min_coverage: float = 0.9, source=None, **auth) -> History:
    """Ingest [start, end] from Prometheus (or Thanos/Mimir/VictoriaMetrics: same query API).

    Raises SourceUnavailable when the server is down and ForesightError when what it returns
    covers less than `min_coverage` of the window for any metric the models need.
    """
    from features.catalog import DEFAULT_GPU_METRICS, LabelConfig
    from features.ingest import ingest
    from features.prometheus import PrometheusSource
    from features.telemetry import gpu_samples_from_frame

    src = source or PrometheusSource(url, **auth)
    res = ingest(src, start, end, step_s=step_s)  # the default set; absent ones are listed
    frames, missing = [res.samples], list(res.missing)
    # what the kinds also read beyond ingest's default set (optional: profiling metrics and
    # the app progress counter are often not exported)
    for name in (m for m in TRAINING_METRICS if m not in DEFAULT_GPU_METRICS):
        df = src.query_range(name, start, end, step_s)
        if df.empty:
            missing.append(name)
        else:
            frames.append(gpu_samples_from_frame(df, name, LabelConfig()))
    samples = pd.concat(frames, ignore_index=True)
    t0, t1 = pd.Timestamp(start), pd.Timestamp(end)
    # partial = present but with holes; wholly absent metrics are reported, not refused
    need = [m for m in TRAINING_METRICS if m not in missing]
    cov = coverage(samples, t0, t1, step_s, need)
    short = {m: c for m, c in cov.items() if c < min_coverage}
    if short:
        worst = min(short, key=short.get)
        raise ForesightError(
            f"partial data from {url}: {worst} covers {short[worst]:.0%} of "
            f"{t0.isoformat()}..{t1.isoformat()} (need {min_coverage:.0%}; {len(short)} metric(s) "
            f"short); models in service left untouched")
    if res.pods.empty:
        raise ForesightError(f"{url} returned no pods (kube-state-metrics) for the window")
    notes = [f"metrics absent at the source: {', '.join(missing)}"] if missing else []
    return History(samples, res.pods, res.queues, t0, t1, f"prometheus {url}", notes=notes)
