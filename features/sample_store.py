"""Partitioned samples (what `foresight ingest` writes) regrouped by node, out of core.

Why node groups: everything the models learn from telemetry is local to a node. A pod runs on
one node, so its (pod, GPU) series, its solo features and progress rate, and every
co-location episode it takes part in (two pods on one GPU, or on two GPUs of one node) are in
that node's samples. One pass over the day/metric partitions splits each file by node group
(a stable hash of the node name) into a scratch directory; each group is then read whole, all
days and metrics, and memory is set by the group size (`group_gpus`), not by the history.
Why pyarrow, measured against DuckDB and Polars (bench/results/shard_engines.md, 68M samples):
split + read back 15.1 s at 1.24 GB with the files split on a thread per core, Polars 15.6 s at
1.48 GB, DuckDB 71.9 s at 4.45 GB. It is already a dependency and reads the string columns
dictionary-encoded (pandas categoricals: integer codes, no string hashing downstream); the
regrouping is one sort and slice per file.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import zlib
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from features.ingest_store import MANIFEST, partition_files

DICT_COLUMNS = ["node", "gpu", "uuid", "namespace", "pod", "metric"]


def node_group(names: np.ndarray, n_groups: int) -> np.ndarray:
    """Group of each node name: crc32 modulo the group count (stable across runs)."""
    return np.asarray([zlib.crc32(str(n).encode()) % n_groups for n in names], dtype=np.int64)


class SampleStore:
    """The partitioned samples of an ingest directory, with their day/metric files."""

    def __init__(self, root: str | Path, metrics: set[str] | None = None) -> None:
        self.root = Path(root)
        self.files = [f for f in partition_files(self.root) if metrics is None or f.stem in metrics]
        man = self.root / MANIFEST
        self.manifest = json.loads(man.read_text()) if man.is_file() else {}

    @property
    def metrics(self) -> list[str]:
        """Metrics with at least one non-empty partition."""
        return sorted({f.stem for f in self.files if pq.ParquetFile(f).metadata.num_rows})

    def rows(self) -> int:
        return sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)

    def digest(self) -> str:
        """Content hash of every partition (names and bytes), read in 1 MiB blocks."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.relative_to(self.root).as_posix().encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        return h.hexdigest()[:32]

    def group_count(self, group_gpus: int) -> int:
        """Groups of about `group_gpus` GPUs, from the GPUs in the first non-empty file."""
        for f in self.files:
            t = pq.read_table(f, columns=["uuid"])
            if t.num_rows:
                gpus = len(pa.compute.unique(t.column("uuid")))
                return max(1, math.ceil(gpus / max(group_gpus, 1)))
        return 1

    def shard(self, scratch: str | Path, n_groups: int,
              progress: Callable[[int, int], None] | None = None,
              workers: int | None = None) -> "Shards":
        """Split every partition by node group into `scratch/g=<k>/<i>.parquet`. Files are
        split on `workers` threads (default: the cores; pyarrow reads, takes and writes
        without the GIL): bench/results/shard_engines.md."""
        out = Path(scratch)

        def split(i: int, f: Path) -> None:
            t = pq.read_table(f, read_dictionary=DICT_COLUMNS)
            if not t.num_rows:
                return
            node = t.column("node").combine_chunks()
            grp = node_group(np.asarray(node.dictionary.to_pylist(), dtype=object),
                             n_groups)[node.indices.to_numpy(zero_copy_only=False)]
            order = np.argsort(grp, kind="stable")  # rows keep their order in a group
            bounds = np.searchsorted(grp[order], np.arange(n_groups + 1))
            t = t.take(pa.array(order))
            for g in range(n_groups):
                if bounds[g + 1] > bounds[g]:
                    d = out / f"g={g}"
                    d.mkdir(parents=True, exist_ok=True)
                    pq.write_table(t.slice(bounds[g], bounds[g + 1] - bounds[g]),
                                   d / f"{i:06d}.parquet")

        n = workers or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=n) as pool:
            for done, fut in enumerate(as_completed(
                    [pool.submit(split, i, f) for i, f in enumerate(self.files)]), 1):
                fut.result()
                if progress:
                    progress(done, len(self.files))
        return Shards(out, n_groups)


class Shards:
    """Samples regrouped by node group: read one group (every day and metric) at a time."""

    def __init__(self, root: Path, n_groups: int) -> None:
        self.root, self.n_groups = root, n_groups

    def read(self, g: int) -> pd.DataFrame | None:
        files = sorted((self.root / f"g={g}").glob("*.parquet"))
        if not files:
            return None
        t = pa.concat_tables([pq.read_table(f, read_dictionary=DICT_COLUMNS) for f in files])
        # one dictionary per column across files: pandas categoricals with one set of levels
        return t.unify_dictionaries().combine_chunks().to_pandas()

    def __iter__(self) -> Iterator[tuple[int, pd.DataFrame]]:
        for g in range(self.n_groups):
            df = self.read(g)
            if df is not None and len(df):
                yield g, df
