"""The time-skipping server, with fleetmend's search attributes registered on it.

The shared fixture starts the server bare; the incident workflow upserts its search
attributes at every step, which the server refuses unless they are registered first.
"""

from __future__ import annotations

import pytest_asyncio
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from workflows.types import SEARCH_ATTRIBUTES


@pytest_asyncio.fixture(scope="session")
async def ts_env(time_skipping_env: WorkflowEnvironment) -> WorkflowEnvironment:
    kinds = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}
    try:
        await time_skipping_env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                search_attributes={n: kinds[k] for n, k in SEARCH_ATTRIBUTES.items()},
                namespace=time_skipping_env.client.namespace,
            )
        )
    except RPCError as err:
        # Another test module registered them first in this session.
        if "already" not in err.message.lower():
            raise
    return time_skipping_env
