"""Which engine regroups the partitions by node group: pyarrow (in use), DuckDB or Polars.

Run: nice .venv/bin/python bench/shard_engines.py [--gpus 256] [--days 7] [--step 30]
         [--group-gpus 16] [--runs 3]
Needs the bench extras for the two challengers: pip install -e '.[bench]' (duckdb, polars).
Writes bench/results/shard_engines.md.

The training job's out-of-core pass (training/streaming.py) does two things with the day x
metric partitions that `foresight ingest` writes: split them by node group into a scratch
directory (`shard`), then read one group back at a time as a pandas table with the label
columns as categoricals (`read`), which is what the kinds' features take. Each engine does
both, in its own child process (wall, CPU and peak RSS from os.wait4), on the same partitions:
- pyarrow: features.sample_store (SampleStore.shard, Shards.read), the project's code, its
  files split on one thread per core; `pyarrow-1thread`: the same on one thread (as before);
- duckdb: one `COPY (SELECT ..., group) TO scratch (PARTITION_BY group)` over every file, then
  per group `SELECT * FROM read_parquet(...)` to pandas, label columns cast to categoricals;
- polars: `scan_parquet` of every file with the group column, `sink_parquet` partitioned by
  group (`PartitionBy`, unstable API in polars 2.1), then per group `read_parquet(...).to_pandas()`, labels cast to categoricals.
The group is crc32(node) mod n for pyarrow (the job's rule) and each engine's own hash for
the others (equal group sizes on average: only the cost of the engine is compared). Every run
checks that the groups hold every sample once.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchenv import machine  # noqa: E402
from train_scale import timed_child  # noqa: E402

RESULTS = ROOT / "bench" / "results"
LABELS = ["node", "gpu", "uuid", "namespace", "pod", "metric"]
ENGINES = ("pyarrow", "pyarrow-1thread", "duckdb", "polars")


def _files(data: str) -> list[str]:
    from features.sample_store import SampleStore

    return [str(f) for f in SampleStore(data).files]


def run_pyarrow(data: str, scratch: str, n: int, workers: int | None = None
                ) -> tuple[int, float, float]:
    from features.sample_store import SampleStore

    t = time.perf_counter()
    shards = SampleStore(data).shard(scratch, n, workers=workers)
    split = time.perf_counter() - t
    rows = sum(len(df) for _, df in shards)
    return rows, split, time.perf_counter() - t - split


def run_duckdb(data: str, scratch: str, n: int) -> tuple[int, float, float]:
    import duckdb

    con = duckdb.connect()
    files = _files(data)
    t = time.perf_counter()
    con.execute(f"COPY (SELECT *, hash(node) % {n} AS g FROM read_parquet({files!r})) "
                f"TO '{scratch}' (FORMAT parquet, PARTITION_BY (g))")
    split = time.perf_counter() - t
    rows = 0
    for g in range(n):
        d = Path(scratch) / f"g={g}"
        if not d.is_dir():
            continue
        df = con.execute(f"SELECT * EXCLUDE (g) FROM read_parquet('{d}/*.parquet')").df()
        df = df.astype({c: "category" for c in LABELS if c in df})
        rows += len(df)
    return rows, split, time.perf_counter() - t - split


def run_polars(data: str, scratch: str, n: int) -> tuple[int, float, float]:
    import polars as pl

    files = _files(data)
    t = time.perf_counter()
    lf = pl.scan_parquet(files).with_columns(g=(pl.col("node").hash() % n))
    lf.sink_parquet(pl.PartitionBy(scratch, key="g", include_key=False), mkdir=True)
    split = time.perf_counter() - t
    rows = 0
    for g in range(n):
        parts = sorted(Path(scratch).glob(f"g={g}/**/*.parquet"))
        if not parts:
            continue
        df = pl.read_parquet(parts, hive_partitioning=False).drop("g", strict=False).to_pandas()
        df = df.astype({c: "category" for c in LABELS if c in df})
        rows += len(df)
    return rows, split, time.perf_counter() - t - split


def child(engine: str, data: str, scratch: str, n: int, out: str) -> None:
    rows, split, read = {"pyarrow": run_pyarrow, "duckdb": run_duckdb, "polars": run_polars,
                         "pyarrow-1thread": lambda *a: run_pyarrow(*a, workers=1),
                         }[engine](data, scratch, n)
    Path(out).write_text(json.dumps({"rows": rows, "split_s": split, "read_s": read}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--step", type=float, default=30)
    ap.add_argument("--group-gpus", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.data, a.scratch, a.n, a.out)
        return
    command = "nice .venv/bin/python bench/shard_engines.py " + " ".join(sys.argv[1:])
    engines = a.engines.split(",")
    n = max(1, a.gpus // a.group_gpus)
    res: dict[str, list[dict]] = {e: [] for e in engines}
    with tempfile.TemporaryDirectory(prefix="foresight-shard-engines-") as tmp:
        data = str(Path(tmp) / "data")
        gen = timed_child([sys.executable, str(ROOT / "bench" / "train_scale.py"),
                           "--child-generate", str(a.gpus), "--days", str(a.days), "--step",
                           str(a.step), "--dir", data], Path(tmp) / "gen.log")
        total = json.loads((Path(tmp) / "gen.log").read_text().strip().splitlines()[-1])["rows"]
        for r in range(a.runs):  # engines interleaved per run: the machine's load hits all
            for e in engines:
                scratch, out = Path(tmp) / f"scratch-{e}", Path(tmp) / f"{e}.json"
                shutil.rmtree(scratch, ignore_errors=True)
                t = timed_child([sys.executable, __file__, "--child", e, "--data", data,
                                 "--scratch", str(scratch), "--n", str(n), "--out", str(out)],
                                Path(tmp) / f"{e}.log")
                got = json.loads(out.read_text())
                if got["rows"] != total:
                    raise SystemExit(f"{e}: {got['rows']} rows read back, {total} written")
                res[e].append({**t, **got})
                print(e, r, {k: round(v, 1) for k, v in {**t, **got}.items()}, flush=True)
    med = {e: {k: statistics.median(x[k] for x in v) for k in v[0]} for e, v in res.items()}
    base = med.get("pyarrow")
    out = [f"# Regrouping partitions by node group: pyarrow vs DuckDB vs Polars "
           f"({a.days:g} d x {a.gpus} GPUs at {a.step:g} s, {total:,} samples, {n} groups)", "",
           f"- command: `{command}`", f"- machine: {machine()}",
           f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
           f"- generate: {gen['wall_s']:.0f} s; runs: {a.runs} per engine, interleaved; "
           "medians", "",
           "| engine | split s | read s | wall s | CPU s | peak RSS GB | wall vs pyarrow |",
           "|---|---|---|---|---|---|---|"]
    for e, m in med.items():
        ratio = f"{m['wall_s'] / base['wall_s']:.2f}x" if base else ""
        out.append(f"| {e} | {m['split_s']:.1f} | {m['read_s']:.1f} | {m['wall_s']:.1f} | "
                   f"{m['cpu_s']:.1f} | {m['peak_mb'] / 1024:.2f} | {ratio} |")
    out += ["", "Per run (wall s / CPU s / peak GB):", ""]
    out += [f"- {e}: " + "; ".join(f"{x['wall_s']:.1f} / {x['cpu_s']:.1f} / "
                                   f"{x['peak_mb'] / 1024:.2f}" for x in v) for e, v in res.items()]
    (RESULTS / "shard_engines.md").write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
