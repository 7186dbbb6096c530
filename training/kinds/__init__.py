"""Model kinds as plugins: one small module per kind, each exposing the same functions.

A kind module defines `NAME`, `PRIMARY` (a backtest metric, lower is better) and:
  prepare(history, cfg) -> data            build the kind's training table from the history
  split(data, cutoff) -> (train, test)     train: strictly before `cutoff`; test: after it
  fit(train, cfg) -> model                 an estimator of forecaster/
  score(model, test, train) -> (metrics, predictions)   backtest, with baselines
  save(model, dir) / load(dir) -> model    the estimator's own files (no pickle)
  features(model) -> list[str]
  plot(predictions, ax) -> str             one matplotlib panel for report.html; returns the
                                           one-line reading printed under it
  extra_plot(predictions, ax) -> str       optional second panel
It raises SkipKind when the history cannot train it (too few pairs, no queues, ...).
"""
from __future__ import annotations

import importlib
from types import ModuleType

#: Kinds wired into the pipeline, in training order.
KINDS = ("fingerprint", "interference", "demand", "usage", "runtime")


class SkipKind(Exception):
    """This history cannot train or test this kind; the message says why."""


def load_kind(name: str) -> ModuleType:
    return importlib.import_module(f"training.kinds.{name}")
