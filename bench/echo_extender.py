"""An extender that decides nothing, as fast as Python answers: filter (and filter-best)
passes every node it is sent, prioritize scores every node 0. bench/scheduler_overhead.py runs
a kube-scheduler against it, so what an extender costs kube-scheduler itself (encoding the pod
and the node names, the loopback HTTP calls, decoding the answers) is measured apart from what
Foresight's scoring adds. Same HTTP stack as `foresight serve --only extender` (uvicorn + fastproto).

Usage: python bench/echo_extender.py PORT
"""
from __future__ import annotations

import sys
from pathlib import Path

import orjson
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scheduler_hook.fastproto import verb_protocol  # noqa: E402

KEY = b'"NodeNames":'


def _names(body: bytes) -> bytes:
    """The NodeNames array as sent (kube-scheduler writes it last, nodeCacheCapable)."""
    i = body.rfind(KEY)
    return body[i + len(KEY):body.rstrip().rindex(b"}")] if i >= 0 else b"null"


def filter_(body: bytes) -> tuple[int, bytes]:
    return 200, (b'{"Nodes":null,"NodeNames":' + _names(body) +
                 b',"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}')


def prioritize(body: bytes) -> tuple[int, bytes]:
    names = orjson.loads(_names(body)) or []
    return 200, orjson.dumps([{"Host": n, "Score": 0} for n in names])


async def app(scope: dict, receive: object, send: object) -> None:  # only /readyz
    await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False, lifespan="off",
                http=verb_protocol({"/scheduler/filter": filter_,
                                    "/scheduler/filter-best": filter_,  # no best: all tie
                                    "/scheduler/prioritize": prioritize}))
