"""Train the LightGBM models through LightGBM's Dask interface on an existing Dask cluster.

Why subclasses: the estimators in forecaster/ own their features, calibration and artifact
format; only the booster training call changes. `DaskInterferenceModel` overrides the one
method that trains a booster, `DaskDemandForecaster` the one that makes the regressor, so the
artifacts are byte-compatible with the local path (same manifest kind, same loader) and the
registry, gate and serving do not know which path trained them.
"""
from __future__ import annotations

import warnings

import lightgbm as lgb
import numpy as np
import pandas as pd

from ground.errors import ForesightError
from forecaster.demand.model import DemandForecaster
from forecaster.interference.model import InterferenceModel
from forecaster.usage.model import UsageForecaster


def connect(address: str, timeout_s: float = 20.0):
    """A distributed.Client for `tcp://HOST:PORT`; one-line error when it is unreachable."""
    try:
        from distributed import Client
    except ImportError:
        raise ForesightError("--dask-scheduler needs dask[distributed]: pip install 'dask[distributed]'") from None
    try:
        return Client(address, timeout=timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: 'notaurl' (no port)
        raise ForesightError(f"cannot reach the Dask scheduler at {address}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def _partitions(client, X: pd.DataFrame, y: np.ndarray):
    import dask.dataframe as dd

    n = max(1, len(client.scheduler_info()["workers"]))
    Xd = dd.from_pandas(X.reset_index(drop=True), npartitions=n)
    yd = dd.from_pandas(pd.Series(np.asarray(y, dtype=float), name="y"), npartitions=n)
    return Xd, yd


def dask_booster(client, X: pd.DataFrame, y: np.ndarray, params: dict, rounds: int,
                 categorical: list[str] | None = None,
                 init: np.ndarray | None = None) -> lgb.Booster:
    """lgb.train's equivalent on the Dask cluster (`init`: the init_score, e.g. the
    interference model's structured prior); returns the (local) booster."""
    import dask.dataframe as dd
    from lightgbm.dask import DaskLGBMRegressor

    Xd, yd = _partitions(client, X, y)
    p = {k: v for k, v in params.items() if k not in ("num_threads", "deterministic")}
    reg = DaskLGBMRegressor(client=client, n_estimators=rounds, **p)
    kw = {}
    if init is not None:  # partitioned as X and y are (same row order, same count)
        kw["init_score"] = dd.from_pandas(pd.Series(np.asarray(init, float), name="init"),
                                          npartitions=Xd.npartitions)
    with warnings.catch_warnings():  # lightgbm.dask sets threads per worker itself, by design
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        reg.fit(Xd, yd, categorical_feature=categorical or "auto", **kw)
    return reg.booster_


class DaskInterferenceModel(InterferenceModel):
    """InterferenceModel whose point and p10 boosters train on a Dask cluster."""

    # trailing underscore: not a constructor parameter, so never written into the manifest
    dask_client_ = None

    def _train(self, X: pd.DataFrame, y: np.ndarray, extra: dict,
               init: np.ndarray | None = None) -> lgb.Booster:
        captured: dict = {}
        real_train = lgb.train

        # Run the local method with lgb.train swapped for a recorder: the booster parameters
        # (monotone constraints, categoricals, objective) stay the estimator's, not a copy.
        def capture(params, ds, num_boost_round):
            captured.update(params=params, rounds=num_boost_round,
                            cats=[c for c in (ds.categorical_feature or []) if c != "auto"]
                            if isinstance(ds.categorical_feature, list) else None)
            return None

        lgb.train = capture
        try:
            super()._train(X, y, extra, init)
        finally:
            lgb.train = real_train
        return dask_booster(self.dask_client_, X, y, captured["params"], captured["rounds"],
                            captured["cats"], init)


class _DaskRegressor:
    """The LGBMRegressor surface DemandForecaster uses (fit, predict, booster_)."""

    def __init__(self, client, base: lgb.LGBMRegressor) -> None:
        self.client, self.base = client, base

    def fit(self, X: pd.DataFrame, y) -> "_DaskRegressor":
        params = self.base.get_params()
        rounds = params.pop("n_estimators")
        params.pop("n_jobs", None)
        params.pop("importance_type", None)
        params = {k: v for k, v in params.items() if v is not None}
        self.booster_ = dask_booster(self.client, X, np.asarray(y), params, rounds)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.booster_.predict(X)


class DaskDemandForecaster(DemandForecaster):
    dask_client_ = None

    def _lgb(self):
        return _DaskRegressor(self.dask_client_, super()._lgb())


class DaskUsageForecaster(UsageForecaster):
    dask_client_ = None

    def _lgb(self, params: dict | None = None):
        return _DaskRegressor(self.dask_client_, super()._lgb(params))


def fit_usage_dask(series: pd.DataFrame, client, **kw) -> UsageForecaster:
    m = DaskUsageForecaster(**kw)
    m.dask_client_ = client
    return m.fit(series)


def fit_interference_dask(pairs: pd.DataFrame, cfg, client,
                          solo: pd.DataFrame | None = None) -> InterferenceModel:
    m = DaskInterferenceModel(n_estimators=cfg.n_estimators, n_threads=cfg.threads,
                              alpha=cfg.interference_alpha,
                              admit_risk=cfg.interference_admit_risk, seed=cfg.seed)
    m.dask_client_ = client
    return m.fit(pairs, solo=solo)


def fit_demand_dask(series: pd.DataFrame, cfg, client, **kw) -> DemandForecaster:
    m = DaskDemandForecaster(**kw)
    m.dask_client_ = client
    return m.fit(series)
