"""The retraining job: fetch -> hygiene -> features -> fit -> backtest -> gate -> publish.

For every wired kind (training.kinds.KINDS): build its table from the history, fit on
everything before the cutoff (`end - holdout`), backtest on the window after it, score the
model in service on the *same* window, and publish the new model only when
1. its primary metric beats the kind's best baseline (the lowest `baseline_<name>_<primary>`
   of its backtest, computed on the same window); otherwise the model in service stays if it
   beats that baseline, or, for kinds that can serve a baseline (`as_baseline`), the baseline
   itself is published as the model of record, or nothing is published (`withheld`); and
2. it is not worse than the one in service by more than `tolerance` (relative).
A model identical to the one in service (same data, same files) is not published again. The
published model is the one that was backtested: its metrics in the manifest are the numbers
it earned, and they name the baseline it was compared with.
"""
from __future__ import annotations

import hashlib
import subprocess
import tempfile
import time
import traceback
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ground.version import __version__
from ground.errors import ForesightError
from training.hygiene import clean_samples
from training.kinds import KINDS, SkipKind, load_kind
from artifacts.models import best_baseline  # noqa: F401 - the gate's rule, read by the report too
from artifacts.registry import Registry
from forecaster.interference.admission import ADMIT_RISK
from training.sources import TRAINING_METRICS, History


@dataclass
class TrainConfig:
    holdout: pd.Timedelta = pd.Timedelta("1D")
    tolerance: float = 0.0
    kinds: tuple[str, ...] = KINDS
    n_estimators: int = 200
    threads: int = 1
    seed: int = 0
    #: level of the interference bound that min-speed is held to (0.1: the p10; the
    #: trade-off of higher levels: bench/results/interference_h200_pool_alpha04.md)
    interference_alpha: float = 0.1
    #: share of unsafe placements the co-location gate may admit (the bound min-speed is held
    #: to: forecaster/interference/admission.py)
    interference_admit_risk: float = ADMIT_RISK
    demand_freq: str = "30min"
    demand_horizon: int = 4
    usage_metric: str = "sm"
    usage_freq: str = "2min"
    usage_horizon: int = 5
    #: the usage forecaster trains on at most this many bins (whole series drawn at random
    #: with `seed`): one global model needs a fleet's variety, not every pod-minute; the
    #: backtest still scores every series
    usage_max_rows: int | None = 1_000_000
    dry_run: bool = False
    #: refuse a model that does not beat its best same-window baseline (off: only the
    #: comparison with the model in service gates)
    beat_baseline: bool = True
    dask_client: object | None = None
    #: partitioned histories: GPUs per node group read at once (sets peak memory), and where
    #: the regrouped samples go while the job runs (None: the system's temp directory)
    group_gpus: int = 16
    scratch: str | None = None


@dataclass
class KindResult:
    kind: str
    status: str  # published | kept | withheld | skipped | failed
    reason: str = ""
    version: str | None = None
    in_service: str | None = None
    metrics: dict = field(default_factory=dict)
    service_metrics: dict = field(default_factory=dict)
    predictions: pd.DataFrame | None = None
    seconds: dict = field(default_factory=dict)


@dataclass
class RunResult:
    source: str
    window: dict
    hygiene: dict
    kinds: list[KindResult]
    stages: dict
    peak_mb: float = 0.0


def code_version() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+{sha}" if sha else __version__


def data_hash(history: History) -> str:
    h = hashlib.sha256()
    if history.store is not None:  # partitions: their bytes, read in blocks
        h.update(history.store.digest().encode())
    for df in (history.samples, history.pods):
        if df is not None:
            h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()[:32]


def gate(new: float, current: float | None, tolerance: float) -> bool:
    """Not worse than the model in service, within a relative tolerance (lower is better)."""
    if current is None or current != current:
        return True
    return new <= current * (1.0 + tolerance) + 1e-12


def beats(value: float, base: tuple[str, float] | None) -> bool:
    """Strictly better than the best baseline (no baseline: nothing to beat)."""
    return base is None or value < base[1] - 1e-12


def _served(model) -> dict:
    """How many series each predictor serves (kinds whose estimator falls back per series)."""
    s = getattr(model, "served_", None)
    if isinstance(s, str):
        return {s: "all"}
    if isinstance(s, dict):
        per = pd.Series([v for k, v in s.items() if k != "*"], dtype=object)
        return {k: int(v) for k, v in per.value_counts().items()}
    return {}


def _service_metrics(reg: Registry, mod, test, train) -> tuple[str | None, dict, str]:
    cur = reg.current(mod.NAME)
    if cur is None:
        return None, {}, ""
    try:
        path, _ = reg.fetch(mod.NAME, cur)
        model = mod.load(path)
        metrics, _ = mod.score(model, test, train)
        return cur, metrics, ""
    except (ForesightError, ValueError, KeyError, OSError) as exc:
        # An untrusted or unusable model in service cannot win the comparison.
        return cur, {}, f"model in service v{cur} unusable ({str(exc).splitlines()[0]})"


def train_kind(name: str, history: History, reg: Registry, cfg: TrainConfig, manifest: dict,
               on_step: Callable[[str], None],
               build: Callable[[], object] | None = None) -> KindResult:
    """`build`: the kind's data from the out-of-core features pass (else mod.prepare)."""
    mod = load_kind(name)
    res = KindResult(name, "skipped")
    cutoff = history.end - cfg.holdout
    t = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal t
        now = time.perf_counter()
        res.seconds[stage] = round(now - t, 3)
        t = now

    try:
        on_step("features")
        data = build() if build is not None else mod.prepare(history, cfg)
        train, test = mod.split(data, cutoff)
        lap("features")
        on_step("fit")
        if cfg.dask_client is not None and hasattr(mod, "fit_dask"):
            model, trainer = mod.fit_dask(train, cfg, cfg.dask_client), "lightgbm.dask"
        else:
            model, trainer = mod.fit(train, cfg), "local"
        lap("fit")
        on_step("backtest")
        scored, res.predictions = mod.score(model, test, train)
        res.metrics = {**scored, "trainer": trainer}
        lap("backtest")
        on_step("compare")
        res.in_service, res.service_metrics, note = _service_metrics(reg, mod, test, train)
        lap("compare")
    except SkipKind as exc:
        res.reason = str(exc)
        return res
    base = best_baseline(res.metrics)
    if base is not None:
        res.metrics["best_baseline"] = base[0]
    if _served(model):
        res.metrics["served"] = _served(model)
    record = ""  # set when a baseline becomes the model of record
    if cfg.beat_baseline and not beats(res.metrics[mod.PRIMARY], base):
        lost = (f"{mod.PRIMARY} {res.metrics[mod.PRIMARY]:.4g} does not beat the best baseline "
                f"{base[0]} {base[1]:.4g} on the same window")
        cur_v = res.service_metrics.get(mod.PRIMARY)
        if res.in_service is not None and cur_v is not None and beats(cur_v, base):
            res.status = "kept"
            res.reason = f"{lost}; v{res.in_service} in service ({cur_v:.4g}) beats it and stays"
            lap("publish")
            return res
        if not hasattr(mod, "as_baseline"):
            res.status = "withheld"
            res.reason = (f"not published: {lost}; " + (
                f"v{res.in_service} in service does not beat it either: callers should use "
                f"the baseline" if res.in_service else "no model of this kind is served"))
            lap("publish")
            return res
        model = mod.as_baseline(model, base[0])
        scored, res.predictions = mod.score(model, test, train)
        res.metrics = {**scored, "trainer": res.metrics["trainer"], "best_baseline": base[0],
                       "served": _served(model)}
        record = f"baseline {base[0]} is the model of record: the fitted model's {lost}"
    new, cur = res.metrics[mod.PRIMARY], res.service_metrics.get(mod.PRIMARY)
    on_step("publish")
    with tempfile.TemporaryDirectory(prefix=f"foresight-{name}-") as tmp:
        mod.save(model, Path(tmp))
        digests = {p.relative_to(tmp).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in Path(tmp).rglob("*") if p.is_file()}
        same = (res.in_service is not None and not note and
                reg.manifest(name, res.in_service).get("files") == digests)
        if same:
            res.status, res.reason = "kept", f"identical to v{res.in_service}"
        elif not gate(new, cur, cfg.tolerance):
            res.status = "kept"
            res.reason = (f"{mod.PRIMARY} {new:.4g} worse than v{res.in_service}'s {cur:.4g} "
                          f"(tolerance {cfg.tolerance:.0%})")
        elif cfg.dry_run:
            res.status, res.reason = "kept", "dry run: would publish"
        else:
            fields = {**manifest, "features": mod.features(model),
                      "metrics": {**res.metrics, "in_service_before": res.in_service,
                                  "in_service_metrics": res.service_metrics},
                      "extra": {"backtest_window": {"start": cutoff.isoformat(),
                                                    "end": history.end.isoformat()}}}
            fields["training_window"] = {"start": history.start.isoformat(),
                                         "end": cutoff.isoformat()}
            res.version = reg.publish(name, tmp, fields)
            res.status = "published"
            vs = f"; beats best baseline {base[0]} {base[1]:.4g}" if base and not record else ""
            res.reason = "; ".join(x for x in (note, record) if x) or (
                ("first version" if cur is None else
                 f"{mod.PRIMARY} {new:.4g} vs {cur:.4g} in service") + vs)
    lap("publish")
    return res


def check_registry(reg: Registry, kinds: tuple[str, ...]) -> None:
    """Refuse, before anything is fitted or published, stored state that would fail the run
    part way: a failing kind found after others were published would leave a run that
    exits non-zero yet moved their `current` pointers. A pointer at a missing version is
    no such state: the new model replaces it (see _service_metrics)."""
    for kind in kinds:
        blocked = reg.file_in_the_way(kind)
        if blocked:
            raise ForesightError(f"{blocked}: is a file, not a directory")
        cur = reg.current(kind)  # raises on a pointer that is not JSON with a version
        if cur is not None and not cur.isdigit():  # the report plots versions as numbers
            raise ForesightError(f"{reg.display(kind, 'current')}: pointer names version "
                                 f"{cur!r}, not a version number")


def run(history: History, registry: str, cfg: TrainConfig,
        on_step: Callable[[str, str], None] = lambda kind, step: None,
        on_progress: Callable[[str, int, int, int], None] | None = None) -> RunResult:
    """Train every configured kind on `history` and publish what passes the gate.
    `on_progress(stage, done, total, rows)` follows the partitioned features pass."""
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    unknown = [k for k in cfg.kinds if k not in KINDS]
    if unknown:  # up front: not after the kinds before it were published
        raise ForesightError(f"unknown model kind {unknown[0]!r}: choose from {', '.join(KINDS)}")
    reg = Registry(registry)
    check_registry(reg, cfg.kinds)
    if history.end - cfg.holdout <= history.start:
        raise ForesightError(f"history {history.start}..{history.end} is shorter than the "
                             f"backtest window {cfg.holdout}")
    builds: dict = {}
    if history.store is not None:  # partitioned: node group by node group (training.streaming)
        from training.streaming import streamed_features

        builds, hyg, passed = streamed_features(history, cfg, tuple(k for k in cfg.kinds
                                                                    if k in KINDS),
                                                lambda s: on_step("data", s), on_progress)
        stages.update(passed)
    else:
        on_step("data", "hygiene")
        samples, hyg = clean_samples(history.samples, TRAINING_METRICS)
        history.samples = samples
        stages["hygiene"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    manifest = {"training_window": {}, "data_hash": data_hash(history),
                "code_version": code_version()}
    stages["data_hash"] = round(time.perf_counter() - t1, 3)
    results = []
    for name in cfg.kinds:
        try:
            r = train_kind(name, history, reg, cfg, manifest, lambda s, n=name: on_step(n, s),
                           builds.pop(name, None))
        except ForesightError as exc:  # this kind's input is unusable; the others go on
            r = KindResult(name, "failed", str(exc))
        except Exception as exc:  # one kind's bug must not stop the others from publishing
            r = KindResult(name, "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            r.metrics = {"traceback": traceback.format_exc(limit=3)}
        results.append(r)
        for k, v in r.seconds.items():
            stages[f"{name}.{k}"] = v
    # peak resident memory of this process (Linux reports KiB)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return RunResult(history.source, {"start": history.start.isoformat(),
                                      "end": history.end.isoformat(),
                                      "cutoff": (history.end - cfg.holdout).isoformat()},
                     {**hyg.as_dict(), "notes": history.notes}, results, stages,
                     peak_mb=round(peak / 2**20, 1))
