"""POST /v1/usage: the usage model in service over real HTTP, the served predictor named per
pod, forecasts equal to the model's own backtest at the same origin, and bad input as a 422."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from artifacts.registry import Registry
from forecaster.usage.model import UsageForecaster
from serving.app import create_api
from serving.store import ModelStore
from test_usage import mixed_series

START = pd.Timestamp("2026-01-01T07:00Z")
FIELDS = {"features": ["lag1"], "training_window": {"start": "2026-01-01", "end": "2026-01-02"},
          "data_hash": "abc", "metrics": {"primary": "mae", "mae": 0.1}, "code_version": "test"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    df = mixed_series(seed=2)
    m = UsageForecaster(horizon=10, n_estimators=60, hurdle=True, recent_window=30,
                        recent_scope="fleet").fit(df[df["ds"] < START])
    tmp = tmp_path_factory.mktemp("u")
    m.save(tmp / "model")
    Registry(tmp / "reg").publish("usage", tmp / "model", FIELDS)
    store = ModelStore(str(tmp / "reg"))
    store.refresh()
    return TestClient(create_api(store)), m, df


def _body(df: pd.DataFrame) -> dict:
    return {"series": [{"unique_id": r.unique_id, "ds": r.ds.isoformat(), "y": float(r.y)}
                       for r in df.itertuples(index=False)]}


def test_usage_forecast_matches_the_backtest_at_the_same_origin(served):
    client, m, df = served
    origin = START + pd.Timedelta("90min")
    r = client.post("/v1/usage", json=_body(df[df["ds"] < origin]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == "1" and body["horizon_bins"] == 10
    got = pd.DataFrame(body["forecasts"]).set_index("unique_id")
    assert len(got) == df["unique_id"].nunique()
    assert (pd.to_datetime(got["origin"], utc=True) == origin).all()
    ref = m.predict_origins(df, START)
    ref = ref[pd.to_datetime(ref["origin"], utc=True) == origin].set_index("unique_id")
    np.testing.assert_allclose(got.loc[ref.index, "p50"], ref["p50"], rtol=1e-9)
    np.testing.assert_allclose(got.loc[ref.index, "p90"], ref["p90"], rtol=1e-9)
    assert (got.loc[ref.index, "model"] == ref["model"]).all()
    assert set(got["model"]) <= {"model", "last_value", "mean_last_h", "ses"}
    assert (got["p10"] <= got["p50"]).all() and (got["p50"] <= got["p90"]).all()


def _stretch(ds: str, k: int, plus_s: int = 0) -> str:
    """`ds` k times as far from START, plus_s seconds later."""
    t = pd.Timestamp(ds)
    return (START + (t - START) * k + pd.Timedelta(seconds=plus_s)).isoformat()


@pytest.mark.parametrize("mutate,field", [
    (lambda b: b["series"][0].update(ds="yesterday"), "series.ds"),
    (lambda b: b["series"][0].update(y=-1.0), "y"),
    (lambda b: b["series"].append(dict(b["series"][0])), "two rows"),
    (lambda b: b.update(series=[dict(b["series"][0]), {**b["series"][0], "unique_id": "x"}]),
     "two bins"),
    (lambda b: b["series"][0].update(extra=1), "extra"),
    # a naive time among zoned ones (pandas would shift it by their offset)
    (lambda b: b["series"][0].update(ds=b["series"][0]["ds"][:19]), "mixed"),
    (lambda b: b["series"][1].update(ds=""), "series.ds"),
    (lambda b: [r.update(ds=_stretch(r["ds"], 2)) for r in b["series"]], "fitted on"),
    (lambda b: b["series"][1].update(ds=_stretch(b["series"][1]["ds"], 1, 17)), "off the"),
])
def test_bad_usage_input_is_a_422_naming_the_field(served, mutate, field):
    client, _, df = served
    b = _body(df[df["ds"] < START].groupby("unique_id").tail(40))
    mutate(b)
    r = client.post("/v1/usage", json=b)
    assert r.status_code == 422 and field in r.text, r.text


def test_usage_without_a_model_is_a_503_with_the_reason(tmp_path):
    store = ModelStore(str(tmp_path / "empty"))
    store.refresh()
    r = TestClient(create_api(store)).post("/v1/usage", json={"series": [
        {"unique_id": "a", "ds": "2026-01-01T00:00:00Z", "y": 1.0},
        {"unique_id": "a", "ds": "2026-01-01T00:01:00Z", "y": 1.0}]})
    assert r.status_code == 503 and "usage model unavailable" in r.json()["error"]
