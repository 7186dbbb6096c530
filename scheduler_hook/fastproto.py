"""uvicorn's httptools protocol, with the extender verbs answered inside it.

kube-scheduler calls filter and prioritize once each per pod, inside its scheduling cycle, on a
keep-alive connection. Through ASGI each call also pays an asyncio task, a request/response
cycle object, the receive/send coroutines and two socket writes (headers, then body); measured
under a real kube-scheduler that was as much server CPU as scoring the pod. Here a POST to a
verb path is read by the parser callbacks and answered in one write, with the same handlers
(scheduler_hook.app.verb_handlers) and the same bytes. Everything else (other paths, pipelined
requests behind a running ASGI request, `Expect: 100-continue`, upgrades) takes uvicorn's
usual ASGI road, so the app serves it unchanged. A handler's `after` callable, if any, runs
on the loop once its answer is written (between kube-scheduler's cycles, not inside one).
"""
from __future__ import annotations

from typing import Any, Callable

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

Handler = Callable[[bytes], "tuple[int, bytes]"]


class VerbProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose `handlers` (path -> handler) answer POSTs directly."""

    handlers: dict[str, Handler] = {}
    max_body: int = 16 * 1024 * 1024  # as serving.security.Guard on the ASGI road

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._verb: tuple[Handler, list[bytes], bool] | None = None
        self._size = 0

    def on_headers_complete(self) -> None:
        self._verb = None
        handler = self._direct_handler()
        if handler is None:
            super().on_headers_complete()
            return
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        self._verb, self._size = (handler, [], keep_alive), 0

    def _direct_handler(self) -> Handler | None:
        if self.parser.get_method() != b"POST" or self.expect_100_continue or \
                self.parser.should_upgrade():
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return None  # pipelined behind an ASGI request: answers must keep their order
        path = self.url.split(b"?", 1)[0]
        return self.handlers.get(path.decode("ascii", "replace"))

    def on_body(self, body: bytes) -> None:
        if self._verb is None:
            super().on_body(body)
        else:
            self._size += len(body)
            if self._size <= self.max_body:  # past the limit the rest is read and dropped
                self._verb[1].append(body)

    def on_message_complete(self) -> None:
        if self._verb is None:
            super().on_message_complete()
            return
        handler, chunks, keep_alive = self._verb
        self._verb = None
        if self._size > self.max_body:
            status, payload = 413, orjson.dumps({"error": f"request body over {self.max_body} "
                                                          "bytes"})
            handler = None  # type: ignore[assignment]
        else:
            status, payload = handler(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:  # server, date: as uvicorn
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\ncontent-length: ",
                 str(len(payload)).encode(), b"\r\n"]
        if not keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.transport.write(b"".join(head) + payload)  # one write: one segment, one wake-up
        after = getattr(handler, "after", None)
        if after is not None:  # work for later (hook.warm_next): after the answer is sent
            self.loop.call_soon(after)
        self.server_state.total_requests += 1
        if not keep_alive:
            self.transport.close()
        elif not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler)


def verb_protocol(handlers: dict[str, Handler],
                  max_body: int = VerbProtocol.max_body) -> type[VerbProtocol]:
    """A VerbProtocol class bound to `handlers` (uvicorn takes a class, not an instance)."""
    return type("ExtenderVerbProtocol", (VerbProtocol,),
                {"handlers": dict(handlers), "max_body": max_body})
