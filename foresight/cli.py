"""The `foresight` console command.

Each module in `foresight.commands` contributes its sub-commands through a `register(app)`
function, so a new command is a new file and never an edit here.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer
from rich.console import Console
from rich.markup import escape

from foresight import __version__, commands
from ground.errors import ForesightError

app = typer.Typer(
    name="foresight",
    help="Predictive workload modeling for GPU Kubernetes clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, highlight=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"foresight {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Predictive workload modeling for GPU Kubernetes clusters."""


for _info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
    importlib.import_module(f"{commands.__name__}.{_info.name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and a non-zero exit code."""
    try:
        # In non-standalone mode click returns the code of a `typer.Exit(code)` instead of raising
        rv = app(args=argv, prog_name="foresight", standalone_mode=False)
        if isinstance(rv, int):
            return rv
    except ForesightError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except OSError as exc:  # a path the command could not read or write: the user's to fix
        if os.environ.get("FORESIGHT_DEBUG"):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"[bold red]error:[/] {escape(where + str(exc.strerror or exc))}",
                          soft_wrap=True)
        return 1
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        if isinstance(exc, _click_errors()):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            err_console.print(f"[bold red]error:[/] {exc.format_message()}{hint}",
                              soft_wrap=True)
            return exc.exit_code
        raise
    return 0


def _click_errors() -> tuple[type, ...]:
    """Click's usage-error class, both as `click` and as the copy newer typer releases vendor
    (`typer._click`): a missing option raised the vendored one, which `click.ClickException`
    does not match, and the user saw a traceback."""
    found = []
    for name in ("click.exceptions", "typer._click.exceptions"):
        try:
            found.append(importlib.import_module(name).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


if __name__ == "__main__":
    sys.exit(main())
