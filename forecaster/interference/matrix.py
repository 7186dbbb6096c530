"""The interference model's directed feature matrix, built with numpy from a pair table: the
prediction path (training builds its matrix from the directed DataFrame, model._matrix)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from features.pairs import pair_arrays
from forecaster.interference.features import pair_columns
from forecaster.interference.identity import ID_FEATURES
from forecaster.interference.solo import fill_solo


def predict_matrix(model: Any, pairs: pd.DataFrame) -> np.ndarray:
    """The directed feature matrix (rows: a slowed by b, then b slowed by a; columns:
    `feature_names_`), built with numpy from the pair table's columns.

    Why not `_matrix(directed(...))`: its DataFrame construction cost 25-35 ms per call
    whatever the row count, and the API scores single pairs. Same values (a test holds
    the two paths equal); a column the table lacks is missing (NaN), as in training.
    """
    cols = pair_arrays(pairs)
    n = len(pairs)
    if model.solo_:  # known workloads asked by name: their measured solo features
        cols = fill_solo(cols, n, model.solo_, model.side_features_)
    pos = {c: i for i, c in enumerate(model.feature_names_)}
    X = np.full((2 * n, len(pos)), np.nan)
    nan = np.full(n, np.nan)
    for f in model.side_features_:
        a, b = cols.get(f"a_{f}", nan), cols.get(f"b_{f}", nan)
        for name, values, _ in pair_columns(f, np.concatenate([a, b]),
                                            np.concatenate([b, a])):
            if name in pos:
                X[:, pos[name]] = values
    for c, cats in model.categories_.items():
        if c in cols and c in pos:
            code = {v: float(i) for i, v in enumerate(cats)}
            v = np.fromiter((code.get(x, np.nan) for x in cols[c]), float, count=n)
            X[:, pos[c]] = np.concatenate([v, v])
    sharing = np.asarray(cols.get("sharing", np.full(n, "", object)), object)
    if model.mechanism_ is not None and "mech_speed" in pos:
        both = {"sharing": np.concatenate([sharing, sharing])}
        for f in model.side_features_:
            a, b = cols.get(f"a_{f}", nan), cols.get(f"b_{f}", nan)
            both[f"self_{f}"], both[f"partner_{f}"] = np.r_[a, b], np.r_[b, a]
        X[:, pos["mech_speed"]] = model.mechanism_.predict(both)
    if model.encoder_ is not None:
        empty = np.full(n, "", dtype=object)
        a, b = cols.get("a_workload", empty), cols.get("b_workload", empty)
        ids = model.encoder_.transform_arrays(np.concatenate([a, b]), np.concatenate([b, a]))
        for j, name in enumerate(ID_FEATURES):
            if name in pos:
                X[:, pos[name]] = ids[:, j]
    return X
