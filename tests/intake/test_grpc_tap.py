"""The test tap reads gRPC messages out of a client's HTTP/2 stream, however it is cut."""

from __future__ import annotations

import gzip

from tests.intake.grpc_tap import PREFACE, GrpcMessages

START = b"workflow replica-loss/llm/p signal replica_lost"


def frame(kind: int, stream: int, payload: bytes, flags: int = 0) -> bytes:
    header = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return header + payload


def grpc(message: bytes, *, compressed: bool) -> bytes:
    body = gzip.compress(message) if compressed else message
    return bytes([int(compressed)]) + len(body).to_bytes(4, "big") + body


def test_messages_come_out_whole_decompressed_and_per_stream_whatever_the_chunking() -> None:
    start = grpc(START, compressed=True)
    describe = grpc(b"describe replica-loss/llm/p", compressed=False)
    settings = frame(4, 0, b"\x00\x03\x00\x00\x00\x64")
    padded = bytes([3]) + start[:10] + b"\x00\x00\x00"
    wire = (
        PREFACE
        + settings
        + frame(0, 1, padded, flags=0x8)
        + frame(0, 3, describe)
        + frame(0, 1, start[10:])
    )
    for size in (1, 7, len(wire)):
        reader = GrpcMessages()
        out = [m for i in range(0, len(wire), size) for m in reader.feed(wire[i : i + size])]
        assert out == [b"describe replica-loss/llm/p", START]
