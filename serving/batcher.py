"""Micro-batching of concurrent interference predictions.

Why: InterferenceModel.predict has a fixed cost per call (numpy feature building and two
booster calls) whatever the row count, so one call per single-pair request would cap the API
on cache misses. Requests that arrive while a predict runs are merged into the next call.

Leader/follower rather than a worker thread: the first request thread that finds no predict
running makes the call itself, so a lone request costs no thread hand-off (each hand-off can
wait for the GIL while the event loop parses other requests). While it runs, later requests
queue; the leader then serves everything queued, in one call per model object, before it
returns. A merged call that fails is retried request by request, so a bad row fails its own
request only.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pandas as pd

from features.pairs import CONTEXT_COLUMNS, IDENTITY_COLUMNS

_TEXT = frozenset(IDENTITY_COLUMNS + CONTEXT_COLUMNS)
OUT_COLUMNS = ("a_speed_pred", "b_speed_pred", "a_speed_p10", "b_speed_p10")
#: With `admit`: also each side's margin unit, which the admission bound is scaled by.
ADMIT_COLUMNS = OUT_COLUMNS + ("a_speed_unit", "b_speed_unit")


def pair_frame(rows: list[dict]) -> pd.DataFrame:
    """Validated rows -> pair table, built column by column (a fifth of `from_records`' cost).

    An absent value is NaN, as `from_records` gives. A solo feature given for one side only
    gets its twin as an all-NaN column (the model rejects a feature on one side only)."""
    names: set[str] = set()
    for r in rows:
        names.update(r)
    for c in [c for c in names if c[:2] in ("a_", "b_") and c not in _TEXT]:
        names.add(("b_" if c[0] == "a" else "a_") + c[2:])
    nan = float("nan")
    cols: dict[str, Any] = {}
    for c in sorted(names):
        if c in _TEXT:
            cols[c] = np.array([r.get(c, nan) for r in rows], dtype=object)
        else:
            cols[c] = np.array([r.get(c, nan) for r in rows], dtype=np.float64)
    return pd.DataFrame(cols, index=pd.RangeIndex(len(rows)), copy=False)


class _Job:
    __slots__ = ("model", "rows", "admit", "done", "result", "error")

    def __init__(self, model: Any, rows: list[dict], admit: bool) -> None:
        self.model, self.rows, self.admit = model, rows, admit
        self.done = threading.Event()
        self.result: dict[str, np.ndarray] | None = None
        self.error: BaseException | None = None


class MicroBatcher:
    def __init__(self, max_rows: int = 20_000) -> None:
        self.max_rows = max_rows
        self._lock = threading.Lock()  # guards _pending and _busy together: no lost wake-up
        self._pending: list[_Job] = []
        self._busy = False
        self.calls = 0  # predict calls made (tests read it)

    def predict(self, model: Any, rows: list[dict], admit: bool = False
                ) -> dict[str, np.ndarray]:
        """The model's four speed columns for `rows`, with `admit` also its margin units
        (ADMIT_COLUMNS; blocking; called from a request thread)."""
        job = _Job(model, rows, admit)
        with self._lock:
            self._pending.append(job)
            lead = not self._busy
            self._busy = True
        if lead:
            self._lead()
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _lead(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._busy = False
                    return
                jobs, n = [], 0
                while self._pending and (not jobs or n + len(self._pending[0].rows)
                                         <= self.max_rows):
                    jobs.append(self._pending.pop(0))
                    n += len(jobs[-1].rows)
            by_model: dict[tuple[int, bool], list[_Job]] = {}
            for j in jobs:  # one call per model object and kind of answer
                by_model.setdefault((id(j.model), j.admit), []).append(j)
            for group in by_model.values():
                self._serve(group)

    def _serve(self, group: list[_Job]) -> None:
        try:
            self._call(group)
        except BaseException:  # noqa: BLE001 - retried alone, so each job gets its own error
            for j in group:
                try:
                    self._call([j])
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
                    j.error = exc
        finally:
            for j in group:
                if j.result is None and j.error is None:
                    j.error = RuntimeError("prediction was not computed")
                j.done.set()

    def _call(self, group: list[_Job]) -> None:
        rows = group[0].rows if len(group) == 1 else [r for j in group for r in j.rows]
        model, admit = group[0].model, group[0].admit
        out = model.predict(pair_frame(rows), admit=True) if admit \
            else model.predict(pair_frame(rows))
        self.calls += 1
        want = ADMIT_COLUMNS if admit else OUT_COLUMNS
        if tuple(out.columns) == want:  # the model's own order: one conversion
            arr = out.to_numpy(np.float64)
            cols = {c: arr[:, i] for i, c in enumerate(want)}
        else:
            cols = {c: np.asarray(out[c], dtype=np.float64) for c in want}
        start = 0
        for j in group:
            j.result = {c: v[start:start + len(j.rows)] for c, v in cols.items()}
            start += len(j.rows)
