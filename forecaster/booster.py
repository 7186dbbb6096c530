"""A LightGBM model read back from its text file (artifacts are never pickled)."""
from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pandas as pd


class LoadedBooster:
    """A Booster with the `predict` of the scikit-learn wrappers and their `booster_`, so a
    loaded model predicts and saves like a fitted one. `classes`: a multiclass booster's
    predict returns the class index (LGBMClassifier.predict), not the probabilities."""

    def __init__(self, booster: lgb.Booster, classes: bool = False) -> None:
        self.booster_, self.classes = booster, classes

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        out = self.booster_.predict(X)
        if not self.classes:
            return out
        # two classes are saved as a binary booster: one probability (of class 1) per row
        return np.argmax(out, axis=1) if np.ndim(out) == 2 else (out > 0.5).astype(int)
