"""What the real-control-plane tests share: a started etcd + kube-apiserver, or a skip."""
from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_hook.kube_local import SHARED_K8S, ControlPlane, binaries


def control_plane(workdir: Path) -> ControlPlane:
    """etcd + kube-apiserver on loopback in `workdir`; skips the test where ../shared/k8s
    has no binaries (a user's fresh clone)."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip(f"no Kubernetes binaries at {SHARED_K8S} (etcd, kube-apiserver, "
                    "kube-scheduler v1.34 from the shared folder): real-scheduler test skipped")
    return ControlPlane(bin_dir, workdir).start()
