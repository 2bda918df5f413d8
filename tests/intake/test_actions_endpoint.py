"""POST /actions: the ledger's action boundary over HTTP, on a fresh migrated PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio

from ledger.store import Ledger
from tests.intake.conftest import TOKEN
from worker.intake import create_app
from worker.settings import load_settings

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def ledger(database_url: str) -> Iterator[Ledger]:
    store = Ledger.connect(database_url, pool_size=4, lease=30.0)
    try:
        yield store
    finally:
        store.close()


@pytest_asyncio.fixture
async def http(ledger: Ledger) -> AsyncIterator[httpx.AsyncClient]:
    # Temporal is not needed for /actions: the address is never dialled in these tests.
    app = create_app(load_settings(intake_token=TOKEN), actions=ledger)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://intake", headers=AUTH
    ) as client:
        yield client


def proposal(op_id: str, **extra: object) -> dict[str, object]:
    return {
        "op_id": op_id,
        "kind": "send-email",
        "target": "customer/42",
        "intent": {"template": "refund"},
        **extra,
    }


async def test_the_first_proposal_says_execute_and_hands_out_a_claim(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/actions", json=proposal("req-1/tool-1"))
    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "execute"
    assert body["op_id"] == "req-1/tool-1"
    assert body["claim_token"]


async def test_after_the_result_is_recorded_a_retry_says_already_executed_with_it(
    http: httpx.AsyncClient,
) -> None:
    await http.post("/actions", json=proposal("req-2/tool-1"))
    recorded = await http.post(
        "/actions/req-2/tool-1/result", json={"result": {"message_id": "m-77"}}
    )
    assert recorded.status_code == 200, recorded.text
    assert recorded.json()["state"] == "confirmed"

    retry = await http.post("/actions", json=proposal("req-2/tool-1"))
    assert retry.status_code == 200
    assert retry.json()["decision"] == "already_executed"
    assert retry.json()["result"] == {"message_id": "m-77"}


async def test_a_proposal_while_another_caller_holds_the_claim_is_409_with_retry_after(
    http: httpx.AsyncClient,
) -> None:
    await http.post("/actions", json=proposal("req-3/tool-1"))
    second = await http.post("/actions", json=proposal("req-3/tool-1"))
    assert second.status_code == 409
    assert second.json()["decision"] == "in_progress"
    assert int(second.headers["Retry-After"]) >= 1


async def test_racing_callers_get_exactly_one_execute(http: httpx.AsyncClient) -> None:
    answers = await asyncio.gather(
        *(http.post("/actions", json=proposal("req-4/tool-1")) for _ in range(8))
    )
    decisions = [a.json()["decision"] for a in answers]
    assert decisions.count("execute") == 1
    assert set(decisions) == {"execute", "in_progress"}


async def test_abandoning_releases_the_claim_for_a_later_execute(http: httpx.AsyncClient) -> None:
    first = (await http.post("/actions", json=proposal("req-5/tool-1"))).json()
    released = await http.post(
        "/actions/req-5/tool-1/abandon",
        json={"claim_token": first["claim_token"], "error": "upstream 502"},
    )
    assert released.status_code == 200, released.text
    again = await http.post("/actions", json=proposal("req-5/tool-1"))
    assert again.json()["decision"] == "execute"


async def test_a_permanent_abandon_makes_every_retry_say_failed(http: httpx.AsyncClient) -> None:
    first = (await http.post("/actions", json=proposal("req-6/tool-1"))).json()
    await http.post(
        "/actions/req-6/tool-1/abandon",
        json={"claim_token": first["claim_token"], "error": "card declined", "permanent": True},
    )
    retry = await http.post("/actions", json=proposal("req-6/tool-1"))
    assert retry.json()["decision"] == "failed"
    assert "card declined" in retry.json()["error"]


async def test_reusing_an_op_id_for_another_action_is_409_naming_the_field(
    http: httpx.AsyncClient,
) -> None:
    await http.post("/actions", json=proposal("req-7/tool-1"))
    other = await http.post("/actions", json=proposal("req-7/tool-1", target="customer/43"))
    assert other.status_code == 409
    assert other.json()["field"] == "target"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "send-email"}, "op_id"),
        ({"op_id": "x", "kind": "Send Email"}, "kind"),
        ({"op_id": "x", "kind": "send-email", "surprise": 1}, "surprise"),
    ],
)
async def test_a_bad_proposal_is_422_naming_the_field(
    http: httpx.AsyncClient, body: dict[str, object], field: str
) -> None:
    response = await http.post("/actions", json=body)
    assert response.status_code == 422
    assert response.json()["field"] == field


async def test_a_result_for_an_unknown_operation_is_404(http: httpx.AsyncClient) -> None:
    response = await http.post("/actions/never-proposed/result", json={"result": {}})
    assert response.status_code == 404


async def test_actions_need_the_token(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/actions", json=proposal("req-8"), headers={"Authorization": "Bearer nope"}
    )
    assert response.status_code == 401


async def test_without_a_ledger_actions_answer_503_and_the_webhook_still_works() -> None:
    app = create_app(load_settings(intake_token=TOKEN))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://i", headers=AUTH
    ) as client:
        response = await client.post("/actions", json=proposal("req-9"))
        health = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["error"] == "ledger not configured"
    assert health.status_code == 200


async def test_a_value_postgres_cannot_store_is_422_naming_the_field(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/actions", json=proposal("req-10", target="customer/\x00"))
    assert response.status_code == 422
    assert response.json()["field"] == "target"
    # Nothing was half-written: the same op id with a clean value still executes.
    clean = await http.post("/actions", json=proposal("req-10"))
    assert clean.json()["decision"] == "execute"
