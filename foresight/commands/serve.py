"""`foresight serve`: the scheduler extender (and, later, the REST API) over HTTP."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Optional

import typer

from foresight.errors import ForesightError


def build_extender(snapshot: Path | None, registry: Path | None, config: Path | None,
                   kubeconfig: Path | None = None) -> tuple[Any, Any]:
    """(ExtenderHook, watcher or None): state from a snapshot, or list+watch of the cluster."""
    from scheduler_hook.config import load_config
    from scheduler_hook.hook import ExtenderHook
    from scheduler_hook.providers import load_registry
    from scheduler_hook.snapshot import load_snapshot
    from scheduler_hook.state import ClusterState

    cfg = load_config(config)
    if registry is not None and not registry.is_dir():
        raise ForesightError(f"registry is not a directory: {registry}")
    providers = load_registry(str(registry) if registry else None, cfg.get("loaders") or {},
                              float(cfg["model_max_age_s"]))
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
            raise ForesightError(f"no cluster to watch and no --snapshot: {exc}") from None
    api = client.CoreV1Api()
    hook = ExtenderHook(state, providers, cfg, core_api=api)
    labels = tuple(cfg.get("workload_labels") or ()) or None
    return hook, ClusterWatcher(state, api, workload_labels=labels)


def _reload_loop(hook: Any, registry: Path, every_s: float, stop: threading.Event) -> None:
    """Hot reload: re-run the loaders; a failing loader keeps the previous provider."""
    from scheduler_hook.providers import load_registry

    while not stop.wait(every_s):
        load_registry(str(registry), hook.cfg.get("loaders") or {},
                      float(hook.cfg["model_max_age_s"]), hook.providers)


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        only: str = typer.Option("extender", "--only", help="Which service: 'extender'."),
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
    ) -> None:
        """Serve the kube-scheduler extender (filter, prioritize, bind, explain)."""
        if only != "extender":
            raise ForesightError(f"--only {only!r}: only 'extender' is available")
        if not 0 < port < 65536:
            raise ForesightError(f"--port {port}: not a TCP port")
        import uvicorn

        from scheduler_hook.app import create_app

        logging.basicConfig(level=log_level.upper(), format="%(message)s")
        hook, watcher = build_extender(snapshot, registry, config, kubeconfig)
        stop = threading.Event()
        if watcher is not None:
            watcher.start()
        if registry is not None:
            threading.Thread(target=_reload_loop, args=(hook, registry, reload_s, stop),
                             daemon=True).start()
        try:
            uvicorn.run(create_app(hook), host=host, port=port, log_level=log_level,
                        access_log=False)
        finally:
            stop.set()
            if watcher is not None:
                watcher.stop()
