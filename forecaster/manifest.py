"""Reading a model artifact's manifest.json: one place, one kind of error."""
from __future__ import annotations

import json
from pathlib import Path

from ground.errors import ForesightError


class ArtifactError(ForesightError, ValueError):
    """A model artifact that cannot be trusted or read (a one-line user-facing error)."""


def read_manifest(path: str | Path, schema_version: int | None = None, what: str = "model") -> dict:
    """The manifest of the artifact directory `path`, checked against `schema_version`."""
    f = Path(path) / "manifest.json"
    try:
        man = json.loads(f.read_text())
    except OSError as exc:
        raise ArtifactError(f"{f}: cannot read the {what} manifest ({exc.strerror})") from None
    except ValueError:
        raise ArtifactError(f"{f}: the {what} manifest is not valid JSON") from None
    if schema_version is not None and man.get("schema_version") != schema_version:
        raise ArtifactError(f"{f}: {what} schema_version {man.get('schema_version')!r}, "
                            f"expected {schema_version}")
    return man
