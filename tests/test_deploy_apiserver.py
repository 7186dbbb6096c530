"""deploy/ manifests against a real kube-apiserver v1.34 (../shared/k8s): every object is
created with a server-side dry run and strict field validation, so a misspelt or misplaced
field, a wrong type or an object the API refuses fails here, not on a user's `kubectl apply`.
Namespaces are created for real first (namespaced objects need them)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k8s_support import control_plane

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
NOT_OBJECTS = {"KubeSchedulerConfiguration"}  # a file kube-scheduler reads, not an API object


def manifests() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(DEPLOY.rglob("*.yaml")):
        # kind + apiVersion: a Kubernetes object (not a Prometheus rules or promtool test file)
        out += [(str(f.relative_to(DEPLOY)), d) for d in yaml.safe_load_all(f.read_text())
                if isinstance(d, dict) and "kind" in d and "apiVersion" in d
                and d["kind"] not in NOT_OBJECTS]
    return out


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    cp = control_plane(tmp_path_factory.mktemp("k8s"))
    try:
        yield cp
    finally:
        cp.stop()


def _resources(cp, api_version: str) -> dict[str, dict] | None:
    """kind -> discovery entry of `api_version`, or None where the server does not serve it
    (a CRD such as monitoring.coreos.com's PrometheusRule)."""
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    r = cp.session.get(cp.url + path, timeout=30)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    return {x["kind"]: x for x in r.json()["resources"] if "/" not in x["name"]}


def test_every_deploy_object_passes_the_apiserver_strict_dry_run(apiserver):
    cp, found = apiserver, manifests()
    namespaces = {d["metadata"]["name"] for _, d in found if d["kind"] == "Namespace"}
    for ns in namespaces:  # for real: the namespaced dry runs below need them
        cp.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": ns}})
    checked, unserved, refused = [], [], []
    for where, d in found:
        kinds = _resources(cp, d["apiVersion"])
        if kinds is None or d["kind"] not in kinds:
            unserved.append(f"{where}: {d['apiVersion']} {d['kind']}")
            continue
        res = kinds[d["kind"]]
        base = "/api/v1" if d["apiVersion"] == "v1" else f"/apis/{d['apiVersion']}"
        ns = d["metadata"].get("namespace", "default")
        path = f"{base}/namespaces/{ns}/{res['name']}" if res["namespaced"] \
            else f"{base}/{res['name']}"
        r = cp.session.post(cp.url + path, json=d, timeout=30,
                            params={"dryRun": "All", "fieldValidation": "Strict"})
        ok = r.status_code in (200, 201) or (d["kind"] == "Namespace" and r.status_code == 409)
        (checked if ok else refused).append(
            f"{where}: {d['kind']}/{d['metadata']['name']}" +
            ("" if ok else f" -> {r.status_code} {r.json().get('message', '')[:300]}"))
    assert not refused, "\n".join(refused)
    # what the server cannot check is the monitoring CRDs only, and the rest was checked
    assert all("monitoring.coreos.com" in u for u in unserved), unserved
    kinds_checked = {c.split(": ")[1].split("/")[0] for c in checked}
    assert {"Deployment", "CronJob", "Service", "ConfigMap", "ClusterRole", "RoleBinding",
            "PersistentVolumeClaim", "ServiceAccount"} <= kinds_checked, kinds_checked


def test_the_dry_run_refuses_a_misspelt_field(apiserver):
    """The check above can fail: a field kubectl would silently drop is refused here."""
    cp = apiserver
    dep = next(d for _, d in manifests() if d["kind"] == "Deployment")
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    ns = bad["metadata"].get("namespace", "default")
    cp.session.post(cp.url + "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, timeout=30)
    r = cp.session.post(cp.url + f"/apis/apps/v1/namespaces/{ns}/deployments", json=bad,
                        params={"dryRun": "All", "fieldValidation": "Strict"}, timeout=30)
    assert r.status_code == 400 and "imagePullPolicyy" in r.text, r.text[:300]


def _token(cp, ns: str, sa: str) -> str:
    r = cp.session.post(cp.url + f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": 3600}}, timeout=30)
    assert r.status_code == 201, r.text[:300]
    return r.json()["status"]["token"]


def _kubeconfig(cp, path: Path, token: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": {"server": cp.url,
                                                   "insecure-skip-tls-verify": True}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}]}))
    return path


def test_the_extender_runs_on_its_shipped_rbac_and_on_nothing_more(apiserver, tmp_path):
    """extender.yaml's ServiceAccount, ClusterRole and binding applied for real: the extender,
    run with that account's token, lists and watches the cluster; the account may not read
    secrets, and the same account without the binding may not list nodes."""
    import requests

    from scheduler_hook.kube_local import gpu_node, start_extender

    cp = apiserver
    objs = [d for w, d in manifests() if w == "extender.yaml" and d["kind"] in (
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    assert len(objs) == 4
    for d in objs:
        res = {"Namespace": "/api/v1/namespaces", "ClusterRole":
               "/apis/rbac.authorization.k8s.io/v1/clusterroles", "ClusterRoleBinding":
               "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}.get(d["kind"]) or \
            f"/api/v1/namespaces/{d['metadata']['namespace']}/serviceaccounts"
        r = cp.session.post(cp.url + res, json=d, timeout=30)
        assert r.status_code in (201, 409), r.text[:300]
    sa = next(d for d in objs if d["kind"] == "ServiceAccount")["metadata"]
    token = _token(cp, sa["namespace"], sa["name"])
    cp.create_nodes([gpu_node("rbac-a"), gpu_node("rbac-b")])
    proc, url = start_extender(_kubeconfig(cp, tmp_path / "kc", token), nodes=2, timeout_s=90)
    try:
        assert requests.get(url + "/readyz", timeout=5).json()["nodes"] == 2
    finally:
        proc.kill()
        proc.wait(timeout=30)
    as_sa = requests.Session()
    as_sa.verify, as_sa.trust_env = False, False
    as_sa.headers["Authorization"] = f"Bearer {token}"
    assert as_sa.get(cp.url + "/api/v1/nodes", timeout=30).status_code == 200
    assert as_sa.get(cp.url + "/api/v1/secrets", timeout=30).status_code == 403
    cp.create(f"/api/v1/namespaces/{sa['namespace']}/serviceaccounts",
              {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "unbound", "namespace": sa["namespace"]}})
    as_sa.headers["Authorization"] = f"Bearer {_token(cp, sa['namespace'], 'unbound')}"
    assert as_sa.get(cp.url + "/api/v1/nodes", timeout=30).status_code == 403
