"""The names fleetsim and fleetmend must agree on: labels, annotations, alerts, headers.

Read by every fleetsim module that builds objects or reads what the gateway set (the
scenario builder, the router, the kubelet, the fault injector), and by the drill to
derive the alerts Alertmanager would send. Production code does not import fleetsim;
the activities restate these strings, and the drill's tests hold both sides to them.
"""

from __future__ import annotations

from enum import IntEnum

# --- Labels on pods (and the selectors that read them) ------------------------------

LABEL_APP = "app"
"""Workload identity: the pool name. Deployments, LWS and the Service all select on it."""

LABEL_POOL = "pool"
"""`serving` for the pool's own replicas, `warm` for warm spares (runbook: `-l pool=warm`)."""
POOL_SERVING = "serving"
POOL_WARM = "warm"

LABEL_SERVING = "serving"
"""Router-only label: the Service selects it, no workload controller does. Removing it
deroutes a pod without making its controller replace it."""
SERVING_TRUE = "true"

LABEL_MODEL = "model"
LABEL_MODEL_REVISION = "model-revision"

# The LeaderWorkerSet controller's real label keys (sigs.k8s.io/lws).
LABEL_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"

# --- Labels on nodes -----------------------------------------------------------------

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_RACK = "topology.fleetmend.io/rack"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
RESOURCE_GPU = "nvidia.com/gpu"

# --- Annotations the gateway (fleetmend's activities) sets ----------------------------

ANNOTATION_ROUTER_WEIGHT = "router.fleetmend.io/weight"
"""On a pod: relative router weight, a non-negative number (absent = 100). The router
splits a Service's traffic over its ready, `serving=true` endpoints in proportion."""
DEFAULT_ROUTER_WEIGHT = 100.0

ANNOTATION_SHED_TIER = "gateway.fleetmend.io/shed-tier"
"""On the Service: the degradation ladder step the gateway applies (absent = 0)."""


class ShedTier(IntEnum):
    """The gateway's degradation ladder (seed 002, section 9.1), mildest first."""

    NONE = 0
    PARAMETER_DEGRADE = 1  # halve max_tokens, no streaming
    MODEL_FALLBACK = 2  # send to the smaller fallback model
    QUEUE_429 = 3  # refuse low-priority work with 429 + Retry-After
    FEATURE_OFF = 4  # the AI feature is off; nothing reaches the replicas


ANNOTATION_FALLBACK_SERVICE = "gateway.fleetmend.io/fallback-service"
"""On the Service: the Service (same namespace) shed tier 2 sends requests to; without
it tier 2 degrades parameters only."""

ANNOTATION_OPERATION_ID = "fleetmend.io/operation-id"
"""Stamped by fleetmend on objects it changes, so a retry can see what it already did."""

# --- Annotations fleetsim itself sets -------------------------------------------------

ANNOTATION_ENGINE_VERSION = "fleetsim.io/engine-version"
ANNOTATION_ENGINE_CORE = "fleetsim.io/engine-core"
ANNOTATION_FAULT = "fleetsim.io/fault"
"""On a pod or node: the fault fleetsim injected (for humans reading `kubectl describe`)."""

# --- The serving port and the replica's HTTP surface ----------------------------------

CONTAINER_PORT_NAME = "http"
DCGM_PORT_NAME = "dcgm"
HEADER_REQUEST_ID = "x-request-id"
HEADER_SHED_TIER = "x-fleetmend-shed-tier"

# --- The router's /metrics (fleetsim's control app) ----------------------------------
# Counters labelled `namespace` and `pod` (the replica that failed), which the gateway's
# in-flight count reads; the exposition adds `_total`.

METRIC_ROUTER_RETRIED = "router_requests_retried"
"""Requests sent on to another replica after this one failed before their first byte."""
METRIC_ROUTER_TERMINATED = "router_streams_terminated"
"""Streams this replica broke after their first byte: a terminal error to the caller."""

# --- Alerts ---------------------------------------------------------------------------
# What Alertmanager would send for each fault. Labels always include `alertname`,
# `severity`, `namespace`, `pool`, `fault` (a `workflows.types.FaultKind` value) and,
# where known, `pod`, `node`, `zone`, `rack`, `group` (LWS group), `xid`.

ALERT_POD_NOT_READY = "FleetmendPodNotReady"
ALERT_NODE_NOT_READY = "FleetmendNodeNotReady"
ALERT_POD_OOM_KILLED = "FleetmendPodOOMKilled"
ALERT_POD_EVICTED = "FleetmendPodEvicted"
ALERT_RANK_LOST = "FleetmendRankLost"
ALERT_GPU_XID = "FleetmendGPUXidError"
ALERT_NO_TRAFFIC = "FleetmendReplicaNoTraffic"
ALERT_POD_CRASHLOOP = "FleetmendPodCrashLooping"
