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
from temporalio.workflow import ActivityConfig

from activities import cluster, gateway, metrics, notify, ramp, triage, warmup
from activities.cluster import ClusterActivities
from activities.common import EffectRunnerLike
from activities.config import ActivitySettings
from activities.gateway import AnnotationGateway, Gateway, GatewayActivities
from activities.metrics import MetricsActivities
from activities.notify import NotifyActivities
from activities.ramp import RampActivities
from activities.triage import TriageActivities
from activities.warmup import WarmupActivities

# Activity name -> its timeouts and retry policy (`workflow.execute_activity(..., **opts)`).
ACTIVITY_OPTIONS: dict[str, ActivityConfig] = {
    "assess_loss": cluster.ASSESS_OPTIONS,
    "read_routing_state": cluster.READ_ROUTING_OPTIONS,
    "deroute_replica": cluster.DEROUTE_OPTIONS,
    "force_delete_pod": cluster.FORCE_DELETE_OPTIONS,
    "promote_warm": cluster.PROMOTE_WARM_OPTIONS,
    "demote_warm": cluster.DEMOTE_WARM_OPTIONS,
    "scale_pool": cluster.SCALE_OPTIONS,
    "find_warm_workload": cluster.WARM_WORKLOAD_OPTIONS,
    "estimate_lead_time": cluster.LEAD_TIME_OPTIONS,
    "diagnose_pending": cluster.PENDING_OPTIONS,
    "find_replacements": cluster.REPLACEMENTS_OPTIONS,
    "relocate_misplaced_pod": cluster.RELOCATE_OPTIONS,
    "verify_capacity": cluster.VERIFY_CAPACITY_OPTIONS,
    "apply_shed_tier": gateway.SHED_TIER_OPTIONS,
    "restore_shed_tier": gateway.RESTORE_SHED_TIER_OPTIONS,
    "apply_retry_contract": gateway.RETRY_CONTRACT_OPTIONS,
    "set_router_weights": gateway.ROUTER_WEIGHTS_OPTIONS,
    "read_pressure": metrics.READ_PRESSURE_OPTIONS,
    "read_replica_rates": metrics.READ_RATES_OPTIONS,
    "verify_serving": metrics.VERIFY_SERVING_OPTIONS,
    "ramp_traffic": ramp.RAMP_OPTIONS,
    "warm_up_replica": warmup.WARMUP_OPTIONS,
    "triage_node": triage.TRIAGE_OPTIONS,
    "notify_incident_channel": notify.NOTIFY_OPTIONS,
}

__all__ = [
    "ACTIVITY_OPTIONS",
    "ActivitySettings",
    "AnnotationGateway",
    "ClusterActivities",
    "Gateway",
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
    runner: EffectRunnerLike,
    http: httpx.Client,
    settings: ActivitySettings | None = None,
    *,
    gateway: Gateway | None = None,
) -> list[Callable[..., Any]]:
    """Every activity the worker registers, bound to its clients.

    `runner` is the ledger's `activities.effects.EffectRunner`; `gateway` defaults to the
    annotation gateway on the same Kubernetes API.
    """
    s = settings or ActivitySettings()
    cluster = ClusterActivities(k8s, runner, s)
    gw = gateway or AnnotationGateway(k8s, s, http=http, router_metrics_url=s.router_metrics_url)
    gateway_activities = GatewayActivities(gw, runner)
    metrics = MetricsActivities(http, timeout_s=s.http_timeout_s)
    ramp = RampActivities(gw, http, runner, timeout_s=s.http_timeout_s)
    warmup = WarmupActivities(http)
    triage = TriageActivities(cluster, http)
    notify = NotifyActivities(http, s.notify_webhook_url, runner)
    return [
        cluster.assess_loss,
        cluster.read_routing_state,
        cluster.deroute_replica,
        cluster.force_delete_pod,
        cluster.promote_warm,
        cluster.demote_warm,
        cluster.scale_pool,
        cluster.find_warm_workload,
        cluster.estimate_lead_time,
        cluster.diagnose_pending,
        cluster.find_replacements,
        cluster.relocate_misplaced_pod,
        cluster.verify_capacity,
        gateway_activities.apply_shed_tier,
        gateway_activities.restore_shed_tier,
        gateway_activities.apply_retry_contract,
        gateway_activities.set_router_weights,
        metrics.read_pressure,
        metrics.read_replica_rates,
        metrics.verify_serving,
        ramp.ramp_traffic,
        warmup.warm_up_replica,
        triage.triage_node,
        notify.notify_incident_channel,
    ]
