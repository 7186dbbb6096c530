"""`foresight registry list|rollback|verify`: inspect and operate the model registry."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import sys

from ground.errors import ForesightError

console = Console() if sys.stdout.isatty() else Console(width=160)
_REG = typer.Option(..., "--registry", help="Registry root: a directory or an fsspec URL.")


def _primary(manifest: dict) -> str:
    m = manifest.get("metrics") or {}
    name = m.get("primary")
    if name and isinstance(m.get(name), (int, float)):
        return f"{name}={m[name]:.4g}"
    return ""


def _open(registry: str, published: bool = False):
    """The registry at `registry`, which must exist: a mistyped path is not an empty registry
    (verify would pass on it). `published`: it must also hold `models/`, which every publish
    creates (an unrelated directory would verify as "ok: 0 versions")."""
    from artifacts.registry import Registry

    reg = Registry(registry)
    if not reg.fs.isdir(reg.root):
        raise ForesightError(f"registry {registry} does not exist or is not a directory")
    if published and not reg.fs.isdir(reg._p()):
        raise ForesightError(f"{registry} is not a Foresight registry (no models/ directory)")
    return reg


def register(app: typer.Typer) -> None:
    sub = typer.Typer(no_args_is_help=True, help="Inspect, verify and roll back published models.")

    @sub.command("list")
    def list_(registry: str = _REG) -> None:
        """Every version of every model kind; * marks the one in service."""
        reg = _open(registry)
        table = Table(title=f"models in {registry}")
        for col in ("kind", "version", "", "created", "training window", "backtest", "status"):
            table.add_column(col)
        kinds = reg.kinds()
        for kind in kinds:
            bad = reg.check_pointer(kind)
            cur = None if bad else reg.current(kind)
            if bad:  # its own row: no version is in service, and verify fails on it
                table.add_row(kind, "current", "", "", "", "", f"[red]{escape(bad.reason)}")
            for v in reg.versions(kind):
                problems = reg.check(kind, v)
                body = {} if problems else reg.manifest(kind, v)
                win = body.get("training_window") or {}
                table.add_row(kind, v, "*" if v == cur else "",
                              body.get("created", "")[:16].replace("T", " "),
                              f"{win.get('start', '')[:16]} .. {win.get('end', '')[:16]}"
                              if win else "", _primary(body),
                              "[green]ok" if not problems else f"[red]{problems[0].reason}")
        if not kinds:
            console.print(f"no models published in {registry}")
            return
        console.print(table)

    @sub.command("rollback")
    def rollback(kind: str = typer.Argument(..., help="Model kind, e.g. interference."),
                 version: str = typer.Argument(..., help="Version to put back in service."),
                 registry: str = _REG) -> None:
        """Point `current` of KIND at VERSION (which must verify)."""
        reg = _open(registry, published=True)
        before = reg.current(kind) if reg.check_pointer(kind) is None else "(broken)"
        reg.rollback(kind, version)
        console.print(f"{kind}: current {before} -> {version}")

    @sub.command("verify")
    def verify(registry: str = _REG) -> None:
        """Check every artifact's checksum and schema; exit 1 naming each bad file."""
        reg = _open(registry, published=True)
        problems = reg.verify()
        n = sum(len(reg.versions(k)) for k in reg.kinds())
        for p in problems:
            console.print(f"[red]FAIL[/] {p}", soft_wrap=True, highlight=False)
        if problems:
            # SystemExit, not typer.Exit: foresight.cli.main drops typer.Exit's code in
            # non-standalone mode, and a failed verify must exit non-zero.
            raise SystemExit(1)
        console.print(f"[green]ok[/]: {n} version(s) of {len(reg.kinds())} kind(s) verified")

    app.add_typer(sub, name="registry")
