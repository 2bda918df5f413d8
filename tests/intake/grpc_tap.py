"""A TCP proxy between the intake and Temporal that can freeze one gRPC call in flight.

Used by `test_intake_sigkill_mid_request.py` to catch the intake inside a request: it
watches the bytes the intake sends for a marker (the workflow id and the start signal's
name appear verbatim in the signal-with-start request's protobuf) and then either holds
that request (Temporal never hears of it) or forwards it and holds the answer (Temporal
acted, the intake never learns it did).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

Freeze = Literal["request", "response"]


class GrpcTap:
    def __init__(self, upstream: str, markers: list[bytes], freeze: Freeze) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.markers = markers
        self.freeze = freeze
        self.caught = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.address = ""

    async def __aenter__(self) -> GrpcTap:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for coro in (
            self._pump(reader, up_writer, watch=True),
            self._pump(up_reader, writer, watch=False),
        ):
            task = asyncio.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _frozen(self, *, upstream: bool) -> bool:
        return self.caught.is_set() and (self.freeze == "request") == upstream

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, watch: bool
    ) -> None:
        seen = b""
        try:
            while data := await reader.read(65536):
                if watch and not self.caught.is_set():
                    seen = (seen + data)[-65536:]
                    if all(marker in seen for marker in self.markers):
                        self.caught.set()
                if self._frozen(upstream=watch):
                    continue  # swallowed: the call never completes in this direction
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
