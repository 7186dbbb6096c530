"""The `k8s.io/kube-scheduler/extender/v1` wire format: Go field names as JSON keys.

Parsing is strict about shape (a malformed body is the caller's error: HTTP 400 with the
reason) and lenient about content (unknown node names are simply not scored).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import orjson


class WireError(ValueError):
    """Malformed extender request; the message is the 400 reason."""


@dataclass
class ExtenderArgs:
    pod: dict[str, Any]
    names: Sequence[str]              # a tuple shared between requests when ArgsParser reuses it
    node_objects: list[dict] | None   # set when nodeCacheCapable is false
    cache_capable: bool
    names_json: bytes | None = None   # the NodeNames array as sent, where ArgsParser checked it


def _object(body: bytes) -> dict:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError("body must be a JSON object")
    return doc


def _go_fields(doc: dict, fields: tuple[str, ...]) -> dict:
    """`doc` with each of a Go struct's `fields` found by exact key, else case-insensitively,
    as Go's encoding/json decodes (an extender client or server written in Go takes `pod` and
    `nodenames` as well)."""
    if all(f in doc for f in fields):
        return doc
    folded = {k.lower(): k for k in doc}
    return {**doc, **{f: doc[folded[f.lower()]] for f in fields
                      if f not in doc and f.lower() in folded}}


def _pod(doc: dict) -> dict:
    pod = doc.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("Pod must be an object (a v1.Pod)")
    return pod


def parse_args(body: bytes) -> ExtenderArgs:
    """ExtenderArgs{Pod, Nodes, NodeNames}; exactly one of Nodes/NodeNames carries the nodes."""
    doc = _go_fields(_object(body), ("Pod", "Nodes", "NodeNames"))
    pod = _pod(doc)
    names_raw, nodes_raw = doc.get("NodeNames"), doc.get("Nodes")
    if names_raw is not None:
        if not isinstance(names_raw, list) or not set(map(type, names_raw)) <= {str}:
            raise WireError("NodeNames must be a list of strings or null")
        return ExtenderArgs(pod, list(names_raw), None, True)
    if nodes_raw is None:
        raise WireError("one of Nodes or NodeNames must be set")
    if not isinstance(nodes_raw, dict) or not isinstance(nodes_raw.get("items", []), list):
        raise WireError("Nodes must be a v1.NodeList object with an items list")
    items = nodes_raw.get("items") or []
    names = []
    for i, node in enumerate(items):
        meta = node.get("metadata") if isinstance(node, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise WireError(f"Nodes.items[{i}].metadata.name must be a non-empty string")
        names.append(name)
    return ExtenderArgs(pod, names, items, False)


_NAMES_KEY = b'"NodeNames":'


class ArgsParser:
    """parse_args that remembers the last few NodeNames arrays, byte for byte.

    kube-scheduler sends the same thousands of node names pod after pod (Go writes the fields
    in struct order, so `"NodeNames":[...]` closes the body). Decoding and type-checking 5,000
    names and hashing them to find their rows cost more than scoring the pod, so when the bytes
    after the last `"NodeNames":` equal an array already parsed, only the rest is decoded and
    the earlier tuple (same object: later caches key on it) is reused. That is exact: the rest
    with `null` in place of a valid JSON value parses iff the whole body does, and to the same
    Pod. Anything else takes the plain path.
    """

    MIN_NAMES = 64  # short lists are cheap to parse: not worth remembering

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._known: list[tuple[bytes, tuple[str, ...]]] = []  # (array bytes, names), newest last

    def __call__(self, body: bytes) -> ExtenderArgs:
        i = body.rfind(_NAMES_KEY)
        tail = body[i + len(_NAMES_KEY):-1] if i > 0 and body.endswith(b"}") else b""
        if len(tail) > 2 * self.MIN_NAMES:
            for k in range(len(self._known) - 1, -1, -1):
                raw, names = self._known[k]
                if raw == tail:  # length check, then memcmp
                    pod = _pod(_object(body[:i] + _NAMES_KEY + b"null}"))
                    if k != len(self._known) - 1:  # most recently used last: the full node
                        self._known.append(self._known.pop(k))  # list outlives subsets
                    return ExtenderArgs(pod, names, None, True, raw)
        args = parse_args(body)
        if args.cache_capable and len(args.names) >= self.MIN_NAMES and tail:
            # The body parsed; if it still parses with `null` after the key, that key is a
            # top-level one closing the object, so the tail is exactly the NodeNames value.
            try:
                _object(body[:i] + _NAMES_KEY + b"null}")
            except WireError:
                return args
            args.names, args.names_json = tuple(args.names), bytes(tail)
            self._known = [*self._known[-(self.keep - 1):], (bytes(tail), args.names)]
        return args


def filter_result(args: ExtenderArgs, passed: list[str], failed: dict[str, str],
                  unresolvable: dict[str, str], error: str = "") -> dict[str, Any]:
    """ExtenderFilterResult, answering in the mode the request came in."""
    if args.cache_capable:
        nodes, names = None, passed
    else:
        keep = set(passed)
        nodes = {"metadata": {}, "items": [o for o, n in zip(args.node_objects or [], args.names)
                                           if n in keep]}
        names = None
    return {"Nodes": nodes, "NodeNames": names, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": error}


_PASS_ALL = (b'{"Nodes":null,"NodeNames":', b',"FailedNodes":{},'
             b'"FailedAndUnresolvableNodes":{},"Error":""}')


def filter_json(args: ExtenderArgs, result: dict[str, Any]) -> bytes:
    """filter_result() serialized. When every node passed, the answer's NodeNames is the
    request's array: its bytes are sent back as they came (thousands of names not encoded
    again)."""
    passed = result["NodeNames"]
    if args.names_json is not None and passed is not None and \
            len(passed) == len(args.names) and not result["FailedNodes"] and \
            not result["FailedAndUnresolvableNodes"] and not result["Error"]:
        return _PASS_ALL[0] + args.names_json + _PASS_ALL[1]  # passed is names, in order
    return orjson.dumps(result)


def best_json(args: ExtenderArgs, result: dict[str, Any]) -> bytes:
    """filter_json() of a filter-best answer: where some node passes, without the failure maps.

    kube-scheduler v1.34 builds the pod's feasible list from the answer's NodeNames (or
    Nodes) alone (pkg/scheduler/extender.go, HTTPExtender.Filter) and reads FailedNodes /
    FailedAndUnresolvableNodes only to record a status per named node
    (schedule_one.go, findNodesThatPassExtenders); those statuses feed the FitError message
    and preemption, which happen only when no node is left. A node in neither list is just
    dropped (filter-best already leaves out the passing nodes below the top score). So while
    a node passes, the reasons are bytes kube-scheduler decodes and stores for nothing; when
    none passes they stay, so the pod's FailedScheduling event says why. /v1/explain keeps
    every reason either way."""
    passed = result["NodeNames"] if args.cache_capable else (result["Nodes"] or {}).get("items")
    if passed and (result["FailedNodes"] or result["FailedAndUnresolvableNodes"]):
        result = {**result, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
    return filter_json(args, result)


@dataclass
class BindingArgs:
    name: str
    namespace: str
    uid: str
    node: str


def parse_binding(body: bytes) -> BindingArgs:
    doc = _go_fields(_object(body), ("PodName", "PodNamespace", "PodUID", "Node"))
    vals = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        v = doc.get(key, "")
        if not isinstance(v, str):
            raise WireError(f"{key} must be a string")
        vals[key] = v
    if not vals["PodName"] or not vals["Node"]:
        raise WireError("PodName and Node must be non-empty")
    return BindingArgs(vals["PodName"], vals["PodNamespace"] or "default", vals["PodUID"],
                       vals["Node"])
