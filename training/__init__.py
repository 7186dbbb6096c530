"""The retraining job: it publishes through artifacts.registry (the bottom of the house).

- `artifacts.registry.Registry(root)`: immutable `models/<kind>/<version>/` + atomic `current`;
  `Registry(root).fetch(kind)` -> (verified local model dir, manifest) is what serving loads.
- `training.pipeline.run(history, registry, TrainConfig)`: fetch -> hygiene -> per kind
  features -> fit -> backtest -> compare with the model in service -> gate -> publish.
- `training.kinds.<kind>`: one plugin module per model kind (see training/kinds/__init__.py).
- `training.sources`: synthetic, Parquet tables or Prometheus history; `training.hygiene`;
  `training.report` (report.html, metrics.json); `training.dask_fit` (lightgbm.dask path).
"""
