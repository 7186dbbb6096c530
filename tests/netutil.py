"""Loopback helpers shared by the tests that start real servers."""
from __future__ import annotations

import socket
import subprocess
import time
from typing import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(get: Callable, url: str, proc: subprocess.Popen, timeout_s: float = 40.0,
               transport_error: type[BaseException] = OSError) -> None:
    """Poll `get(url)` until it answers 200; fail early if the server process exits."""
    deadline = time.time() + timeout_s
    while True:
        try:
            if get(url).status_code == 200:
                return
        except transport_error:
            pass
        assert time.time() < deadline and proc.poll() is None, f"{url} never became ready"
        time.sleep(0.1)


def start_serve(args: list[str], root, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`foresight serve ARGS --port N` on loopback as a user runs it; (process, base URL)."""
    import sys

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "foresight.cli", "serve", *args,
                             "--port", str(port)], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, f"http://127.0.0.1:{port}"
