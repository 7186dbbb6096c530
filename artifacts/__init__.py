"""Published models, read and written: the bottom of the house.

- `artifacts.registry.Registry(root)`: immutable `models/<kind>/<version>/` + atomic
  `current`; the retraining job publishes through it, the API and the extender read through it.
- `artifacts.models.load_model(kind, path)`: a verified version directory -> the estimator(s)
  of forecaster/ (no pickle: LightGBM text and JSON only).
- `artifacts.adapters`: the narrow provider interfaces the extender's scores ask (peak memory,
  speed beside others) answered from loaded models; the API and the extender share them.
It imports forecaster/ and nothing of training/, serving/ or scheduler_hook/.
"""
