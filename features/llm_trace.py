"""An LLM inference request trace (Azure's `AzureLLMInferenceTrace_*` format) as demand series.

One row of the trace is one request: `TIMESTAMP` (its arrival, naive: read as UTC),
`ContextTokens` (the prompt: prefill work) and `GeneratedTokens` (the answer: decode work).
Binned, it gives the load an inference fleet must serve, per bin, in the Nixtla long format:
- `<name>:requests`: requests arriving in the bin;
- `<name>:context_tokens` / `<name>:generated_tokens`: the tokens those requests bring, the
  two loads that size a fleet (prefill is compute-bound, decode memory-bound; Splitwise,
  ISCA'24, the paper the trace was published with, sizes prefill and decode pools by them).
`name` is the file's stem without the `AzureLLMInferenceTrace_` prefix (`code`, `conv`,
`code_1week`). A bin with no request is 0: the trace lists every request. The series run from
the first request's bin to the last one's; a trace's first and last bins are partial.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.demand_series import check_grid, data_row, parse_freq, parse_times
from features.schema import LONG_COLUMNS
from ground.errors import ForesightError
from ground.paths import input_file

#: The trace's columns and the series each gives (a count of requests needs no column).
TOKEN_COLUMNS = {"context_tokens": "ContextTokens", "generated_tokens": "GeneratedTokens"}
VALUES = ("requests", *TOKEN_COLUMNS)
_PREFIX = "AzureLLMInferenceTrace_"


def trace_name(path: str | Path) -> str:
    stem = Path(path).stem
    return stem[len(_PREFIX):] if stem.startswith(_PREFIX) and len(stem) > len(_PREFIX) else stem


#: rows read at a time: a week of Azure's 2024 requests is tens of millions of rows, and
#: their time strings take ~330 bytes a row while parsed
CHUNK_ROWS = 1_000_000


def _chunks(path: str | Path, chunk_rows: int = CHUNK_ROWS):
    """The trace's rows, validated, a chunk at a time: `arrived` (UTC), `context_tokens`,
    `generated_tokens`; data rows are numbered across chunks."""
    p = input_file(path, "LLM request trace", "the trace's CSV file")
    reader = pd.read_csv(p, dtype={"TIMESTAMP": str}, chunksize=chunk_rows)
    seen = False
    for raw in reader:
        missing = [c for c in ("TIMESTAMP", *TOKEN_COLUMNS.values()) if c not in raw.columns]
        if missing:
            raise ForesightError(f"{p.name}: missing column(s) {', '.join(missing)}; an Azure "
                                 "LLM inference trace has TIMESTAMP, ContextTokens, GeneratedTokens")
        empty = raw["TIMESTAMP"].isna()
        if empty.any():
            raise ForesightError(f"{p.name}: column TIMESTAMP, data row {data_row(empty)} is empty")
        out = pd.DataFrame({"arrived": parse_times(raw["TIMESTAMP"],
                                                   f"{p.name}: column TIMESTAMP")})
        for name, col in TOKEN_COLUMNS.items():
            v = pd.to_numeric(raw[col], errors="coerce")
            # a count: empty, text, a fraction or a negative would make the load up
            bad = v.isna() | (v < 0) | (v != np.floor(v.fillna(0.0))) | ~np.isfinite(v.fillna(0.0))
            if bad.any():
                raise ForesightError(f"{p.name}: column {col}, data row {data_row(bad)}: "
                                     f"{str(raw[col][bad].iloc[0])!r} is not a count of tokens")
            out[name] = v.astype(float)
        seen = seen or not out.empty
        yield out
    if not seen:
        raise ForesightError(f"{p.name}: no requests")


def llm_load(path: str | Path, freq: str = "10s",
             values: tuple[str, ...] | list[str] = VALUES,
             chunk_rows: int = CHUNK_ROWS) -> pd.DataFrame:
    """Per bin of `freq`: the requests arriving and the tokens they bring, one series per
    value of `values` (`requests`, `context_tokens`, `generated_tokens`), on one grid."""
    unknown = [v for v in values if v not in VALUES]
    if unknown or not values:
        raise ForesightError(f"bad value(s) {', '.join(unknown) or '(none)'}: use "
                             f"{', '.join(VALUES)}")
    step = parse_freq(freq)
    name = trace_name(path)
    # summed per bin a chunk at a time: memory follows the bins, not the requests
    per_bin = pd.concat([c.assign(requests=1.0).groupby(c["arrived"].dt.floor(step))[
        list(values)].sum() for c in _chunks(path, chunk_rows)]).groupby(level=0).sum()
    first, last = per_bin.index.min(), per_bin.index.max()
    ids = [f"{name}:{v}" for v in values]
    check_grid(pd.Series([first] * len(ids), index=ids), pd.Series([last] * len(ids), index=ids),
               step, freq)
    grid = pd.date_range(first, last, freq=step)
    per_bin = per_bin.reindex(grid, fill_value=0.0)
    parts = [pd.DataFrame({"unique_id": uid, "ds": grid, "y": per_bin[v].to_numpy(float)})
             for uid, v in zip(ids, values)]
    return pd.concat(parts, ignore_index=True)[LONG_COLUMNS]
