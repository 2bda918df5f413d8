"""Hostile names reaching an activity: a clear non-retryable error naming the object, the
ledger keeps the operation id verbatim, and fleetsim's API server keeps serving.

The intake refuses these values in the labels that name objects (tests/intake); this is
the second line, for a name that arrives another way (an operator's command, a bug).
"""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.effects import EffectRunner
from activities.gateway import AnnotationGateway, GatewayActivities, RetryContractInput
from tests.intake.hostile import HOSTILE

from .conftest import NS, Kube, add_service

KINDS = sorted(HOSTILE)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_pool_name_is_a_permanent_error_naming_the_service_and_verb(
    kind: str, kube: Kube, runner: EffectRunner
) -> None:
    add_service(kube.cluster, "llm", {"app": "llm"})
    acts = GatewayActivities(AnnotationGateway(kube.api), runner)
    hostile = HOSTILE[kind]
    op_id = f"i/inflight/{hostile}"

    with pytest.raises(ApplicationError) as failed:
        ActivityEnvironment().run(
            acts.apply_retry_contract,
            RetryContractInput(
                op_id=op_id, incident_id="i", namespace=NS, pool=hostile, lost_pods=[hostile]
            ),
        )

    message = failed.value.message
    assert failed.value.non_retryable, message
    # Named as the object it would have been (ledger target or Kubernetes call), in one line.
    assert f"{NS}/service/" in message or f"get service {NS}/" in message, message
    assert not [c for c in message if c in "\n\r\x00\x1b\u202e"]
    # The API server still answers, and the real Service was not touched.
    svc = kube.store.get("services", "llm", namespace=NS)
    assert "gateway.fleetmend.io/retry-policy" not in (svc["metadata"].get("annotations") or {})
