"""Many HTTP listeners, one process: each simulated pod and node on its own loopback IP.

Used by the kubelet (replicas on pod IPs), by `fleetsim.dcgm` (exporters on node IPs)
and by the fleet. Linux routes all of 127.0.0.0/8 to `lo`, so any 127.x.y.z can be
bound without setup. Rather than one uvicorn server (and its 10 Hz tick) per address,
one uvicorn protocol configuration serves a dispatcher on every listening socket; the
dispatcher picks the app by the local address the connection arrived on.

`close(address, abort=True)` is a process dying: the listener goes and every open
connection to that address is reset, so callers see it at once.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.server import ServerState

ASGIApp = Any
Address = tuple[str, int]


class AddressHost:
    def __init__(self) -> None:
        self._apps: dict[Address, ASGIApp] = {}
        self._servers: dict[Address, asyncio.base_events.Server] = {}
        self._config = uvicorn.Config(
            self._dispatch,
            lifespan="off",
            interface="asgi3",
            proxy_headers=False,
            http="h11",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
        )
        self._config.load()
        self._state = ServerState()
        self._closing = False

    async def _dispatch(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        server = scope.get("server")
        app = self._apps.get((server[0], server[1])) if server else None
        if app is None:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"no such listener"})
            return
        try:
            await app(scope, receive, send)
        except asyncio.CancelledError:
            # Shutting down: the request dies with the fleet, which is not an app error
            # for uvicorn to log. Any other cancellation propagates.
            if not self._closing:
                raise

    async def serve(self, ip: str, port: int, app: ASGIApp) -> Address:
        """Listen on ip:port (port 0: ephemeral) and answer with `app`. Returns the address."""
        if not ipaddress.ip_address(ip).is_loopback:
            raise ValueError(f"{ip} is not a loopback address")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, port))
            sock.listen(512)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        address: Address = sock.getsockname()[:2]
        self._apps[address] = app
        config, state = self._config, self._state

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state={}
            )

        loop = asyncio.get_running_loop()
        self._servers[address] = await loop.create_server(protocol, sock=sock, backlog=512)
        return address

    def _connections(self, address: Address) -> Iterator[Any]:
        for conn in list(self._state.connections):
            local = getattr(conn, "server", None)
            if local is not None and (local[0], local[1]) == address:
                yield conn

    async def close(self, address: Address, *, abort: bool = True) -> None:
        """Stop listening on `address`; with abort, reset its open connections too."""
        server = self._servers.pop(address, None)
        self._apps.pop(address, None)
        if server is None:
            return
        server.close()
        for conn in self._connections(address):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                if abort:
                    transport.abort()
                else:
                    conn.shutdown()

    async def close_all(self) -> None:
        self._closing = True
        for address in list(self._servers):
            await self.close(address)
        for task in list(self._state.tasks):
            task.cancel()

    @property
    def addresses(self) -> list[Address]:
        return list(self._servers)


def ip_block(seed: int) -> str:
    """A 127.N prefix for one fleet; different N lets concurrent fleets coexist."""
    return f"127.{10 + seed % 240}"
