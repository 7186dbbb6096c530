"""An LLM inference request trace (Azure's TIMESTAMP, ContextTokens, GeneratedTokens) as the
demand series of an inference fleet: requests and tokens arriving per bin, the CLI's
`demand series --llm`, its one-line errors, and the bench run end to end on a tiny trace."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.llm_trace import llm_load, trace_name
from ground.errors import ForesightError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def write(path: Path, rows: list[tuple]) -> Path:
    pd.DataFrame(rows, columns=["TIMESTAMP", "ContextTokens", "GeneratedTokens"]).to_csv(
        path, index=False)
    return path


def test_requests_and_tokens_per_bin_with_empty_bins_zero(tmp_path):
    f = write(tmp_path / "AzureLLMInferenceTrace_code.csv", [
        ("2023-11-16 18:17:03.9799600", 100, 10),
        ("2023-11-16 18:17:08.0000000", 50, 5),
        ("2023-11-16 18:17:31.5000000", 7, 3),   # two bins later: the one between is empty
    ])
    s = llm_load(f, "10s")
    assert list(s.columns) == ["unique_id", "ds", "y"]
    wide = s.pivot(index="ds", columns="unique_id", values="y")
    assert list(wide.columns) == ["code:context_tokens", "code:generated_tokens", "code:requests"]
    assert wide.index[0] == pd.Timestamp("2023-11-16 18:17:00", tz="UTC")
    assert wide["code:requests"].tolist() == [2.0, 0.0, 0.0, 1.0]
    assert wide["code:context_tokens"].tolist() == [150.0, 0.0, 0.0, 7.0]
    assert wide["code:generated_tokens"].tolist() == [15.0, 0.0, 0.0, 3.0]
    one = llm_load(f, "1min", values=["requests"])
    assert one["unique_id"].unique().tolist() == ["code:requests"] and one["y"].tolist() == [3.0]


def test_chunked_reading_sums_the_same_bins_and_numbers_rows_across_chunks(tmp_path):
    f = poisson_trace(tmp_path / "t.csv", 5, 7)
    whole = llm_load(f, "10s")
    pd.testing.assert_frame_equal(llm_load(f, "10s", chunk_rows=7), whole)
    raw = pd.read_csv(f)
    raw.loc[20, "GeneratedTokens"] = -1  # data row 21, in the third chunk of 7 rows
    raw.to_csv(f, index=False)
    with pytest.raises(ForesightError, match="column GeneratedTokens, data row 21:"):
        llm_load(f, "10s", chunk_rows=7)


def test_trace_names_come_from_the_file():
    assert trace_name("x/AzureLLMInferenceTrace_conv_1week.csv") == "conv_1week"
    assert trace_name("x/my_requests.csv") == "my_requests"
    assert trace_name("x/AzureLLMInferenceTrace_.csv") == "AzureLLMInferenceTrace_"


@pytest.mark.parametrize("rows, needle", [
    ([("2023-11-16 18:17:03", -1, 10)], "column ContextTokens, data row 1"),
    ([("2023-11-16 18:17:03", 1, 10), ("2023-11-16 18:17:04", 2, 2.5)],
     "column GeneratedTokens, data row 2"),
    ([("2023-11-16 18:17:03", 1, 10), ("2023-11-16 18:17:04", "many", 2)],
     "column ContextTokens, data row 2"),
    ([("2023-11-16 18:17:03", 1, 10), ("yesterday", 1, 2)], "column TIMESTAMP, data row 2"),
    ([("2023-11-16 18:17:03", 1, 10), (None, 1, 2)], "column TIMESTAMP, data row 2 is empty"),
    ([], "no requests"),
])
def test_bad_rows_are_named(tmp_path, rows, needle):
    f = write(tmp_path / "t.csv", rows)
    with pytest.raises(ForesightError, match=needle):
        llm_load(f, "10s")


def test_other_formats_and_options_are_refused(tmp_path):
    other = tmp_path / "other.csv"
    pd.DataFrame({"unique_id": ["a"], "ds": ["2023-01-01"], "y": [1]}).to_csv(other, index=False)
    with pytest.raises(ForesightError, match="missing column.*TIMESTAMP, ContextTokens"):
        llm_load(other)
    f = write(tmp_path / "t.csv", [("2023-11-16 18:17:03", 1, 10)])
    with pytest.raises(ForesightError, match="bad value"):
        llm_load(f, values=["prompts"])
    with pytest.raises(ForesightError, match="frequency"):
        llm_load(f, "-1s")
    with pytest.raises(ForesightError, match="is a directory"):
        llm_load(tmp_path)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight.cli", "demand", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, COLUMNS="200"))


def poisson_trace(path: Path, minutes: int, seed: int) -> Path:
    """Requests at a rate that drifts over the trace, tokens of a code-completion mix."""
    rng = np.random.default_rng(seed)
    sec = np.arange(minutes * 60)
    n = rng.poisson(2.0 + 1.5 * np.sin(sec / 600))
    t = np.repeat(sec, n) + rng.random(n.sum())
    stamps = (pd.Timestamp("2023-11-16 18:00") + pd.to_timedelta(np.sort(t), unit="s"))
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"),
                  "ContextTokens": rng.integers(3, 8000, len(t)),
                  "GeneratedTokens": rng.integers(6, 400, len(t))}).to_csv(path, index=False)
    return path


def test_cli_series_feeds_backtest(tmp_path):
    trace = poisson_trace(tmp_path / "AzureLLMInferenceTrace_conv.csv", 60, 1)
    s = tmp_path / "S.csv"
    proc = cli("series", "--llm", str(trace), "--freq", "10s", "--out", str(s))
    assert proc.returncode == 0, proc.stderr
    got = pd.read_csv(s)
    assert got.groupby("unique_id")["y"].sum()["conv:requests"] == len(pd.read_csv(trace))
    pred = tmp_path / "P.csv"
    proc = cli("backtest", "--series", str(s), "--freq", "10s", "--horizon", "1min", "--agg",
               "mean", "--target", "rate", "--val-bins", "36", "--no-ets",
               "--test-start", "2023-11-16T18:40:00Z", "--out", str(pred))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # three series in three units: each is shown against its own best baseline
    assert "per series, test origins" in proc.stdout
    assert all(f"conv:{v}" in proc.stdout for v in ("requests", "context_tokens",
                                                     "generated_tokens"))
    p = pd.read_csv(pred)
    assert set(p["unique_id"]) == {"conv:requests", "conv:context_tokens", "conv:generated_tokens"}
    assert (p["p10"] <= p["p90"]).all()


def test_cli_bad_trace_is_one_line_and_writes_nothing(tmp_path):
    bad = write(tmp_path / "t.csv", [("2023-11-16 18:17:03", 1, 10), ("2023-11-16 18:17:04", -3, 1)])
    out = tmp_path / "S.csv"
    proc = cli("series", "--llm", str(bad), "--freq", "10s", "--out", str(out))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "ContextTokens, data row 2" in lines[0], proc.stderr
    assert not out.exists()


def test_bench_on_tiny_traces_chooses_on_dev_and_scores_the_rest(tmp_path):
    dev = poisson_trace(tmp_path / "AzureLLMInferenceTrace_a.csv", 60, 2)
    held = poisson_trace(tmp_path / "AzureLLMInferenceTrace_b.csv", 60, 3)
    out = f"test_llm_{uuid.uuid4().hex[:8]}.md"
    try:
        proc = subprocess.run([sys.executable, "bench/demand_llm.py", "--dev", str(dev),
                               "--held-out", str(held), "--out", out], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = (RESULTS / out).read_text()
    finally:
        (RESULTS / out).unlink(missing_ok=True)
    assert "## Choice: `a`, dev test only" in text
    assert "### `a`, final test (dev trace, held-out time)" in text
    assert "### `b`, dev test (held-out trace)" in text and "### `b`, final test" in text
    assert "### `a`, dev test" not in text  # the choice's own window is not scored as held out
    assert "- verdict, over every part scored once:" in text
