"""`foresight serve`: the scheduler extender and the prediction REST API over HTTP."""
from __future__ import annotations

import gc
import logging
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import typer

from ground.errors import ForesightError


log = logging.getLogger("foresight.serve")


class NoCluster(ForesightError):
    """No in-cluster config, no kubeconfig and no snapshot: nothing for the extender to watch."""


def _loopback(host: str) -> bool:
    """True when `host` only accepts local connections."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_extender(snapshot: Path | None, registry: Path | None, config: Path | None,
                   kubeconfig: Path | None = None) -> tuple[Any, Any]:
    """(ExtenderHook, watcher or None): state from a snapshot, or list+watch of the cluster."""
    from scheduler_hook import carbon
    from scheduler_hook.config import load_config
    from scheduler_hook.hook import ExtenderHook
    from scheduler_hook.providers import load_registry
    from scheduler_hook.snapshot import load_snapshot
    from scheduler_hook.state import ClusterState

    cfg = load_config(config)
    if registry is not None and not registry.is_dir():
        raise ForesightError(f"registry is not a directory: {registry}")
    providers = load_registry(str(registry) if registry else None, _own_loaders(cfg),
                              float(cfg["model_max_age_s"]), cfg=cfg)
    carbon.install(providers, cfg)
    state = ClusterState()
    if snapshot is not None:
        load_snapshot(snapshot, state)
        return ExtenderHook(state, providers, cfg), None

    from kubernetes import client, config as kconfig

    from scheduler_hook.watch import ClusterWatcher

    try:
        kconfig.load_incluster_config()
    except kconfig.ConfigException:
        try:
            kconfig.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None)
        except Exception as exc:  # noqa: BLE001 - any kubeconfig trouble is a user error
            why = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
            raise NoCluster(f"no cluster to watch and no --snapshot: {why}") from None
    api = client.CoreV1Api()
    hook = ExtenderHook(state, providers, cfg, core_api=api)
    labels = tuple(cfg.get("workload_labels") or ()) or None
    watcher = ClusterWatcher(state, api, workload_labels=labels)
    watcher.after_batch = hook.after_events  # score the next pod ahead once a binding lands
    watcher.parsed = hook.watched_pods  # the answers reuse the pods the watch parsed
    return hook, watcher


#: Slots the API's model store fills on every swap (artifacts.adapters.install): their config
#: loaders would only load the same models a second time.
STORE_FED = ("interference", "fingerprint")


def _own_loaders(cfg: dict) -> dict[str, str]:
    return {k: v for k, v in (cfg.get("loaders") or {}).items() if k not in STORE_FED}


def _reload_loop(hook: Any, registry: Path, every_s: float, stop: threading.Event) -> None:
    """Hot reload of the slots the store does not feed (the demand provider: its mix and its
    reservation forecast are computed at load); a failing loader keeps the previous provider."""
    from scheduler_hook.providers import load_registry

    while not stop.wait(every_s):
        load_registry(str(registry), _own_loaders(hook.cfg), float(hook.cfg["model_max_age_s"]),
                      hook.providers, cfg=hook.cfg)


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        only: str = typer.Option("all", "--only",
                                 help="Which service: 'extender', 'api' or 'all' (both; the API "
                                 "alone, said in one line, when no cluster is reachable)."),
        snapshot: Optional[Path] = typer.Option(
            None, "--snapshot", help="`kubectl get nodes,pods -A -o json` output; else watch "
            "the cluster of the in-cluster config or kubeconfig."),
        port: int = typer.Option(8888, "--port"),
        host: str = typer.Option("0.0.0.0", "--host"),
        registry: Optional[Path] = typer.Option(
            None, "--registry", help="Model registry; without it scoring is fallback packing."),
        config: Optional[Path] = typer.Option(None, "--config", help="Scoring weights YAML."),
        kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig"),
        reload_s: float = typer.Option(300.0, "--reload-s", help="Registry reload period."),
        log_level: str = typer.Option("info", "--log-level"),
        token_file: Optional[Path] = typer.Option(
            None, "--token-file", help="API bearer token (else env FORESIGHT_API_TOKEN; "
            "neither: no authentication)."),
        tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate."),
        tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key."),
        demand_series: Optional[Path] = typer.Option(
            None, "--demand-series", help="Recent demand series (CSV/Parquet, unique_id,ds,y) "
            "for GET /v1/demand."),
        max_body_mb: float = typer.Option(16.0, "--max-body-mb", help="Request body limit."),
    ) -> None:
        """Serve the kube-scheduler extender and/or the prediction API."""
        if only not in ("extender", "api", "all"):
            raise ForesightError(f"--only {only!r}: choose 'extender', 'api' or 'all'")
        if not 0 < port < 65536:
            raise ForesightError(f"--port {port}: not a TCP port")
        if not max_body_mb > 0:  # and NaN
            raise ForesightError(f"--max-body-mb {max_body_mb}: must be > 0")
        if not 0 < reload_s < float("inf"):  # NaN passed `<= 0` and the poller never slept
            raise ForesightError(f"--reload-s {reload_s}: must be a finite number of "
                                 "seconds > 0")
        if kubeconfig is not None and not kubeconfig.is_file():
            raise ForesightError(f"kubeconfig not found: {kubeconfig}")
        if snapshot is not None and snapshot.is_dir():
            raise ForesightError(f"--snapshot {snapshot}: is a directory, not a snapshot file")
        if demand_series is not None:
            _check_series(demand_series)
        _check_listen(host, port)
        import uvicorn
        from uvicorn.config import LOG_LEVELS

        if log_level.lower() not in LOG_LEVELS:
            raise ForesightError(f"--log-level {log_level!r}: choose one of "
                                 f"{', '.join(LOG_LEVELS)}")

        from scheduler_hook.app import create_app

        from serving.cli import build_api

        from serving.security import read_token

        logging.basicConfig(level=log_level.upper(), format="%(message)s")
        if (tls_cert is None) != (tls_key is None):
            raise ForesightError("--tls-cert and --tls-key go together")
        if tls_cert is not None:
            _check_tls(tls_cert, tls_key)
        hook = watcher = None
        if only != "api" or snapshot is not None or kubeconfig is not None:
            try:
                hook, watcher = build_extender(snapshot, registry, config, kubeconfig)
            except NoCluster as exc:
                if only == "extender":
                    raise
                # The default serves what can be served: the REST scores need no cluster.
                only = "api"
                log.warning("extender off: %s; serving the prediction API only (give "
                            "--snapshot or a kubeconfig to score nodes)", exc)
        token = read_token(token_file)
        if token is None and not _loopback(host):
            log.warning("listening on %s without authentication: set --token-file or "
                        "FORESIGHT_API_TOKEN, or --host 127.0.0.1", host)
        # The API's model store feeds the extender's providers too (one reload loop).
        app, poller = build_api(only, hook, registry, reload_s, token_file, demand_series,
                                int(max_body_mb * 1024 * 1024))
        if app is None:
            app = create_app(hook)
        # The cluster state is a few hundred thousand long-lived objects: without this every
        # full collection walks them all (~0.3 s at 5,000 nodes, a stall inside a scheduling
        # cycle). A watcher freezes again after its first list (scheduler_hook.watch).
        gc.collect()
        gc.freeze()
        if watcher is not None:
            # The watch threads apply pod events while the event loop answers kube-scheduler;
            # a thread waiting for the GIL waits up to the switch interval (default 5 ms) each
            # time, inside the scheduling cycle. Under a real kube-scheduler (1,000 nodes, one
            # paired run) 0.2 ms took what the extender adds beyond an extender that decides
            # nothing from 6.0 to 2.9 ms per pod (bench/scheduler_overhead.py).
            sys.setswitchinterval(0.0002)
            watcher.start()
            _attach_on_startup(app, watcher)
        stop = threading.Event()
        if hook is not None and registry is not None and _own_loaders(hook.cfg):
            threading.Thread(target=_reload_loop, args=(hook, registry, reload_s, stop),
                             name="foresight-extender-reload", daemon=True).start()
        # The extender alone answers its verbs inside the HTTP protocol (scheduler_hook.fastproto)
        handlers = getattr(app, "verb_handlers", None)
        http: Any = "auto"
        if handlers:
            from scheduler_hook.fastproto import verb_protocol

            http = verb_protocol(handlers, int(max_body_mb * 1024 * 1024))
            app.max_body = int(max_body_mb * 1024 * 1024)  # the ASGI road (Expect: 100-continue)
        try:
            uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                        http=http, ssl_certfile=str(tls_cert) if tls_cert else None,
                        ssl_keyfile=str(tls_key) if tls_key else None)
        finally:
            stop.set()
            if poller is not None:
                poller.stop()
            if watcher is not None:
                watcher.stop()


def _check_series(path: Path) -> None:
    """Read the demand series as GET /v1/demand will, now: wrong columns are one line at start,
    not a 4xx on every request later."""
    import pandas as pd

    from features.demand_series import read_series_csv, validate_long
    from serving.demand import read_series

    if not path.is_file():
        raise ForesightError(f"--demand-series {path}: not found or not a file")
    try:
        read_series(path)
        # and its values, as the demand readers check them: a word in y passed here and made
        # every GET /v1/demand a 422
        if path.suffix == ".parquet":
            validate_long(pd.read_parquet(path), what=str(path))
        else:
            read_series_csv(path)
    except ForesightError as exc:
        raise ForesightError(f"--demand-series: {str(exc).splitlines()[0]}") from None
    except (ValueError, TypeError) as exc:  # a `ds` that is not a time
        raise ForesightError(f"--demand-series {path}: unusable ds column: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                             ) from None


def _check_listen(host: str, port: int) -> None:
    """Bind (host, port) as uvicorn's server will (SO_REUSEADDR, each address the host
    resolves to) and let go: a port in use or a bad host is one line here, not uvicorn's log
    lines and exit code 3 after the models loaded."""
    import errno
    import socket

    unavailable: OSError | None = None
    bound = 0
    try:
        for family, kind, proto, _, addr in set(socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)):
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(addr)
                    bound += 1
                except OSError as exc:
                    # asyncio skips an address family the host lacks (e.g. ::1 of localhost
                    # without IPv6); the server still listens on the others
                    if exc.errno != errno.EADDRNOTAVAIL:
                        raise
                    unavailable = exc
        if not bound and unavailable is not None:
            raise unavailable
    except OSError as exc:  # socket.gaierror is one
        raise ForesightError(f"cannot listen on {host}:{port}: "
                             f"{exc.strerror or type(exc).__name__}") from None


def _check_tls(cert: Path, key: Path) -> None:
    """Load the pair as uvicorn will, now: a missing or mismatched file is one line, not a
    traceback from inside the server's start."""
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
    except OSError as exc:  # ssl.SSLError is one
        raise ForesightError(f"cannot load --tls-cert {cert} / --tls-key {key}: "
                             f"{exc.strerror or type(exc).__name__}") from None


def _attach_on_startup(app: Any, watcher: Any) -> None:
    """Once uvicorn's loop runs, the watcher applies cluster events on it, between answers
    (scheduler_hook.watch); until then, and after it stops, on its own threads."""
    import asyncio
    from contextlib import asynccontextmanager

    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> Any:
        watcher.attach(asyncio.get_running_loop())
        try:
            async with inner(a) as state:
                yield state
        finally:
            watcher.attach(None)

    app.router.lifespan_context = lifespan
