"""A simulated vLLM replica's HTTP surface: `/health`, `/v1/models`,
`/v1/chat/completions` (streaming SSE or not) and `/metrics`.

Created by the kubelet for each serving pod once its weights have "loaded", served on
the pod's loopback IP by `fleetsim.netserve`, and scraped by fleetmend's activities and
by Prometheus exactly as a real vLLM pod would be. Behaviour under faults comes from
the engine's `Health`: a fake-alive replica accepts connections and never answers; a
GPU-hung one answers `/health` and never finishes inference; a broken group answers
`/health` and fails inference.

Headers are held back until the first token exists, so a request that fails while still
queued gets a status code (retryable by the router) rather than a broken stream. The
router's `x-fleetsim-arrived-at` header, when present, is the arrival the engine queues
the request from.
"""

from __future__ import annotations

import contextlib
import json
import math
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fleetsim.actions import ActionSink
from fleetsim.engine import Engine, EngineError, Health, Token
from fleetsim.vllm_metrics import VllmCollector, exposition

HEADER_QUEUE_WAIT = "x-fleetsim-queue-wait"
HEADER_POD = "x-fleetsim-pod"
# The request's arrival on the fleet clock, set by the router (fleetsim only: a real
# vLLM stamps arrival itself, and no simulator lag lies between caller and engine).
HEADER_ARRIVED_AT = "x-fleetsim-arrived-at"


@dataclass(frozen=True)
class ReplicaIdentity:
    namespace: str
    pod: str
    pool: str
    model: str
    revision: str
    engine_version: str
    engine_core: str
    node: str


def _error(status: int, message: str, kind: str = "InternalServerError") -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": kind, "code": status}, status_code=status
    )


class Replica:
    def __init__(
        self, identity: ReplicaIdentity, engine: Engine, *, actions: ActionSink | None = None
    ) -> None:
        self.identity = identity
        self.engine = engine
        self.actions = actions
        self.collector = VllmCollector(
            engine,
            model_name=identity.model,
            version=identity.engine_version,
            core=identity.engine_core,
        )
        self.app = Starlette(
            routes=[
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )

    async def _unresponsive(self) -> bool:
        """Fake-alive engines never answer (the caller's timeout decides); True once the
        process died under the request, whose connection is being reset anyway."""
        if self.engine.health in (Health.FAKE_ALIVE, Health.DEAD):
            with contextlib.suppress(EngineError):
                await self.engine.hang()
            return True
        return False

    async def health(self, request: Request) -> Response:
        if await self._unresponsive():
            return _error(502, "engine process exited")
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        if await self._unresponsive():
            return _error(502, "engine process exited")
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": self.identity.model, "object": "model", "owned_by": "vllm"}],
            }
        )

    async def metrics(self, request: Request) -> Response:
        if await self._unresponsive():
            return _error(502, "engine process exited")
        return Response(exposition(self.collector), media_type="text/plain; version=0.0.4")

    async def chat(self, request: Request) -> Response:
        if await self._unresponsive():
            return _error(502, "engine process exited")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON", "BadRequestError")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is required", "BadRequestError")
        if body.get("model") not in (None, self.identity.model):
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        max_tokens = body.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return _error(400, "max_tokens must be a positive integer", "BadRequestError")
        stamp = request.headers.get(HEADER_ARRIVED_AT)
        arrived_at = None if stamp is None else _fleet_seconds(stamp)
        if stamp is not None and arrived_at is None:
            return _error(
                400,
                f"{HEADER_ARRIVED_AT} must be a finite number of fleet seconds, got {stamp!r}",
                "BadRequestError",
            )
        action = body.get("action") if isinstance(body.get("action"), dict) else None
        request_id = request.headers.get("x-request-id") or f"chatcmpl-{uuid.uuid4().hex}"
        generation = self.engine.generate(max_tokens, arrived_at=arrived_at)
        tokens = self._with_action(generation, action, max_tokens)
        try:
            first = await anext(tokens)
        except EngineError as err:
            return _error(err.status, str(err))
        headers = {
            HEADER_QUEUE_WAIT: f"{first.queue_wait_s:.6f}",
            HEADER_POD: self.identity.pod,
            "x-request-id": request_id,
        }
        if body.get("stream"):
            return StreamingResponse(
                self._sse(request_id, first, tokens, action),
                media_type="text/event-stream",
                headers=headers,
            )
        text = [first.text]
        try:
            async for tok in tokens:
                text.append(tok.text)
        except EngineError as err:
            return _error(err.status, str(err))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        if action is not None:
            message["tool_calls"] = [_tool_call(action)]
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "model": self.identity.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
                "usage": {"completion_tokens": len(text)},
            },
            headers=headers,
        )

    async def _with_action(
        self,
        tokens: AsyncIterator[Token],
        action: dict[str, Any] | None,
        max_tokens: int | None,
    ) -> AsyncIterator[Token]:
        # The serving side executes the tool call half-way through generation: after
        # the first byte, before the end, where a crash makes a replay dangerous.
        n = self.engine.config.tokens if max_tokens is None else max_tokens
        async for tok in tokens:
            if action is not None and self.actions is not None and tok.index == n // 2:
                self.actions.execute(str(action.get("operation_id", "")))
            yield tok

    async def _sse(
        self,
        request_id: str,
        first: Token,
        rest: AsyncIterator[Token],
        action: dict[str, Any] | None,
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": request_id,
                "object": "chat.completion.chunk",
                "model": self.identity.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        yield chunk({"role": "assistant", "content": first.text})
        try:
            async for tok in rest:
                yield chunk({"content": tok.text})
        except EngineError:
            # A dying process has its connections reset by the address host; a failing
            # one ends the body here without `[DONE]`, which callers read as a broken
            # stream. Either way nothing more is sent.
            return
        final: dict[str, Any] = {}
        if action is not None:
            final["tool_calls"] = [_tool_call(action)]
        yield chunk(final, "length")
        yield b"data: [DONE]\n\n"


def _fleet_seconds(value: str) -> float | None:
    """`value` as seconds on the fleet clock; None unless it is a finite number."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


def _tool_call(action: dict[str, Any]) -> dict[str, Any]:
    # The proposed action carries its operation id through, so whoever executes it
    # can tell a replayed inference from a new request.
    return {
        "id": str(action.get("operation_id", "")),
        "type": "function",
        "function": {"name": str(action.get("kind", "action")), "arguments": "{}"},
    }
