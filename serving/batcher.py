"""Micro-batching of concurrent interference predictions.

Why: InterferenceModel.predict has a fixed cost of ~10-30 ms (pandas set-up) whatever the row
count, so one call per single-pair request caps the API at a few dozen cache-missing requests
per second. Requests waiting in the thread pool are merged: one worker thread takes everything
queued for the same model object and predicts it in one call. A batch whose merged predict
fails is retried request by request, so a bad row fails its own request only.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable

import numpy as np
import pandas as pd


def pair_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows -> pair table; a solo feature given for one side only gets its twin as NaN (the
    model rejects a table with a feature on one side only)."""
    df = pd.DataFrame.from_records(rows)
    for c in [c for c in df.columns if c[:2] in ("a_", "b_") and c[2:] != "workload"]:
        twin = ("b_" if c[0] == "a" else "a_") + c[2:]
        if twin not in df.columns:
            df[twin] = np.nan
    return df


class _Job:
    __slots__ = ("model", "rows", "done", "result", "error")

    def __init__(self, model: Any, rows: list[dict]) -> None:
        self.model, self.rows = model, rows
        self.done = threading.Event()
        self.result: pd.DataFrame | None = None
        self.error: BaseException | None = None


class MicroBatcher:
    def __init__(self, max_rows: int = 20_000) -> None:
        self.max_rows = max_rows
        self._q: queue.Queue[_Job] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.calls = 0  # predict calls made (tests read it)

    def predict(self, model: Any, rows: list[dict]) -> pd.DataFrame:
        """The model's predictions for `rows` (blocking; called from a request thread)."""
        with self._lock:
            if self._thread is None:  # started on first use: no thread at import time
                self._thread = threading.Thread(target=self._run, name="foresight-batcher",
                                                daemon=True)
                self._thread.start()
        job = _Job(model, rows)
        self._q.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _run(self) -> None:
        while True:
            jobs = [self._q.get()]
            n = len(jobs[0].rows)
            while n < self.max_rows:
                try:
                    jobs.append(self._q.get_nowait())
                except queue.Empty:
                    break
                n += len(jobs[-1].rows)
            by_model: dict[int, list[_Job]] = {}
            for j in jobs:
                by_model.setdefault(id(j.model), []).append(j)
            for group in by_model.values():
                self._serve(group)

    def _serve(self, group: list[_Job]) -> None:
        try:
            self._call(group[0].model.predict, group)
        except BaseException:  # noqa: BLE001 - retried alone, so each job gets its own error
            for j in group:
                try:
                    self._call(j.model.predict, [j])
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
                    j.error = exc
        finally:
            for j in group:
                if j.result is None and j.error is None:
                    j.error = RuntimeError("prediction was not computed")
                j.done.set()

    def _call(self, fn: Callable[[pd.DataFrame], pd.DataFrame], group: list[_Job]) -> None:
        rows = [r for j in group for r in j.rows]
        out = fn(pair_frame(rows)).reset_index(drop=True)
        self.calls += 1
        start = 0
        for j in group:
            j.result = out.iloc[start:start + len(j.rows)]
            start += len(j.rows)
