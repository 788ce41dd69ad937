"""`zoo serve`'s stop: every request that reached the server before SIGTERM/Ctrl-C gets its answer, or a JSON 503 when
it is not finished within `serve.drain_s`, and the last line counts them.

uvicorn alone closed the listening socket at once (connections still in its backlog were reset), closed accepted
connections whose request it had not parsed yet, and let a slow client's half-sent body hold the stop until its own
timeout cancelled the request (a plain-text 500 and a CancelledError traceback). Here: the backlog is accepted first,
`Drain` (ASGI middleware) answers a request still unfinished at the deadline with a 503 of its own, and uvicorn's
timeout sits past that deadline as a backstop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import time
from typing import Any

STOP_NAMES = {2: "Ctrl-C", 15: "SIGTERM"}


class Drain:
    """Counts the requests in flight; from `begin()` on, each one still running `drain_s` later is cancelled and
    answered 503 (if its answer has not started)."""

    def __init__(self, app: Any, drain_s: float) -> None:
        self.app, self.drain_s = app, drain_s
        self.active = 0
        self.stopping = False
        self.expired = asyncio.Event()
        self.answered = self.unfinished = 0  # requests that ended after the stop began

    def begin(self) -> None:
        self.stopping = True
        asyncio.get_running_loop().call_later(self.drain_s, self.expired.set)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        self.active += 1
        task = asyncio.ensure_future(self.app(scope, receive, tracked))
        expiry = asyncio.ensure_future(self.expired.wait())
        try:
            await asyncio.wait({task, expiry}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            expiry.cancel()
            self.active -= 1
        if task.done():
            self.answered += self.stopping
            return task.result()
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it was cut short on purpose
            pass
        self.unfinished += 1
        if not started:
            await respond_503(send, self.drain_s)


async def respond_503(send: Any, drain_s: float) -> None:
    body = json.dumps({"error": f"the server is stopping and this request did not finish within serve.drain_s="
                                f"{drain_s:g}; send it again to a running server"}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def accept_backlog(servers: list, deadline: float) -> None:
    """Let the event loop accept the connections waiting in the listen backlog (clients that connected before the
    stop), which closing the listening socket would reset, then read their requests."""
    sockets = [s for server in servers for s in server.sockets]
    while sockets and time.monotonic() < deadline:
        ready, _, _ = select.select(sockets, [], [], 0)
        if not ready:
            break
        await asyncio.sleep(0.005)  # the loop's accept callback runs
    await asyncio.sleep(0.05)  # their request bytes are read and parsed into requests


def summary(drain: Drain, how: str) -> str:
    total = drain.answered + drain.unfinished
    late = f", {drain.unfinished} answered 503 (not finished within serve.drain_s={drain.drain_s:g})" \
        if drain.unfinished else ""
    return f"zoo: server stopped by {how}; {total} request(s) in flight drained: {drain.answered} answered{late}"


def not_a_cancellation(record: logging.LogRecord) -> bool:
    """False for uvicorn's and starlette's reports of a task cancelled by a forced stop (logging filter)."""
    cancelled = record.exc_info is not None and record.exc_info[0] is asyncio.CancelledError
    return not cancelled and "CancelledError" not in record.getMessage()


def server_class(uvicorn: Any, drain: Drain, ready_line: str) -> type:
    """uvicorn.Server that says when it listens, and stops by draining (exit 0: the stop the user asked for)."""

    class Server(uvicorn.Server):
        how = "SIGTERM"
        should_exit: bool  # uvicorn's own flags (uvicorn reaches here as a module argument, untyped)
        force_exit: bool

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # the socket is bound: now say so
                print(ready_line, flush=True)

        def handle_exit(self, sig: int, frame: Any) -> None:  # drain and return (uvicorn would re-raise: exit 143)
            if self.should_exit:  # a second Ctrl-C or SIGTERM: stop waiting
                self.force_exit = True
                # uvicorn then cancels the requests still open and the app's lifespan task, and reports each
                # cancellation with a traceback on the console: the stop was asked for, nothing failed
                logging.getLogger("uvicorn.error").addFilter(not_a_cancellation)
            self.how = STOP_NAMES.get(int(sig), f"signal {sig}")
            self.should_exit = True

        async def shutdown(self, sockets: Any = None) -> None:
            drain.begin()
            await accept_backlog(self.servers, time.monotonic() + drain.drain_s)
            await super().shutdown(sockets)

    return Server
