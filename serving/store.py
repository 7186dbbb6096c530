"""Models in service, loaded from the registry and hot-swapped when its `current` pointers move.

Why a snapshot dict swapped by reference: a request reads `store.get(kind)` once and keeps that
object for its whole life, so a reload never changes a model under a request; the swap itself is
one attribute assignment (atomic under the GIL). A new version that fails verification or
loading is refused: the old one keeps serving and the refusal shows in /readyz and a metric.
Nothing here runs at import time; loading happens in `refresh()`.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from serving import metrics

log = logging.getLogger("foresight.serving")

#: Kinds the API serves.
KINDS = ("interference", "fingerprint", "demand", "usage", "runtime")


@dataclass(frozen=True)
class Loaded:
    kind: str
    version: str
    model: Any
    manifest: dict
    loaded_at: float


@dataclass
class KindStatus:
    error: str = ""            # why the model is missing, or why the newest version was refused
    refused_version: str = ""  # a `current` version that could not be loaded


@dataclass
class ModelStore:
    """Holds one loaded model per kind; `refresh()` polls the registry and swaps."""

    registry: str | None
    loader: Callable[[str, Any], Any] | None = None  # (kind, local dir) -> model; tests inject
    models: dict[str, Loaded] = field(default_factory=dict)
    status: dict[str, KindStatus] = field(default_factory=lambda: {k: KindStatus() for k in KINDS})
    on_swap: list[Callable[[Loaded], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, kind: str) -> Loaded | None:
        return self.models.get(kind)

    def _load(self, kind: str, path: Any) -> Any:
        if self.loader is not None:
            return self.loader(kind, path)
        from artifacts.models import load_model

        return load_model(kind, path)

    def refresh(self) -> dict[str, str]:
        """Load every kind whose `current` version differs from the one in service.

        Returns kind -> outcome ('kept', 'loaded <v>', 'refused <v>: why', 'missing: why').
        Never raises: a broken registry leaves what is in service untouched."""
        with self._lock:  # one refresh at a time (background loop and tests)
            return {kind: self._refresh_kind(kind) for kind in KINDS}

    def _refresh_kind(self, kind: str) -> str:
        st = self.status[kind]
        if not self.registry:
            st.error = "no --registry given"
            return f"missing: {st.error}"
        from artifacts.registry import Registry

        have = self.models.get(kind)
        version = None
        try:
            reg = Registry(self.registry)
            version = reg.current(kind)
            if version is None:
                if have is None:
                    st.error = f"no {kind} model published in the registry"
                return "kept" if have else f"missing: {st.error}"
            if have is not None and have.version == version:
                return "kept"
            if st.refused_version == version:
                return f"refused {version}: {st.error}"  # do not retry a known-bad version
            path, manifest = reg.fetch(kind, version)
            model = self._load(kind, path)
        except Exception as exc:  # noqa: BLE001 - any failure refuses the version, keeps the old
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            st.error = (f"version {version} refused ({reason}); serving {have.version}"
                        if have else f"version {version} refused ({reason})")
            st.refused_version = version or ""
            metrics.RELOAD_FAILURES.labels(kind).inc()
            log.warning("%s %s not loaded: %s", kind, version, reason)
            return f"refused {version}: {reason}"
        new = Loaded(kind, version, model, manifest, time.time())
        models = dict(self.models)
        models[kind] = new
        self.models = models  # the atomic swap: readers hold the old dict or the new one
        self.status[kind] = KindStatus()
        metrics.MODEL_VERSION.labels(kind).set(float(version) if version.isdigit() else -1)
        export_manifest(kind, manifest)
        metrics.RELOADS.labels(kind).inc()
        for cb in self.on_swap:
            try:
                cb(new)
            except Exception as exc:  # noqa: BLE001 - an adapter failing must not undo the swap
                log.warning("on_swap for %s %s failed: %s", kind, version, exc)
        log.info("%s model version %s in service", kind, version)
        return f"loaded {version}"

    def readiness(self) -> dict[str, Any]:
        now = time.time()
        out: dict[str, Any] = {}
        for kind in KINDS:
            m, st = self.models.get(kind), self.status[kind]
            item: dict[str, Any] = {"loaded": m is not None}
            if m is not None:
                item.update(version=m.version, age_s=round(now - m.loaded_at, 1),
                            created=m.manifest.get("created"))
            if st.error:
                item["error"] = st.error
            out[kind] = item
        return out


def export_manifest(kind: str, manifest: dict) -> None:
    """Backtest error, best baseline and training time of the version in service, as gauges
    (NaN where the manifest does not say: older artifacts, kinds without a baseline)."""
    from artifacts.models import best_baseline  # the retraining gate's own rule

    m = manifest.get("metrics") or {}
    primary = m.get(m.get("primary", "mae"))
    base = best_baseline(m)
    metrics.BACKTEST_ERROR.labels(kind).set(
        float(primary) if isinstance(primary, (int, float)) else float("nan"))
    metrics.BASELINE_ERROR.labels(kind).set(base[1] if base else float("nan"))
    try:
        created = datetime.fromisoformat(str(manifest.get("created"))).timestamp()
    except ValueError:
        created = float("nan")
    metrics.MODEL_CREATED.labels(kind).set(created)


class Poller:
    """Background thread calling `store.refresh()` every `every_s` seconds."""

    def __init__(self, store: ModelStore, every_s: float) -> None:
        self.store, self.every_s = store, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="foresight-reload", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.store.refresh()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
