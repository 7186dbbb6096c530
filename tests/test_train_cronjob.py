"""deploy/cronjob-train.yaml: the retraining CronJob runs a valid `foresight train`."""
from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from foresight.cli import app

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "cronjob-train.yaml"


def _docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_cronjob_shape() -> None:
    docs = _docs()
    cj = docs["CronJob"]
    assert cj["apiVersion"] == "batch/v1"
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    job = cj["spec"]["jobTemplate"]["spec"]
    assert 0 < job["backoffLimit"] <= 5
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    c = pod["containers"][0]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    args = c["args"]
    reg = args[args.index("--registry") + 1]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts[reg] == "models"
    vol = {v["name"]: v for v in pod["volumes"]}["models"]
    claims = {d["metadata"]["name"] for d in yaml.safe_load_all(MANIFEST.read_text())
              if d and d["kind"] == "PersistentVolumeClaim"}  # models, and the pull's scratch
    assert vol["persistentVolumeClaim"]["claimName"] in claims
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]


def test_cronjob_args_are_options_of_the_train_command() -> None:
    args = _docs()["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["foresight", "train"]
    help_text = CliRunner().invoke(app, ["train", "--help"], terminal_width=200).output
    for a in args[2:]:
        if a.startswith("--"):
            assert a in help_text, a
