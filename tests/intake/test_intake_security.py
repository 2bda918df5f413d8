"""Security: only /healthz answers without the credentials, and the readiness probe has them.

The routes are enumerated from the app itself, so a route added later is tested too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import uvicorn
from starlette.routing import Route
from temporalio.testing import WorkflowEnvironment

from tests.intake.conftest import AUTH, TOKEN, free_port
from worker.intake import OPEN_PATHS, create_app
from worker.intake_probe import probe
from worker.settings import Settings, load_settings

BAD_CREDENTIALS = [
    {},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"bearer{TOKEN}"},
    {"Authorization": "Basic YWxlcnRtYW5hZ2VyOndyb25n"},
    {"Authorization": f"Token {TOKEN}"},
]


def every_route(settings: Settings) -> Iterator[tuple[str, str]]:
    """(method, concrete path) for every route the intake app serves."""
    app = create_app(settings)
    for route in app.routes:
        assert isinstance(route, Route), f"an unexpected kind of route: {route!r}"
        path = re.sub(r"\{[^}]+\}", "op-1", route.path)
        for method in sorted(route.methods or {"GET"}):
            if method != "HEAD":
                yield method, path


@pytest.fixture
def settings(closed_port: int) -> Settings:
    # Temporal is unreachable: a request that got past authentication could not succeed
    # quietly, and none may reach it anyway.
    return load_settings(
        intake_token=TOKEN,
        intake_basic_user="alertmanager",
        intake_basic_password="right-password",
        temporal_address=f"127.0.0.1:{closed_port}",
    )


async def test_without_the_credentials_every_route_but_healthz_answers_401(
    settings: Settings,
) -> None:
    routes = list(every_route(settings))
    assert ("POST", "/alertmanager") in routes and ("GET", "/metrics") in routes
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://intake") as http:
        for method, path in [*routes, ("GET", "/no-such-route"), ("POST", "/admin")]:
            for headers in BAD_CREDENTIALS:
                response = await http.request(method, path, headers=headers, json={})
                expected = 200 if path in OPEN_PATHS else 401
                assert response.status_code == expected, (method, path, headers)
                if expected == 401:
                    assert response.json() == {"error": "unauthorised"}
                    assert "Bearer" in response.headers["WWW-Authenticate"]
        # With the credentials the same routes are reached (whatever they then answer).
        for method, path in routes:
            response = await http.request(method, path, headers=AUTH, json={})
            assert response.status_code != 401, (method, path)
    assert {"/healthz"} == OPEN_PATHS


@pytest.fixture
async def served_intake(local_env: WorkflowEnvironment) -> AsyncIterator[Settings]:
    settings = load_settings(intake_token=TOKEN, intake_port=free_port())
    app = create_app(settings, client=local_env.client)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.intake_port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield settings
    finally:
        server.should_exit = True
        await task


async def test_the_readiness_probe_sends_the_token_and_fails_without_the_right_one(
    served_intake: Settings,
) -> None:
    ready, why = await asyncio.to_thread(probe, served_intake)
    wrong = served_intake.model_copy(update={"intake_token": type(served_intake.intake_token)("x")})
    refused, why_refused = await asyncio.to_thread(probe, wrong)

    assert ready and why.endswith("/readyz: HTTP 200")
    assert not refused and why_refused.endswith("HTTP 401")
    assert TOKEN not in why + why_refused
