"""Load cluster state from `kubectl get nodes,pods -A -o json` (a v1 List; PodGroups listed
with them, `kubectl get nodes,pods,podgroups -A -o json`, give gang sizes)."""
from __future__ import annotations

from pathlib import Path

import orjson

from ground.errors import ForesightError
from scheduler_hook.podspec import PodSpecError
from scheduler_hook.state import ClusterState
from scheduler_hook.waiting import POD_GROUP_KINDS


def split_list(doc: object) -> tuple[list[dict], list[dict]]:
    """Nodes and pods of a v1 List (or a NodeList/PodList); raise ValueError otherwise."""
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ValueError("expected a v1 List with an 'items' array")
    kind = str(doc.get("kind", "List"))
    nodes, pods = [], []
    for item in doc["items"]:
        if not isinstance(item, dict):
            raise ValueError("List items must be objects")
        k = item.get("kind") or {"NodeList": "Node", "PodList": "Pod"}.get(kind, "")
        if k == "Node":
            nodes.append(item)
        elif k == "Pod":
            pods.append(item)
    return nodes, pods


def load_snapshot(path: str | Path, state: ClusterState | None = None) -> ClusterState:
    """Fill `state` (or a new one) from a snapshot file and mark it ready."""
    p = Path(path)
    try:
        doc = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise ForesightError(f"snapshot not found: {p}") from None
    except orjson.JSONDecodeError as exc:
        raise ForesightError(f"snapshot {p} is not JSON: {exc}") from None
    state = state or ClusterState()
    try:
        nodes, pods = split_list(doc)
        state.replace_all(nodes, pods)
        state.waiting.set_pod_groups([i for i in doc["items"] if isinstance(i, dict)
                                      and i.get("kind") in POD_GROUP_KINDS])
    except (ValueError, PodSpecError) as exc:
        raise ForesightError(f"snapshot {p}: {exc}") from None
    state.ready = True
    return state
