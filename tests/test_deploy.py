"""deploy/ manifests: valid YAML, the kinds and fields issue 6 names, and consistent wiring."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
API_VERSIONS = {"Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Service": "v1",
                "Deployment": "apps/v1", "ClusterRole": "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
                "Role": "rbac.authorization.k8s.io/v1",
                "RoleBinding": "rbac.authorization.k8s.io/v1",
                "KubeSchedulerConfiguration": "kubescheduler.config.k8s.io/v1",
                "CronJob": "batch/v1", "PersistentVolumeClaim": "v1"}


MINE = ("kube-scheduler-config.yaml", "scheduler.yaml", "extender.yaml")  # the extender's part
ALL = tuple(sorted(p.name for p in DEPLOY.glob("*.yaml")))


def docs(names: tuple[str, ...] = MINE) -> list[dict]:
    out = []
    for f in (DEPLOY / name for name in names):
        out += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return out


def one(kind: str, name: str | None = None) -> dict:
    found = [d for d in docs() if d["kind"] == kind
             and (name is None or d.get("metadata", {}).get("name") == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def test_every_manifest_has_known_kind_api_version_and_name():
    assert set(MINE) < set(ALL)
    kinds = set()
    for d in docs(ALL):
        assert d["apiVersion"] == API_VERSIONS[d["kind"]], d["kind"]
        if d["kind"] != "KubeSchedulerConfiguration":
            assert d["metadata"]["name"]
        kinds.add(d["kind"])
    assert {"KubeSchedulerConfiguration", "Deployment", "Service", "ServiceAccount",
            "ClusterRole", "ClusterRoleBinding", "CronJob"} <= kinds


def scheduler_config() -> dict:
    return one("KubeSchedulerConfiguration")


def test_scheduler_profile_uses_the_extender_ignorably_for_gpu_resources():
    cfg = scheduler_config()
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["foresight-scheduler"]
    (ext,) = cfg["extenders"]
    assert ext["ignorable"] is True and ext["nodeCacheCapable"] is True
    # one call per pod: filter and prioritize answered by filter-best (no prioritizeVerb)
    assert ext["filterVerb"] == "filter-best" and "prioritizeVerb" not in ext
    names = {m["name"] for m in ext["managedResources"]}
    assert "nvidia.com/gpu" in names and "nvidia.com/mig-3g.20gb" in names
    assert all(n == "nvidia.com/gpu" or n.startswith("nvidia.com/mig-") for n in names)
    assert 1 <= ext["weight"] <= 100
    assert ext["httpTimeout"] == "5s"
    assert cfg["leaderElection"]["resourceName"] != "kube-scheduler"  # no clash with default


def test_extender_url_reaches_the_service_and_router_paths():
    from scheduler_hook.app import create_app
    from scheduler_hook.config import load_config
    from scheduler_hook.hook import ExtenderHook
    from scheduler_hook.providers import ProviderSet
    from scheduler_hook.state import ClusterState

    ext = scheduler_config()["extenders"][0]
    url = urlparse(ext["urlPrefix"])
    svc = one("Service", "foresight-extender")
    host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert url.hostname == host and url.port == svc["spec"]["ports"][0]["port"]
    app = create_app(ExtenderHook(ClusterState(), ProviderSet(), load_config()))
    routes = set(app.openapi()["paths"])
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        if verb in ext:
            assert f"{url.path}/{ext[verb]}" in routes
    for verb in ("filter", "prioritize", "bind"):  # the two-call config still works
        assert f"{url.path}/{verb}" in routes
    dep = one("Deployment", "foresight-extender")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["path"] in routes
    assert c["readinessProbe"]["httpGet"]["path"] in routes
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] in ports
    assert str(ports["http"]) == c["args"][c["args"].index("--port") + 1]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_extender_args_are_options_of_the_serve_command():
    import typer.main

    from foresight.cli import app

    serve = typer.main.get_command(app).commands["serve"]
    opts = {o for p in serve.params for o in p.opts}
    args = one("Deployment", "foresight-extender")["spec"]["template"]["spec"]["containers"][0][
        "args"]
    assert args[:2] == ["foresight", "serve"]
    assert {a for a in args if a.startswith("--")} <= opts
    assert args[args.index("--only") + 1] == "extender"


def test_embedded_scheduler_config_matches_the_file():
    cm = one("ConfigMap", "foresight-scheduler-config")
    embedded = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
    assert embedded == scheduler_config()
    dep = one("Deployment", "foresight-scheduler")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    mount = c["volumeMounts"][0]["mountPath"]
    assert f"--config={mount}/kube-scheduler-config.yaml" in c["command"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "foresight-scheduler"


@pytest.mark.parametrize("role", ["foresight-extender"])
def test_extender_rbac_is_least_privilege(role):
    rules = one("ClusterRole", role)["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert not any("*" in x for t in granted for x in t)
    assert granted == {("", "nodes", v) for v in ("get", "list", "watch")} | \
        {("", "pods", v) for v in ("get", "list", "watch", "patch")} | \
        {("", "pods/binding", "create")}
    binding = one("ClusterRoleBinding", role)
    assert binding["roleRef"]["name"] == role
    dep = one("Deployment", "foresight-extender")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == \
        binding["subjects"][0]["name"]


def test_scheduler_binds_only_upstream_scheduler_roles():
    names = {d["roleRef"]["name"] for d in docs()
             if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and d["subjects"][0]["name"] == "foresight-scheduler"}
    assert names == {"system:kube-scheduler", "system:volume-scheduler",
                     "extension-apiserver-authentication-reader", "foresight-scheduler-lease"}
    lease = one("Role", "foresight-scheduler-lease")
    named = [r for r in lease["rules"] if "resourceNames" in r]
    assert named and named[0]["resourceNames"] == [scheduler_config()["leaderElection"][
        "resourceName"]]


def test_training_cronjob_pulls_into_a_scratch_claim_with_memory_sized_from_the_bench():
    text = (DEPLOY / "cronjob-train.yaml").read_text()
    found = [d for d in yaml.safe_load_all(text) if d]
    job = next(d for d in found if d["kind"] == "CronJob")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = c["args"]
    scratch = args[args.index("--scratch") + 1]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == scratch)
    vol = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claims = {d["metadata"]["name"] for d in found if d["kind"] == "PersistentVolumeClaim"}
    # a claim, not an emptyDir: a retried pod resumes the pull from what is there
    assert vol["persistentVolumeClaim"]["claimName"] in claims
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["memory"]
    assert "bench/results/train_scale.md" in text  # the sizing says where it comes from


def test_extender_configmap_is_a_config_serve_accepts(tmp_path, capsys, monkeypatch):
    """The ConfigMap's extender.yaml goes through the same checks as `serve --config`
    (unknown keys and sections of the wrong shape are refused)."""
    from foresight.cli import main

    def run(*a, **k):  # a check that is missing would start a server: fail, not hang
        raise AssertionError("uvicorn.run reached: the misspelt key was not refused")
    monkeypatch.setattr("uvicorn.run", run)

    text = one("ConfigMap", "foresight-extender-config")["data"]["extender.yaml"]
    (tmp_path / "c.yaml").write_text(text)
    from scheduler_hook.config import load_config

    cfg = load_config(tmp_path / "c.yaml")
    assert cfg["demand"]["prometheus_url"].startswith("http://")
    (tmp_path / "bad.yaml").write_text(text.replace("prometheus_url:", "prometheus_ulr:"))
    (tmp_path / "snap.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    rc = main(["serve", "--only", "extender", "--snapshot", str(tmp_path / "snap.json"),
               "--config", str(tmp_path / "bad.yaml"), "--port", "1"])
    assert rc == 2 and "prometheus_ulr" in capsys.readouterr().err
