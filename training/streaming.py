"""The features pass out of core: hygiene and every kind's share, node group by node group.

A history read from partitions (training.sources.from_partitions) never holds its sample
table: the partitions are split by node group once (features.sample_store), then each group
(every day and metric of its nodes) is cleaned and handed to each kind's `partial`; what the
kinds keep from a group (wide series, usage bins, pair parts) is much smaller than its samples.
A kind's `combine` then builds the same table its `prepare` builds from one in-memory sample
table (tests/test_train_streaming.py). Peak memory is one group's samples plus what the kinds
keep, so it is set by `group_gpus`, not by the history's length.
"""
from __future__ import annotations

import ctypes
import statistics
import tempfile
import time
from dataclasses import replace
from typing import Callable

from features.sample_store import Shards
from training.hygiene import HygieneReport, clean_samples
from training.kinds import load_kind
from training.sources import TRAINING_METRICS, History

_SUMMED = ("rows_in", "rows_out", "nan_values", "duplicate_rows", "counter_resets",
           "missing_series", "gaps", "gap_seconds")


def _trim() -> None:
    """Give freed heap back to the OS between groups: without it glibc keeps the fragments
    of every group's temporaries and the resident size grows with the group count."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def merge_reports(reports: list[HygieneReport], missing: list[str]) -> HygieneReport:
    """One report for the whole history from the node groups' reports."""
    out = HygieneReport(missing_metrics=list(missing))
    for k in _SUMMED:
        setattr(out, k, sum(getattr(r, k) for r in reports))
    steps = [r.step_s for r in reports if r.step_s]
    out.step_s = float(statistics.median(steps)) if steps else 0.0
    return out


def group_features(shards: Shards, g: int, present: set[str], kinds: tuple[str, ...],
                   history: History, cfg) -> tuple[HygieneReport, dict, dict[str, float], int] | None:
    """One node group's share: read it, clean it, hand it to each kind's `partial`. A plain
    function of picklable arguments, so a Dask worker runs it as well as this process
    (the scratch directory must then be storage the workers see)."""
    secs: dict[str, float] = {}
    t = time.perf_counter()
    df = shards.read(g)
    secs["read"] = time.perf_counter() - t
    if df is None or df.empty:
        return None
    rows = len(df)
    t = time.perf_counter()
    df, rep = clean_samples(df, TRAINING_METRICS, present)
    secs["hygiene"] = time.perf_counter() - t
    parts = {}
    for k in kinds:
        t = time.perf_counter()
        parts[k] = load_kind(k).partial(df, history, cfg)
        secs[f"{k}.partial"] = time.perf_counter() - t
    del df
    _trim()
    return rep, parts, secs, rows


def _local(shards, n, args, progress):
    for g in range(n):
        out = group_features(shards, g, *args)
        progress(out)
        yield g, out


def _on_dask(client, shards, n, args, progress):
    """One Dask task per node group; results come back as they finish and are put back in
    group order, so `combine` sees the same parts as the local pass."""
    from distributed import as_completed

    futures = client.map(group_features, [shards] * n, list(range(n)), *[[a] * n for a in args],
                         pure=False)
    index = {f.key: g for g, f in enumerate(futures)}
    done: dict[int, object] = {}
    for f in as_completed(futures):
        g = index[f.key]
        done[g] = f.result()
        f.release()
        progress(done[g])
    return sorted(done.items())


def streamed_features(history: History, cfg, kinds: tuple[str, ...],
                      on_step: Callable[[str], None] = lambda s: None,
                      on_progress: Callable[[str, int, int, int], None] | None = None
                      ) -> tuple[dict[str, Callable[[], object]], HygieneReport, dict]:
    """Run the pass; returns, per kind that reads samples, a callable building its data (its
    `combine`, left to the kind's own features stage), the merged hygiene report, and
    seconds per stage (shard, hygiene, <kind>.partial; summed over workers on Dask).
    `on_progress(stage, done, total, rows)` follows the split and the node groups; with
    `cfg.dask_client` set the groups run as Dask tasks."""
    store = history.store
    mods = tuple(k for k in kinds if hasattr(load_kind(k), "partial"))
    present = set(store.metrics)
    stages: dict[str, float] = {"shard": 0.0, "hygiene": 0.0, "read": 0.0}
    stages.update({f"{k}.partial": 0.0 for k in mods})
    parts: dict[str, list] = {k: [] for k in mods}
    reports = []
    client = getattr(cfg, "dask_client", None)
    # what a task needs of the history and the config: no sample store, no client
    ctx = (present, mods, replace(history, samples=None, store=None),
           replace(cfg, dask_client=None))
    prog = on_progress or (lambda stage, i, k, rows: None)
    with tempfile.TemporaryDirectory(prefix="foresight-groups-",
                                     dir=getattr(cfg, "scratch", None)) as tmp:
        n = store.group_count(getattr(cfg, "group_gpus", 16))
        t = time.perf_counter()

        def split(i: int, k: int) -> None:
            on_step(f"split by node group: {i}/{k} partitions")
            prog("split by node group", i, k, 0)

        shards = store.shard(tmp, n, split)
        stages["shard"] = round(time.perf_counter() - t, 3)
        seen = {"groups": 0, "rows": 0}

        def progress(out) -> None:
            seen["groups"] += 1
            seen["rows"] += out[3] if out else 0
            on_step(f"features: node group {seen['groups']}/{n} ({seen['rows']:,} samples)")
            prog("features by node group", seen["groups"], n, seen["rows"])

        results = (_on_dask(client, shards, n, ctx, progress) if client is not None
                   else _local(shards, n, ctx, progress))
        for _, out in results:
            if out is None:
                continue
            rep, got, secs, _ = out
            reports.append(rep)
            for k, v in secs.items():
                stages[k] += v
            for k in mods:
                parts[k].append(got[k])
    stages = {k: round(v, 3) for k, v in stages.items()}
    hyg = merge_reports(reports, sorted(m for m in TRAINING_METRICS if m not in present))
    build = {k: (lambda m=load_kind(k), p=parts[k]: m.combine(p, history, cfg)) for k in mods}
    return build, hyg, stages
