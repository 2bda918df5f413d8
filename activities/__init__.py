"""Activities: everything fleetmend does to the outside world, one module per system.

Called from `worker/main.py`, which builds the clients and registers
`build_activities(...)` on its worker, and from `workflows/` for names, models and the
`*_OPTIONS` constants only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from kubernetes.client import ApiClient

from activities.cluster import ClusterActivities
from activities.config import ActivitySettings
from activities.gateway import GatewayActivities
from activities.metrics import MetricsActivities
from activities.notify import NotifyActivities
from activities.ramp import RampActivities
from activities.triage import TriageActivities
from activities.warmup import WarmupActivities

__all__ = [
    "ActivitySettings",
    "ClusterActivities",
    "GatewayActivities",
    "MetricsActivities",
    "NotifyActivities",
    "RampActivities",
    "TriageActivities",
    "WarmupActivities",
    "build_activities",
]


def build_activities(
    k8s: ApiClient,
    runner: Any,
    http: httpx.Client,
    settings: ActivitySettings | None = None,
    *,
    notify_url: str | None = None,
) -> list[Callable[..., Any]]:
    """Every activity the worker registers, bound to its clients."""
    raise NotImplementedError
