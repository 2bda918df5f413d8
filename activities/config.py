"""Conventions the activities read the fleet by: label keys, annotation keys, ports, SLOs.

Built by the worker from `worker/settings.py` and passed to `build_activities`; tests
build it directly. Every key a fleet might name differently is here, not in the code.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from activities.effects import STAMP_ANNOTATION


class ActivitySettings(BaseModel):
    # Labels the workload and the router use.
    pool_label: str = "app"
    router_label: str = "serving"
    router_label_value: str = "true"
    warm_label: str = "pool"
    warm_label_value: str = "warm"
    serving_pool_value: str = "serving"
    model_label: str = "model"
    revision_label: str = "model-revision"
    lws_group_label: str = "leaderworkerset.sigs.k8s.io/group-index"
    lws_name_label: str = "leaderworkerset.sigs.k8s.io/name"
    lws_worker_index_label: str = "leaderworkerset.sigs.k8s.io/worker-index"

    # Failure-domain labels on nodes, most specific last.
    zone_label: str = "topology.kubernetes.io/zone"
    rack_label: str = "topology.fleetmend.io/rack"
    fabric_label: str = "fleetmend.io/fabric-domain"
    node_pool_labels: list[str] = Field(
        default_factory=lambda: [
            "fleetmend.io/node-pool",
            "cloud.google.com/gke-nodepool",
            "eks.amazonaws.com/nodegroup",
            "karpenter.sh/nodepool",
        ]
    )
    qualified_label: str = "fleetmend.io/qualified"
    gpu_resource: str = "nvidia.com/gpu"

    # Where fleetmend stamps the operation id of the last change it made to an object.
    op_annotation: str = STAMP_ANNOTATION

    # Gateway: annotation-based tier store and router weights.
    shed_tier_annotation: str = "gateway.fleetmend.io/shed-tier"
    shed_spec_annotation: str = "gateway.fleetmend.io/shed-tier-spec"
    fallback_service_annotation: str = "gateway.fleetmend.io/fallback-service"
    retry_policy_annotation: str = "gateway.fleetmend.io/retry-policy"
    router_weight_annotation: str = "router.fleetmend.io/weight"
    default_router_weight: float = 100.0
    # The router's counters of requests retried before the first byte and streams ended
    # with a terminal error after it, labelled by the lost pod.
    router_retried_metric: str = "router_requests_retried_total"
    router_terminated_metric: str = "router_streams_terminated_total"

    # Replicas and nodes over HTTP.
    metrics_port_name: str = "http"
    metrics_port: int = 8000
    metrics_scheme: str = "http"
    dcgm_port_name: str = "dcgm"
    # Labels of the dcgm-exporter DaemonSet's pods (one per GPU node).
    dcgm_selector: str = "app=nvidia-dcgm-exporter"
    dcgm_port: int = 9400
    dcgm_address_annotation: str = "fleetmend.io/dcgm-url"

    # Where the incident channel (JSON webhook, Slack-compatible) and the router's counters are.
    notify_webhook_url: str | None = None
    router_metrics_url: str | None = None

    # Numbers the runbook leaves to the operator.
    default_lead_time_s: float = 900.0
    common_cause_window_s: float = 60.0
    ttft_slo_s: float = 2.0
    kubernetes_timeout_s: float = 10.0
    http_timeout_s: float = 10.0
    poll_interval_s: float = 1.0
