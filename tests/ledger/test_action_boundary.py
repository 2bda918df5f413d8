"""Actions proposed by inference: re-running inference is safe, re-running the action is not."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine

from ledger.errors import InvalidOperationSpec
from ledger.store import Ledger

REFUND: dict[str, Any] = {
    "op_id": "req-7f3a/tool-call-1",
    "kind": "refund-order",
    "target": "orders/4411",
    "intent": {"amount_cents": 1299, "currency": "EUR"},
}


@pytest.fixture
def ledger(db_engine: Engine) -> Ledger:
    return Ledger(db_engine, lease=30)


def test_the_first_proposal_says_execute_and_a_repeat_says_already_executed_with_the_result(
    ledger: Ledger,
) -> None:
    first = ledger.propose_action(REFUND)
    assert (first.decision, first.attempt) == ("execute", 1)
    assert first.claim_token

    ledger.complete_action(REFUND["op_id"], {"refund_id": "rf_91", "status": "succeeded"})
    again = ledger.propose_action(REFUND)

    assert again.decision == "already_executed"
    assert again.result == {"refund_id": "rf_91", "status": "succeeded"}
    record = ledger.get(REFUND["op_id"])
    assert record is not None and (record.state, record.origin) == ("confirmed", "action")


def test_a_proposal_while_another_caller_holds_the_claim_says_in_progress(ledger: Ledger) -> None:
    ledger.propose_action(REFUND)

    second = ledger.propose_action(REFUND)

    assert second.decision == "in_progress"
    assert second.retry_after is not None and 25 < second.retry_after <= 30


def test_an_abandoned_action_can_be_executed_by_the_next_proposal(ledger: Ledger) -> None:
    first = ledger.propose_action(REFUND)
    assert first.claim_token is not None
    ledger.abandon_action(REFUND["op_id"], claim_token=first.claim_token, error="payment API 503")

    second = ledger.propose_action(REFUND)

    assert (second.decision, second.attempt) == ("execute", 2)


def test_a_permanently_abandoned_action_is_reported_failed_and_never_executed(
    ledger: Ledger,
) -> None:
    first = ledger.propose_action(REFUND)
    assert first.claim_token is not None
    ledger.abandon_action(
        REFUND["op_id"], claim_token=first.claim_token, error="order closed", permanent=True
    )

    again = ledger.propose_action(REFUND)

    assert (again.decision, again.error) == ("failed", "order closed")


def test_sixteen_concurrent_proposals_get_one_execute_between_them(ledger: Ledger) -> None:
    decisions: list[str] = []
    barrier = threading.Barrier(16)

    def propose() -> None:
        barrier.wait()
        decisions.append(ledger.propose_action(REFUND).decision)

    threads = [threading.Thread(target=propose) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(decisions) == ["execute"] + ["in_progress"] * 15


def test_run_action_executes_once_across_retries_of_the_inference_request(ledger: Ledger) -> None:
    executed: list[str] = []

    def execute(op_id: str) -> dict[str, Any]:
        executed.append(op_id)
        return {"refund_id": "rf_92"}

    results = [ledger.run_action(REFUND, execute) for _ in range(3)]

    assert executed == [REFUND["op_id"]]
    assert [r.applied_now for r in results] == [True, False, False]
    assert {r.record.result["refund_id"] for r in results if r.record.result} == {"rf_92"}


def test_an_action_without_an_op_id_is_refused_naming_the_field(ledger: Ledger) -> None:
    with pytest.raises(InvalidOperationSpec) as raised:
        ledger.propose_action({k: v for k, v in REFUND.items() if k != "op_id"})

    assert raised.value.field == "op_id"
