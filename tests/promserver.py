"""Start the real `prometheus` binary for tests and benchmarks, and stop it by PID."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import requests
import urllib3
from netutil import free_port  # noqa: F401 (re-exported for other tests)

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


class PrometheusServer:
    """A Prometheus on a free loopback port over a given TSDB directory.

    `web_config` (YAML text) enables basic auth or TLS as `--web.config.file` does.
    """

    def __init__(self, tsdb: Path, retention: str = "30d", web_config: str | None = None) -> None:
        self.tsdb = Path(tsdb)
        self.retention = retention
        self.web_config = web_config
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.web_config and "tls_server_config" in self.web_config else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "PrometheusServer":
        exe = shutil.which("prometheus")
        if exe is None:
            raise RuntimeError("prometheus is not on PATH (make test installs Debian's package)")
        self.tsdb.mkdir(parents=True, exist_ok=True)
        config = self.tsdb.parent / f"{self.tsdb.name}-prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        self.port = free_port()
        args = [exe, f"--config.file={config}", f"--storage.tsdb.path={self.tsdb}",
                f"--storage.tsdb.retention.time={self.retention}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        if self.web_config:
            web = self.tsdb.parent / f"{self.tsdb.name}-web.yml"
            web.write_text(self.web_config)
            args.append(f"--web.config.file={web}")
        self.log = open(self.tsdb.parent / f"{self.tsdb.name}-prometheus.log", "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: "
                                   f"{Path(self.log.name).read_text()[-2000:]}")
            try:
                r = requests.get(f"{self.url}/-/ready", timeout=1, verify=False)
                if r.status_code in (200, 401):  # 401: up, behind basic auth
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("prometheus did not become ready in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
