"""A bad operation spec is refused with an error naming the field, and nothing is written."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine, text

from activities.effects import OperationSpec
from ledger.errors import InvalidOperationSpec
from ledger.spec import parse_k8s_ref
from ledger.store import Ledger

GOOD: dict[str, Any] = {
    "op_id": "replica-loss/serving/pool-a/deroute/serving/pod/llm-0",
    "incident_id": "replica-loss/serving/pool-a",
    "kind": "label-pod",
    "target": "serving/pod/llm-0",
    "intent": {"labels": {"serving": "false"}},
}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != key}


BAD = [
    pytest.param(_without("op_id"), "op_id", id="missing op id"),
    pytest.param({**GOOD, "op_id": "  "}, "op_id", id="blank op id"),
    pytest.param({**GOOD, "target": "llm-0"}, "target", id="target without kind"),
    pytest.param({**GOOD, "target": "pod/llm-0"}, "target", id="namespaced kind without ns"),
    pytest.param({**GOOD, "target": "serving/node/gpu-3"}, "target", id="node with namespace"),
    pytest.param({**GOOD, "target": "Serving/pod/llm-0"}, "target", id="uppercase namespace"),
    pytest.param({**GOOD, "target": "serving/pod/llm_0"}, "target", id="underscore in name"),
    pytest.param({**GOOD, "target": "a/b/c/d"}, "target", id="four parts"),
    pytest.param({**GOOD, "intent": {"labels": {"serving"}}}, "intent", id="set in intent"),
    pytest.param({**GOOD, "intent": {"ratio": math.nan}}, "intent", id="NaN in intent"),
    pytest.param({**GOOD, "intent": {"at": object()}}, "intent", id="object in intent"),
    pytest.param({**GOOD, "intent": {"by": {1: "x"}}}, "intent", id="non-string key"),
    pytest.param({**GOOD, "kind": "Label Pod"}, "kind", id="kind with space"),
    pytest.param({**GOOD, "compensates": "never-proposed"}, "compensates", id="unknown undo"),
]


def _rows(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        ops = conn.execute(text("SELECT count(*) FROM operations")).scalar_one()
        incs = conn.execute(text("SELECT count(*) FROM incidents")).scalar_one()
    return ops, incs


@pytest.mark.parametrize(("raw", "field"), BAD)
def test_a_bad_spec_is_refused_naming_the_field_and_nothing_is_written(
    db_engine: Engine, raw: dict[str, Any], field: str
) -> None:
    ledger = Ledger(db_engine)
    applied: list[str] = []

    def apply(op_id: str) -> dict[str, Any]:
        applied.append(op_id)
        return {}

    with pytest.raises(InvalidOperationSpec) as raised:
        ledger.run_once(raw, apply)

    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert applied == []
    assert _rows(db_engine) == (0, 0)


def test_building_a_bad_spec_fails_at_construction_naming_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        OperationSpec(**{**GOOD, "target": "pod/llm-0"})

    assert raised.value.errors()[0]["loc"] == ("target",)
    assert "namespaced" in str(raised.value)


def test_a_spec_mutated_past_validation_is_still_refused_by_the_ledger(db_engine: Engine) -> None:
    sneaky = OperationSpec(**GOOD).model_copy(update={"target": "not a reference"})

    with pytest.raises(InvalidOperationSpec) as raised:
        Ledger(db_engine).propose(sneaky)

    assert raised.value.field == "target"
    assert _rows(db_engine) == (0, 0)


@pytest.mark.parametrize(
    ("target", "parts"),
    [
        ("serving/pod/llm-0", ("serving", "pod", "llm-0")),
        ("node/gpu-3", (None, "node", "gpu-3")),
        ("serving/leaderworkerset/llama-70b", ("serving", "leaderworkerset", "llama-70b")),
        ("serving/deployment.apps/router", ("serving", "deployment.apps", "router")),
        ("node/ip-10-0-0-7.ec2.internal", (None, "node", "ip-10-0-0-7.ec2.internal")),
    ],
)
def test_valid_kubernetes_references_parse_into_namespace_kind_and_name(
    target: str, parts: tuple[str | None, str, str]
) -> None:
    ref = parse_k8s_ref(target)

    assert (ref.namespace, ref.kind, ref.name) == parts
    assert str(ref) == target
