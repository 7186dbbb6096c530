"""A real control plane on loopback for tests and benchmarks: etcd, kube-apiserver and
kube-scheduler v1.34 from `../shared/k8s/` (see its README), GPU nodes without kubelets.

`binaries()` unpacks them into a cache directory outside the repository (None where
`../shared/k8s` is absent, so callers can skip). `ControlPlane` starts etcd + apiserver with a
throw-away token, serving certificate (the apiserver's own self-signed one) and service-account
key, and stops every process it started by PID. Nodes are created with status in one request
(no kubelet will ever report it) and without the not-ready taint, so kube-scheduler binds pods
to them at once.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import requests
import urllib3
import yaml

from scheduler_hook.kube_keys import rsa_private_key_pem

ROOT = Path(__file__).resolve().parents[1]
SHARED_K8S = ROOT.parent / "shared" / "k8s"
SCHEDULER_CONFIG = ROOT / "deploy" / "kube-scheduler-config.yaml"


def binaries(shared: Path = SHARED_K8S) -> Path | None:
    """Directory holding etcd, kube-apiserver and kube-scheduler (unpacked and checked once per
    machine by the shared unpack.sh); None when the shared binaries are not there."""
    if not (shared / "unpack.sh").is_file():
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "foresight-k8s"
    if not all((cache / b).is_file() for b in ("etcd", "kube-apiserver", "kube-scheduler")):
        subprocess.run(["bash", str(shared / "unpack.sh"), str(cache)], check=True,
                       stdout=subprocess.DEVNULL)
    return cache


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_node(name: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3",
             gpu_mem_mib: int = 81920, labels: dict | None = None,
             annotations: dict | None = None, extra: dict | None = None) -> dict:
    """A Node as a kubelet + GPU feature discovery would leave it. CPU and memory are huge so
    that kube-scheduler's own resource scores are flat across nodes: differences in where pods
    land come from the extender."""
    alloc = {"cpu": "10000", "memory": "100Ti", "pods": "500", "nvidia.com/gpu": str(gpus),
             **(extra or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                   "nvidia.com/gpu.product": product,
                                                   "nvidia.com/gpu.memory": str(gpu_mem_mib),
                                                   **(labels or {})},
                         "annotations": dict(annotations or {})},
            "spec": {},
            "status": {"allocatable": alloc, "capacity": alloc,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady", "message": "fake"}]}}


def gpu_pod(name: str, scheduler: str, gpus: int = 0, fraction: float | None = None,
            mig: str = "", labels: dict | None = None, annotations: dict | None = None) -> dict:
    """A pod kube-scheduler sends to the extender: whole GPUs, a KAI share (`gpu-fraction` with
    one `nvidia.com/gpu`, as deploy/README-extender.md asks) or a MIG profile."""
    ann = dict(annotations or {})
    res: dict[str, str] = {}
    if fraction is not None:
        ann["gpu-fraction"] = str(fraction)
        res["nvidia.com/gpu"] = "1"
    elif mig:
        res[f"nvidia.com/mig-{mig}"] = "1"
    elif gpus:
        res["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": dict(labels or {}),
                         "annotations": ann},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": res, "requests": res}}]}}


class ControlPlane:
    """etcd + kube-apiserver (+ any kube-scheduler started through it) in a temp directory."""

    def __init__(self, bin_dir: Path, workdir: Path | None = None) -> None:
        self.bin = bin_dir
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="foresight-k8s-"))
        self._own_dir = workdir is None
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.pids: dict[str, int] = {}  # process name -> PID (for CPU accounting)
        self.kubeconfig = self.dir / "kubeconfig"
        self.session = self._session()

    def _session(self) -> requests.Session:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        s = requests.Session()
        s.verify = False  # the apiserver's self-signed loopback certificate
        s.trust_env = False  # else REQUESTS_CA_BUNDLE overrides verify, and proxies apply
        s.headers["Authorization"] = f"Bearer {self.token}"
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=16)
        s.mount("https://", adapter)
        return s

    # ---- processes -----------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        self.pids[name] = proc.pid
        return proc

    def log_tail(self, name: str, n: int = 3000) -> str:
        p = self.dir / f"{name}.log"
        return p.read_bytes()[-n:].decode(errors="replace") if p.exists() else ""

    def start(self, timeout_s: float = 60.0) -> "ControlPlane":
        d = self.dir
        ep, pp = free_port(), free_port()
        self._spawn("etcd", [
            str(self.bin / "etcd"), "--data-dir", str(d / "etcd"), "--name", "default",
            "--listen-client-urls", f"http://127.0.0.1:{ep}",
            "--advertise-client-urls", f"http://127.0.0.1:{ep}",
            "--listen-peer-urls", f"http://127.0.0.1:{pp}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
            "--initial-cluster", f"default=http://127.0.0.1:{pp}",
            "--unsafe-no-fsync", "--log-level", "warn"])  # throw-away data: no fsync stalls
        (d / "sa.key").write_bytes(rsa_private_key_pem())
        (d / "tokens.csv").write_text(f"{self.token},admin,admin-uid,system:masters\n")
        (d / "certs").mkdir(exist_ok=True)
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{ep}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={d / 'certs'}", "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.key'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            # no kubelets and no controller-manager: nodes are never tainted not-ready, and
            # pods need no ServiceAccount object
            "--disable-admission-plugins=TaintNodesByCondition,ServiceAccount",
            "--profiling=false", "--v=0"])
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": self.url,
                                                       "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}]}))
        try:
            self._wait(self.url + "/readyz", "kube-apiserver", timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, url: str, name: str, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while True:
            try:
                if self.session.get(url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.time() > deadline:
                raise RuntimeError(f"{name} not ready at {url}:\n{self.log_tail(name)}")
            time.sleep(0.2)

    def start_scheduler(self, name: str = "kube-scheduler", extender_url: str | None = None,
                        scheduler_name: str = "foresight-scheduler",
                        timeout_s: float = 30.0, percentage: int | None = None,
                        config: Path = SCHEDULER_CONFIG) -> str:
        """kube-scheduler with the shipped config: its extender pointed at `extender_url`
        (None: the extender stanza dropped, the baseline), profile `scheduler_name`, no leader
        election. `percentage`: the profile's percentageOfNodesToScore instead of the shipped
        one (0: unset, kube-scheduler's adaptive default). `config`: another
        KubeSchedulerConfiguration (an older commit's, for a before/after). Returns its https
        base URL (for /metrics)."""
        cfg = yaml.safe_load(config.read_text())
        cfg["leaderElection"] = {"leaderElect": False}
        cfg["clientConnection"] = {"kubeconfig": str(self.kubeconfig), "qps": 500, "burst": 1000}
        cfg["profiles"][0]["schedulerName"] = scheduler_name
        if percentage is not None:
            cfg.pop("percentageOfNodesToScore", None)
            cfg["profiles"][0].pop("percentageOfNodesToScore", None)
            if percentage:
                cfg["profiles"][0]["percentageOfNodesToScore"] = percentage
        if extender_url is None:
            cfg.pop("extenders", None)
        else:
            cfg["extenders"][0]["urlPrefix"] = extender_url.rstrip("/") + "/scheduler"
        path = self.dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        port = free_port()
        self._spawn(name, [
            str(self.bin / "kube-scheduler"), f"--config={path}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=1"])
        url = f"https://127.0.0.1:{port}"
        self._wait(url + "/healthz", name, timeout_s)
        return url

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- API -----------------------------------------------------------------------------
    def create(self, path: str, obj: dict) -> dict:
        r = self.session.post(self.url + path, json=obj, timeout=30)
        if r.status_code not in (200, 201):
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:300]}")
        return r.json()

    def create_nodes(self, nodes: Iterable[dict], workers: int = 8) -> None:
        """Create nodes (their status set in the same request: nothing else will set it)."""
        nodes = list(nodes)
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda n: self.create("/api/v1/nodes", n), nodes))

    def create_pod(self, pod: dict) -> dict:
        ns = pod["metadata"].get("namespace", "default")
        return self.create(f"/api/v1/namespaces/{ns}/pods", pod)

    def pods(self, selector: str = "") -> list[dict]:
        r = self.session.get(self.url + "/api/v1/pods", params={"labelSelector": selector}
                             if selector else None, timeout=30)
        r.raise_for_status()
        return r.json()["items"]

    def wait_bound(self, names: Iterable[str], timeout_s: float = 30.0,
                   namespace: str = "default") -> dict[str, str]:
        """{pod: node} once every named pod has spec.nodeName; raises on timeout.

        Polls only the namespace's unbound pods (a field selector): listing every pod every
        50 ms had the apiserver serialize the whole cluster (10,000 pods at 5,000 nodes) while
        the schedulers it measures were working."""
        want, deadline = set(names), time.time() + timeout_s
        url = f"{self.url}/api/v1/namespaces/{namespace}/pods"
        while True:
            r = self.session.get(url, params={"fieldSelector": "spec.nodeName="}, timeout=30)
            r.raise_for_status()
            waiting = want & {p["metadata"]["name"] for p in r.json()["items"]}
            if not waiting:
                break
            if time.time() > deadline:
                raise TimeoutError(f"pods not bound after {timeout_s}s: {sorted(waiting)}")
            time.sleep(0.05)
        got = {}
        for name in want:
            r = self.session.get(f"{url}/{name}", timeout=30)
            r.raise_for_status()  # a pod that was never created (or deleted) is an error
            got[name] = r.json()["spec"].get("nodeName") or ""
        if not all(got.values()):  # unbound again between the two reads: not expected here
            raise TimeoutError(f"pods not bound: {sorted(n for n in want if not got[n])}")
        return got

    def metrics_text(self, base_url: str) -> str:
        r = self.session.get(base_url + "/metrics", timeout=30)
        r.raise_for_status()
        return r.text


def start_extender(kubeconfig: Path, nodes: int | None = None, timeout_s: float = 120.0,
                   root: Path = ROOT, registry: Path | None = None
                   ) -> tuple[subprocess.Popen, str]:
    """`foresight serve --only extender` on loopback watching the cluster of `kubeconfig`, as
    deployed; returns (process, base URL) once it is ready (and holds `nodes` nodes, if given).
    `root`: the source tree it runs from (another checkout, to compare two versions);
    `registry`: the models it scores with (none: allocation-based fallback).
    """
    import sys

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", "--only",
                             "extender", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning",
                             *(["--registry", str(registry)] if registry else [])],
                            cwd=root, env=env)
    url = f"http://127.0.0.1:{port}"
    local = requests.Session()
    local.trust_env = False  # loopback: no proxy from the environment
    deadline = time.time() + timeout_s
    while True:
        try:
            r = local.get(url + "/readyz", timeout=5)
            if r.status_code == 200 and nodes in (None, r.json().get("nodes")):
                return proc, url
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"extender not ready at {url} (exit code {proc.poll()})")
        time.sleep(0.2)


def histogram_totals(metrics_text: str, metric: str, *labels: str) -> tuple[float, float]:
    """(sum, count) of a Prometheus histogram over the series carrying every `labels` item
    (e.g. 'profile="x"')."""
    total = count = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith(metric + "_") or not all(x in line for x in labels):
            continue
        name, value = line.split("{", 1)[0].split(" ", 1)[0], float(line.rsplit(" ", 1)[1])
        if name == metric + "_sum":
            total += value
        elif name == metric + "_count":
            count += value
    return total, count


def attempt_totals(metrics_text: str, profile: str) -> tuple[float, float]:
    """(sum of seconds, count) of kube-scheduler's scheduling_attempt_duration_seconds for
    `profile`'s successful attempts (scheduling cycle through the binding API call)."""
    return histogram_totals(metrics_text, "scheduler_scheduling_attempt_duration_seconds",
                            f'profile="{profile}"', 'result="scheduled"')


def algorithm_totals(metrics_text: str) -> tuple[float, float]:
    """(sum, count) of scheduling_algorithm_duration_seconds: filter + score of one pod,
    extender calls included, binding not (one profile per scheduler process here)."""
    return histogram_totals(metrics_text, "scheduler_scheduling_algorithm_duration_seconds")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
