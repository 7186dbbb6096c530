"""Model registry: immutable versions `models/<kind>/<version>/` and an atomic `current` pointer.

Layout under the registry root (a local path or any fsspec URL, e.g. s3://bucket/foresight):

    models/<kind>/<version>/manifest.json     registry manifest (see `build_manifest`)
    models/<kind>/<version>/model/...         the estimator's own files (LightGBM text, JSON)
    models/<kind>/current                     JSON {"version": ..., "manifest_sha256": ...}

Why this shape: a version directory is complete before anything points at it (it is staged under
a hidden name and renamed), and `current` is switched by writing a temporary file, fsyncing it and
renaming it over the old pointer, so a process killed at any instant leaves `current` naming a
complete, loadable version. On object stores a single PUT is atomic, which gives the same
guarantee for the pointer. Every file's sha256 is in the manifest and the manifest carries its
own checksum, so the loader refuses a tampered or truncated artifact. No pickle anywhere.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import fsspec

from ground.errors import ForesightError

MANIFEST_SCHEMA = 1
MANIFEST = "manifest.json"
POINTER = "current"
#: The publish steps, in order; a fault injected between any two must leave `current` usable.
PUBLISH_STEPS = ("stage_files", "stage_manifest", "verify_stage", "promote_version",
                 "write_pointer_tmp", "fsync_pointer", "rename_pointer")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_checksum(body: dict) -> str:
    """sha256 of the canonical JSON of the manifest without its own `checksum` field."""
    core = {k: v for k, v in body.items() if k != "checksum"}
    return _sha256(json.dumps(core, sort_keys=True, separators=(",", ":")).encode())


def build_manifest(kind: str, version: str, files: dict[str, str], *, features: list[str],
                   training_window: dict, data_hash: str, metrics: dict, code_version: str,
                   extra: dict | None = None) -> dict:
    body = {"schema_version": MANIFEST_SCHEMA, "kind": kind, "version": version,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "features": list(features), "training_window": training_window,
            "data_hash": data_hash, "metrics": metrics, "code_version": code_version,
            "files": dict(sorted(files.items())), **(extra or {})}
    body["checksum"] = manifest_checksum(body)
    return body


@dataclass
class Problem:
    """One artifact the registry cannot trust: the file and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class Registry:
    """A model registry rooted at a local directory or an fsspec URL."""

    def __init__(self, root: str | Path, fault: Callable[[str], None] | None = None) -> None:
        self.url = str(root)
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url)
        except (ValueError, ImportError) as exc:
            raise ForesightError(f"cannot open registry {self.url}: {exc}") from None
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple)
                                else (self.fs.protocol,))
        # Test hook: called with each PUBLISH_STEPS name before the step runs.
        self._fault = fault or (lambda step: None)

    # ------------------------------------------------------------------ paths
    def _p(self, *parts: str) -> str:
        return posixpath.join(self.root, "models", *parts)

    def display(self, *parts: str) -> str:
        """A user-facing path of a registry file (URL form for remote registries)."""
        p = self._p(*parts)
        return p if self.local else f"{self.fs.unstrip_protocol(p)}"

    def file_in_the_way(self, kind: str) -> str | None:
        """The user-facing path of `models/` or `models/<kind>` where it is a file (publishing
        `kind` would fail there), else None."""
        for parts in ((), (kind,)):
            if self.fs.exists(self._p(*parts)) and not self.fs.isdir(self._p(*parts)):
                return self.display(*parts)
        return None

    def kinds(self) -> list[str]:
        base = self._p()
        if not self.fs.isdir(base):
            return []
        return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(base, detail=False)
                      if self.fs.isdir(p))

    def versions(self, kind: str) -> list[str]:
        base = self._p(kind)
        if not self.fs.isdir(base):
            return []
        names = [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(base, detail=False)]
        vs = [n for n in names if n.isdigit() and self.fs.isdir(self._p(kind, n))]
        return sorted(vs, key=int)

    def current(self, kind: str) -> str | None:
        """The version `current` points at, or None when nothing was published."""
        path = self._p(kind, POINTER)
        if not self.fs.exists(path):
            return None
        try:
            ptr = json.loads(self.fs.cat_file(path))
            return str(ptr["version"])
        except IsADirectoryError:  # a hand edit (mkdir): a broken pointer, like bad JSON
            raise ForesightError(f"{self.display(kind, POINTER)}: pointer is a directory, "
                                 f"not a file") from None
        except (ValueError, KeyError, TypeError):
            raise ForesightError(f"{self.display(kind, POINTER)}: pointer is not valid JSON "
                                 f"with a version") from None

    # ------------------------------------------------------------- reading
    def manifest(self, kind: str, version: str) -> dict:
        path = self._p(kind, version, MANIFEST)
        if not self.fs.exists(path):
            raise ForesightError(f"{self.display(kind, version, MANIFEST)}: missing")
        try:
            body = json.loads(self.fs.cat_file(path))
        except (ValueError, UnicodeDecodeError):
            raise ForesightError(f"{self.display(kind, version, MANIFEST)}: not valid JSON") from None
        if not isinstance(body, dict):
            raise ForesightError(f"{self.display(kind, version, MANIFEST)}: not a JSON object")
        return body

    def check(self, kind: str, version: str) -> list[Problem]:
        """Every reason not to trust this version (empty list: trustworthy)."""
        try:
            body = self.manifest(kind, version)
        except ForesightError as exc:
            return [Problem(self.display(kind, version, MANIFEST), str(exc).split(": ", 1)[-1])]
        mpath = self.display(kind, version, MANIFEST)
        if body.get("schema_version") != MANIFEST_SCHEMA:
            return [Problem(mpath, f"manifest schema {body.get('schema_version')!r} is not "
                                   f"supported (expected {MANIFEST_SCHEMA})")]
        if body.get("checksum") != manifest_checksum(body):
            return [Problem(mpath, "manifest checksum mismatch (edited or corrupted)")]
        if body.get("kind") != kind or str(body.get("version")) != version:
            return [Problem(mpath, f"manifest names {body.get('kind')}/{body.get('version')}, "
                                   f"not {kind}/{version}")]
        problems = []
        files = body.get("files") or {}
        if not files:
            problems.append(Problem(mpath, "manifest lists no model files"))
        for name, digest in files.items():
            path = self._p(kind, version, "model", name)
            if not self.fs.exists(path):
                problems.append(Problem(self.display(kind, version, "model", name), "missing"))
            elif _sha256(self.fs.cat_file(path)) != digest:
                problems.append(Problem(self.display(kind, version, "model", name),
                                        "checksum mismatch (tampered or corrupted)"))
        base = self._p(kind, version, "model")
        if self.fs.isdir(base):
            for path in self.fs.find(base):
                rel = posixpath.relpath(path, base)
                if rel not in files:
                    problems.append(Problem(self.display(kind, version, "model", rel),
                                            "not listed in the manifest"))
        return problems

    def check_pointer(self, kind: str) -> Problem | None:
        """Why `current` of `kind` cannot be followed (None: it can, or nothing was published)."""
        try:
            cur = self.current(kind)
        except ForesightError as exc:
            return Problem(self.display(kind, POINTER), str(exc).split(": ", 1)[-1])
        if cur is not None and cur not in self.versions(kind):
            return Problem(self.display(kind, POINTER),
                           f"points at version {cur}, which does not exist")
        return None

    def verify(self) -> list[Problem]:
        """Check every version of every kind and every pointer."""
        problems = []
        for kind in self.kinds():
            for v in self.versions(kind):
                problems += self.check(kind, v)
            bad = self.check_pointer(kind)
            if bad is not None:
                problems.append(bad)
        return problems

    def fetch(self, kind: str, version: str | None = None,
              dest: str | Path | None = None) -> tuple[Path, dict]:
        """Verify a version (default: current) and return a local directory with its model
        files and its manifest. Refuses, with a ForesightError, anything it cannot trust."""
        version = version or self.current(kind)
        if version is None:
            raise ForesightError(f"no {kind} model has been published in {self.url}")
        if version not in self.versions(kind):
            raise ForesightError(f"{kind} version {version} does not exist in {self.url}")
        problems = self.check(kind, version)
        if problems:
            raise ForesightError(f"refusing {kind} version {version}: {problems[0]}")
        body = self.manifest(kind, version)
        if self.local:
            local = Path(self._p(kind, version, "model"))
        else:
            local = Path(dest or tempfile.mkdtemp(prefix=f"foresight-{kind}-")) / "model"
            self.fs.get(self._p(kind, version, "model"), str(local), recursive=True)
        # Re-check what we will actually read (a remote file could change between the two).
        for name, digest in body["files"].items():
            if _sha256((local / name).read_bytes()) != digest:
                raise ForesightError(f"refusing {kind} version {version}: {local / name}: "
                                     f"checksum mismatch")
        return local, body

    def history(self, kind: str) -> list[dict]:
        """Manifests of every trustworthy version, oldest first (for metric history plots)."""
        out = []
        for v in self.versions(kind):
            if not self.check(kind, v):
                out.append(self.manifest(kind, v))
        return out

    # ------------------------------------------------------------- writing
    def next_version(self, kind: str) -> str:
        # staging directories of killed runs are hidden names: they never consume a number
        return str(max([int(v) for v in self.versions(kind)] + [0]) + 1)

    def publish(self, kind: str, model_dir: str | Path, manifest_fields: dict) -> str:
        """Copy `model_dir` in as a new immutable version and point `current` at it."""
        src = Path(model_dir)
        files = {p.relative_to(src).as_posix(): _sha256(p.read_bytes())
                 for p in sorted(src.rglob("*")) if p.is_file()}
        if not files:
            raise ForesightError(f"nothing to publish for {kind}: {src} holds no files")
        version = self.next_version(kind)
        stage = self._p(kind, f".staging-{version}-{uuid.uuid4().hex[:8]}")
        try:
            self._fault("stage_files")
            self.fs.makedirs(posixpath.join(stage, "model"), exist_ok=True)
            for name in files:
                dst = posixpath.join(stage, "model", name)
                self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)  # nested model dirs
                self.fs.put_file(str(src / name), dst)
            self._fault("stage_manifest")
            body = build_manifest(kind, version, files, **manifest_fields)
            self.fs.pipe_file(posixpath.join(stage, MANIFEST),
                              json.dumps(body, indent=1, sort_keys=True).encode())
            self._fault("verify_stage")
            for name, digest in files.items():
                if _sha256(self.fs.cat_file(posixpath.join(stage, "model", name))) != digest:
                    raise ForesightError(f"staged copy of {name} does not match its source")
            self._fault("promote_version")
            self.fs.mv(stage, self._p(kind, version), recursive=True)
        except BaseException:
            if self.fs.exists(stage):
                self.fs.rm(stage, recursive=True)
            raise
        self.point(kind, version)
        return version

    def point(self, kind: str, version: str) -> None:
        """Switch `current` to `version` atomically (temp + fsync + rename)."""
        data = json.dumps({"version": version,
                           "manifest_sha256": _sha256(self.fs.cat_file(
                               self._p(kind, version, MANIFEST))),
                           "switched": datetime.now(timezone.utc).isoformat(timespec="seconds")
                           }).encode()
        target = self._p(kind, POINTER)
        if not self.local:
            # Object stores: one PUT is atomic (readers see the old or the new object).
            self._fault("write_pointer_tmp")
            self._fault("fsync_pointer")
            self._fault("rename_pointer")
            self.fs.pipe_file(target, data)
            return
        self._fault("write_pointer_tmp")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".current.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                self._fault("fsync_pointer")
                fh.flush()
                os.fsync(fh.fileno())
            self._fault("rename_pointer")
            os.replace(tmp, target)
            dfd = os.open(os.path.dirname(target), os.O_RDONLY)
            try:
                os.fsync(dfd)  # make the rename itself durable
            finally:
                os.close(dfd)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def rollback(self, kind: str, version: str) -> None:
        """Point `current` at an existing, verified older (or newer) version."""
        if version not in self.versions(kind):
            have = ", ".join(self.versions(kind)) or "none"
            raise ForesightError(f"{kind} version {version} does not exist (have: {have})")
        problems = self.check(kind, version)
        if problems:
            raise ForesightError(f"refusing to roll back to {kind} {version}: {problems[0]}")
        self.point(kind, version)

    def clean_staging(self) -> int:
        """Remove staging directories left by killed runs; returns how many."""
        n = 0
        for kind in self.kinds():
            for p in self.fs.ls(self._p(kind), detail=False):
                if posixpath.basename(p.rstrip("/")).startswith(".staging-"):
                    self.fs.rm(p, recursive=True)
                    n += 1
        return n
