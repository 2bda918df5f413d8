"""A TCP proxy between the intake and Temporal that can freeze one gRPC call in flight.

Used by `test_intake_sigkill_mid_request.py` to catch the intake inside a request: it
reads the gRPC messages the intake sends (HTTP/2 DATA frames, gzip-compressed as the
Temporal client sends them by default) for markers (the workflow id and the start
signal's name appear verbatim in the signal-with-start request's protobuf) and then
either holds that request (Temporal never hears of it) or forwards it and holds the
answer (Temporal acted, the intake never learns it did).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Iterator
from typing import Literal

Freeze = Literal["request", "response"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, PADDED = 0, 0x8


class GrpcMessages:
    """Incremental reader of the gRPC messages in a client's HTTP/2 byte stream."""

    def __init__(self) -> None:
        self._buffer = b""
        self._preface_seen = False
        self._streams: dict[int, bytes] = {}

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        if not self._preface_seen:
            if len(self._buffer) < len(PREFACE):
                return
            self._buffer = self._buffer.removeprefix(PREFACE)
            self._preface_seen = True
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                return
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            payload, self._buffer = self._buffer[9 : 9 + length], self._buffer[9 + length :]
            if kind != DATA:
                continue
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            yield from self._messages(stream, payload)

    def _messages(self, stream: int, payload: bytes) -> Iterator[bytes]:
        pending = self._streams.get(stream, b"") + payload
        while len(pending) >= 5:
            size = int.from_bytes(pending[1:5], "big")
            if len(pending) < 5 + size:
                break
            message = pending[5 : 5 + size]
            yield gzip.decompress(message) if pending[0] else message
            pending = pending[5 + size :]
        self._streams[stream] = pending


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
        messages = GrpcMessages()
        try:
            while data := await reader.read(65536):
                if watch and not self.caught.is_set():
                    for message in messages.feed(data):
                        if all(marker in message for marker in self.markers):
                            self.caught.set()
                if self._frozen(upstream=watch):
                    continue  # swallowed: the call never completes in this direction
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
