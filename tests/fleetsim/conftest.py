"""Helpers for fleet tests: a small scenario and a wall-clock bounded wait."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from fleetsim.scenario import Scenario, parse_scenario

SMALL: dict[str, Any] = {
    "name": "small",
    "rates": {"warm_rate": 10, "cold_frac": 0.25, "warmup_s": 60, "load_s": 20,
              "tokens": 3, "token_interval_s": 0.02},
    "probe_period_s": 2,
    "nodes": [{"name": "gpu", "count": 4, "gpus": 2, "zone": "zone-a", "rack": "rack-1"}],
    "namespaces": [{"name": "serving", "pools": [{
        "name": "llm", "model": "org/model-7b", "revision": "r1",
        "replicas": 2, "gpus_per_replica": 2, "warm_spares": 1,
    }]}],
    "traffic": [],
    "faults": [],
}  # fmt: skip


def small(**changes: Any) -> Scenario:
    """SMALL with top-level keys replaced and `pool` keys merged into the one pool."""
    data = copy.deepcopy(SMALL)
    pool_changes = changes.pop("pool", {})
    data["namespaces"][0]["pools"][0].update(pool_changes)
    data.update(changes)
    return parse_scenario(data)


async def until(cond: Callable[[], Any], *, timeout: float = 10.0, what: str = "") -> Any:
    """Poll `cond` (wall clock) until it returns something truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.02)
