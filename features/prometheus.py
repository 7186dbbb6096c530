"""Metric sources: where history comes from.

`MetricSource` is the small interface the rest of the project sees (Robusta KRR style);
`PrometheusSource` implements it on prometheus-api-client for Prometheus and anything that
speaks its query API (Thanos, Mimir, VictoriaMetrics).
"""
from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from ground.errors import ForesightError, MetricMissing, SourceUnavailable

#: Prometheus refuses range queries that would return more than 11,000 points per series.
MAX_POINTS_PER_SERIES = 11_000



def check_url(url: str | None) -> None:
    """A Prometheus-compatible base URL (Prometheus, Thanos Query, Mimir), or a one-line error."""
    if not re.match(r"^https?://[^/\s]+", url or ""):
        raise ForesightError(f"invalid Prometheus URL {url!r}: expected http(s)://host:port")

class MetricSource(ABC):
    """Anything that answers PromQL over a time range."""

    @abstractmethod
    def query_range(self, query: str, start: datetime, end: datetime, step_s: float) -> pd.DataFrame:
        """One row per sample: the series' labels as columns, then `ts` (UTC) and `value`."""

    @abstractmethod
    def query(self, query: str, at: datetime) -> pd.DataFrame:
        """Instant query: one row per series, labels as columns, then `ts` and `value`."""


def split_range(start: float, end: float, step_s: float,
                max_points: int = MAX_POINTS_PER_SERIES) -> list[tuple[float, float]]:
    """Split [start, end] into chunks of at most `max_points` evaluation points each.

    Chunks lie on the same step grid as the whole range and share their boundary point, so
    the caller must de-duplicate by timestamp (which it does) and no point is ever skipped.
    """
    if step_s <= 0:
        raise ForesightError(f"step must be positive, got {step_s}")
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    span = (max_points - 1) * step_s
    chunks, lo = [], start
    while True:
        hi = min(lo + span, end)
        chunks.append((lo, hi))
        if hi >= end:
            return chunks
        lo = hi


class PrometheusSource(MetricSource):
    """Prometheus query API client with splitting, retries, auth and one-line errors."""

    def __init__(self, url: str, *, token: str | None = None, username: str | None = None,
                 password: str | None = None, ca_file: str | None = None,
                 insecure: bool = False, timeout_s: float = 60.0, retries: int = 3,
                 backoff_s: float = 0.5, max_points: int = MAX_POINTS_PER_SERIES,
                 tenant: str | None = None) -> None:
        self.url = url
        self.token = token
        self.tenant = tenant  # Mimir / Cortex / Loki-style multi-tenancy: X-Scope-OrgID
        self.username = username
        self.password = password
        self.ca_file = ca_file
        self.insecure = insecure
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_points = max_points
        self._client: PrometheusConnect | None = None

    # -- connection ---------------------------------------------------------------------
    def _connect(self) -> PrometheusConnect:
        if self._client is None:
            check_url(self.url)
            if self.ca_file and not self.insecure and not os.path.exists(self.ca_file):
                raise ForesightError(f"CA bundle not found: {self.ca_file}")
            session = requests.Session()
            session.verify = False if self.insecure else (self.ca_file or True)
            # Retries on 5xx/429 and on connect/read errors, with exponential backoff.
            # raise_on_status=False hands us the last response so the status can be named.
            retry = Retry(total=self.retries, connect=self.retries, read=self.retries,
                          status=self.retries, backoff_factor=self.backoff_s,
                          status_forcelist=(429, 500, 502, 503, 504),
                          allowed_methods=frozenset({"GET", "POST"}), raise_on_status=False)
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            if self.tenant:
                headers["X-Scope-OrgID"] = self.tenant
            auth = (self.username, self.password or "") if self.username else None
            self._client = PrometheusConnect(url=self.url.rstrip("/"), headers=headers or None, auth=auth,
                                             retry=retry, session=session, timeout=self.timeout_s)
        return self._client

    def check(self) -> None:
        """Raise SourceUnavailable unless the server answers a trivial query."""
        self.query("vector(1)", datetime.now(timezone.utc))

    def _call(self, fn, *args, what: str, **kwargs):
        try:
            return fn(*args, **kwargs)
        except requests.exceptions.SSLError as exc:
            raise SourceUnavailable(f"TLS handshake with {self.url} failed: {_first_line(exc)}") from None
        except requests.exceptions.Timeout:
            raise SourceUnavailable(f"Prometheus at {self.url} did not answer within "
                                    f"{self.timeout_s:g}s ({self.retries} retries)") from None
        except requests.exceptions.ConnectionError as exc:
            if "timed out" in str(exc):  # urllib3 wraps exhausted read timeouts as connection errors
                raise SourceUnavailable(f"Prometheus at {self.url} did not answer within "
                                        f"{self.timeout_s:g}s ({self.retries} retries)") from None
            raise SourceUnavailable(f"cannot reach Prometheus at {self.url} "
                                    f"(connection failed after {self.retries} retries)") from None
        except requests.exceptions.RequestException as exc:
            raise SourceUnavailable(f"request to {self.url} failed: {_first_line(exc)}") from None
        except PrometheusApiClientException as exc:
            raise _http_error(str(exc), self.url, what) from None
        except (ValueError, KeyError) as exc:  # body that is not the query API's JSON
            raise SourceUnavailable(f"{self.url} did not answer like a Prometheus query API "
                                    f"({type(exc).__name__})") from None

    # -- queries ------------------------------------------------------------------------
    def query(self, query: str, at: datetime) -> pd.DataFrame:
        client = self._connect()
        result = self._call(client.custom_query, query, params={"time": _ts(at)}, what=query)
        rows = [{**r["metric"], "ts": float(r["value"][0]), "value": float(r["value"][1])}
                for r in result]
        df = pd.DataFrame(rows, columns=None if rows else ["ts", "value"])
        df["ts"] = pd.to_datetime(df["ts"], unit="s", utc=True)
        return df

    def query_range(self, query: str, start: datetime, end: datetime, step_s: float) -> pd.DataFrame:
        s, e = _ts(start), _ts(end)
        if e <= s:
            raise ForesightError(f"empty time range: start {_iso(start)} is not before end {_iso(end)}")
        client = self._connect()
        series: dict[tuple, list[np.ndarray]] = {}
        for lo, hi in split_range(s, e, step_s, self.max_points):
            result = self._call(client.custom_query_range, query, datetime.fromtimestamp(lo, timezone.utc),
                                datetime.fromtimestamp(hi, timezone.utc), f"{step_s:g}s", what=query)
            for r in result:
                key = tuple(sorted(r["metric"].items()))
                values = r["values"]
                arr = np.empty((len(values), 2))
                arr[:, 0] = [v[0] for v in values]
                arr[:, 1] = np.array([v[1] for v in values], dtype=np.float64)
                series.setdefault(key, []).append(arr)
        return _frame(series)

    def require(self, metric: str, start: datetime, end: datetime) -> None:
        """Raise MetricMissing when `metric` has no series anywhere in [start, end]."""
        window = max(int(_ts(end) - _ts(start)), 1)
        found = self.query(f"count(last_over_time({metric}[{window}s]))", end)
        if found.empty or found["value"].iloc[0] == 0:
            raise MetricMissing(f"metric {metric} has no series between {_iso(start)} and {_iso(end)} "
                                f"at {self.url}: is its exporter scraped?")


def _frame(series: dict[tuple, list[np.ndarray]]) -> pd.DataFrame:
    """Concatenate per-series chunks into one long frame, dropping chunk-boundary duplicates.

    Series come out in the order of their sorted label sets, each sorted by time, so the
    result is deterministic without a global sort. Label columns are built per series and
    repeated (not per sample): this is what keeps millions of samples cheap.
    """
    keys = sorted(series)
    if not keys:
        return pd.DataFrame({"ts": pd.Series([], dtype="datetime64[ns, UTC]"),
                             "value": pd.Series([], dtype="float64")})
    blocks = []
    for key in keys:
        arr = np.concatenate(series[key])
        _, first = np.unique(arr[:, 0], return_index=True)  # sorted, first occurrence kept
        blocks.append(arr[first])
    lengths = np.array([len(b) for b in blocks])
    data = np.concatenate(blocks)
    names = sorted({name for key in keys for name, _ in key})
    out = {}
    for name in names:
        per_series = np.array([dict(key).get(name, "") for key in keys], dtype=object)
        out[name] = pd.array(np.repeat(per_series, lengths), dtype="string")
    # float seconds -> integer milliseconds (Prometheus' resolution) avoids float rounding
    out["ts"] = pd.to_datetime(np.round(data[:, 0] * 1000).astype("int64"), unit="ms", utc=True)
    out["value"] = data[:, 1]
    return pd.DataFrame(out)


def _http_error(message: str, url: str, what: str) -> ForesightError:
    m = re.search(r"HTTP Status Code (\d+) \((.*)\)$", message, re.S)
    status = int(m.group(1)) if m else 0
    detail = ""
    if m:
        body = m.group(2)
        try:
            detail = json.loads(eval_bytes(body)).get("error", "")
        except (ValueError, AttributeError, SyntaxError):
            detail = ""
    if status in (401, 403):
        if "org id" in message.lower():  # Mimir / Cortex without X-Scope-OrgID
            return SourceUnavailable(f"{url} wants a tenant (HTTP {status}, no org id): give "
                                     "--tenant or FORESIGHT_PROM_TENANT")
        return SourceUnavailable(f"Prometheus at {url} rejected the credentials (HTTP {status})")
    if status == 400 or status == 422:
        return ForesightError(f"Prometheus rejected the query {what!r}: {detail or 'bad request'}")
    if status == 404:
        return SourceUnavailable(f"{url} has no Prometheus query API (HTTP 404): check the URL path")
    return SourceUnavailable(f"Prometheus at {url} answered HTTP {status or '?'}"
                             + (f": {detail}" if detail else ""))


def eval_bytes(literal: str) -> str:
    """Decode the `b'...'` repr that prometheus-api-client puts in its error messages."""
    import ast

    value = ast.literal_eval(literal)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _ts(t: datetime | float | pd.Timestamp) -> float:
    if isinstance(t, (int, float)):
        return float(t)
    ts = pd.Timestamp(t)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.timestamp()


def _iso(t) -> str:
    return pd.Timestamp(_ts(t), unit="s", tz="UTC").isoformat()


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
