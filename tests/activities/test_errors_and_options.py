"""Errors: what a retry can change is retryable, the rest names the object and the verb.
Options: every activity has timeouts and a retry policy defined beside it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import (
    ACTIVITY_OPTIONS,
    GatewayActivities,
    TriageActivities,
    build_activities,
)
from activities.cluster import ClusterActivities
from activities.common import API_OUTAGE_S, UNHEARTBEATED_MAX_S, retry_budget_s
from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.errors import (
    MAX_RETRY_AFTER_S,
    PERMANENT,
    TEMPORARY,
    classify_status,
    http_errors,
    k8s_call,
    k8s_error,
    retry_after,
)
from activities.k8s import build_api_client
from fleetsim.kube.chaos import ApiFault

from .conftest import NS, Kube, cordon

KUBERNETES_FACING = (ClusterActivities, GatewayActivities, TriageActivities)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (409, TEMPORARY),
        (429, TEMPORARY),
        (500, TEMPORARY),
        (503, TEMPORARY),
        (504, TEMPORARY),
        (403, PERMANENT),
        (404, PERMANENT),
        (422, PERMANENT),
    ],
)
def test_kubernetes_statuses_split_into_retryable_and_permanent(status: int, kind: str) -> None:
    assert classify_status(status) == kind
    error = k8s_error(ApiException(status=status, reason="Why"), verb="patch", obj="pod serving/x")
    assert error.non_retryable is (kind == PERMANENT)
    assert error.message == f"kubernetes patch pod serving/x: {status} Why"


def test_a_missing_object_over_http_is_permanent_and_named(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApplicationError) as failed:
        k8s_call("get", "pod serving/nope", lambda: core.read_namespaced_pod("nope", NS))
    assert failed.value.non_retryable
    assert failed.value.message.startswith("kubernetes get pod serving/nope: 404")


def test_a_stale_resource_version_over_http_is_a_retryable_conflict(kube: Kube) -> None:
    kube.store.create(
        "services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}, namespace=NS
    )
    core = client.CoreV1Api(kube.api)
    svc = core.read_namespaced_service("s", NS)
    core.patch_namespaced_service("s", NS, {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApplicationError) as failed:
        k8s_call(
            "update", "service serving/s", lambda: core.replace_namespaced_service("s", NS, svc)
        )
    assert not failed.value.non_retryable and ": 409" in str(failed.value)


def test_an_invalid_patch_over_http_is_permanent(kube: Kube) -> None:
    kube.store.create(
        "services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}, namespace=NS
    )
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApplicationError) as failed:
        k8s_call(
            "patch",
            "service serving/s",
            lambda: core.patch_namespaced_service(
                "s", NS, {"metadata": {"labels": {"a": "not valid!"}}}
            ),
        )
    assert failed.value.non_retryable and ": 422" in str(failed.value)


def test_an_unreachable_api_server_is_retryable() -> None:
    api = build_api_client(host="http://127.0.0.1:9")
    core = client.CoreV1Api(api)
    with pytest.raises(ApplicationError) as failed:
        k8s_call("list", "nodes", lambda: core.list_node(_request_timeout=1))
    assert not failed.value.non_retryable and "kubernetes list nodes" in str(failed.value)


def test_an_activity_on_a_missing_node_fails_permanently_and_the_ledger_records_it(
    kube: Kube, runner: EffectRunner
) -> None:
    acts = ClusterActivities(kube.api, runner, ActivitySettings())
    with pytest.raises(ApplicationError) as failed:
        cordon(acts, "ghost", "i/cordon/ghost")
    assert failed.value.non_retryable and "node ghost: 404" in str(failed.value)
    record = runner.ledger.get("i/cordon/ghost")
    assert record is not None and record.state == "failed"


def test_every_registered_activity_has_timeouts_and_a_retry_policy_beside_it(
    kube: Kube, runner: EffectRunner
) -> None:
    import httpx

    with httpx.Client() as http:
        registered = build_activities(kube.api, runner, http, ActivitySettings())
    names = [fn.__name__ for fn in registered]
    assert len(names) == len(set(names)) == len(ACTIVITY_OPTIONS)
    assert set(names) == set(ACTIVITY_OPTIONS)
    for name, opts in ACTIVITY_OPTIONS.items():
        timeout = opts["start_to_close_timeout"]
        assert timeout is not None and timeout > timedelta(0), name
        policy = opts["retry_policy"]
        assert policy is not None
        assert {"PermanentError", "RefusedError"} <= set(policy.non_retryable_error_types or []), (
            name
        )
    waiting = {
        "deroute_replica",
        "relocate_misplaced_pod",
        "ramp_traffic",
        "warm_up_replica",
        "read_pressure",
        "read_replica_rates",
        "verify_serving",
    }
    for name in waiting:
        assert ACTIVITY_OPTIONS[name].get("heartbeat_timeout"), name


def test_a_dead_worker_costs_any_activity_at_most_thirty_seconds_before_its_retry() -> None:
    # Temporal notices a dead worker when the heartbeat timeout runs out, or, for an
    # activity that does not heartbeat, only at its start-to-close timeout.
    noticed_after = {
        name: (opts.get("heartbeat_timeout") or opts["start_to_close_timeout"]).total_seconds()
        for name, opts in ACTIVITY_OPTIONS.items()
        if opts.get("start_to_close_timeout") is not None
    }
    assert set(noticed_after) == set(ACTIVITY_OPTIONS)
    assert {n: s for n, s in noticed_after.items() if s > UNHEARTBEATED_MAX_S} == {}
    unheartbeated = {n for n, opts in ACTIVITY_OPTIONS.items() if not opts.get("heartbeat_timeout")}
    assert {"assess_loss", "verify_capacity"} <= unheartbeated


def test_a_throttled_call_waits_the_servers_retry_after_before_its_next_attempt(
    kube: Kube,
) -> None:
    kube.server.chaos.open(ApiFault(answer="throttle", retry_after_s=7))
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApplicationError) as failed:
        k8s_call(
            "patch",
            "namespace serving",
            lambda: core.patch_namespace(NS, {"metadata": {"labels": {"a": "b"}}}),
        )
    assert not failed.value.non_retryable
    assert failed.value.next_retry_delay == timedelta(seconds=7)
    assert failed.value.message == (
        "kubernetes patch namespace serving: 429 Too Many Requests (retry after 7s)"
    )


@pytest.mark.parametrize(
    ("header", "delay"),
    [
        ({"Retry-After": "3"}, timedelta(seconds=3)),
        ({"retry-after": "0.5"}, timedelta(seconds=0.5)),
        ({"Retry-After": "3600"}, timedelta(seconds=MAX_RETRY_AFTER_S)),
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "nan"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_is_read_in_seconds_capped_and_otherwise_left_to_the_policy(
    header: dict[str, str] | None, delay: timedelta | None
) -> None:
    assert retry_after(header) == delay


def test_a_server_error_without_retry_after_leaves_the_delay_to_the_retry_policy() -> None:
    error = k8s_error(ApiException(status=500, reason="Boom"), verb="get", obj="pod serving/x")
    assert not error.non_retryable
    assert error.next_retry_delay is None


def test_the_retry_budget_adds_the_back_off_between_attempts_up_to_its_ceiling() -> None:
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=8,
    )
    assert retry_budget_s(policy) == 1 + 2 + 4 + 8 + 16 + 30 + 30
    assert retry_budget_s(RetryPolicy(maximum_attempts=1)) == 0
    assert retry_budget_s(RetryPolicy(maximum_attempts=0)) == float("inf")


def test_every_kubernetes_facing_activity_rides_out_a_minute_long_api_outage(
    kube: Kube, runner: EffectRunner
) -> None:
    import httpx

    with httpx.Client() as http:
        registered = build_activities(kube.api, runner, http, ActivitySettings())
    facing = [
        fn.__name__
        for fn in registered
        if isinstance(getattr(fn, "__self__", None), KUBERNETES_FACING)
    ]
    assert {"assess_loss", "deroute_replica", "apply_shed_tier", "triage_node"} <= set(facing)
    budgets = {name: retry_budget_s(policy_of(name)) for name in facing}
    assert {name: s for name, s in budgets.items() if s < API_OUTAGE_S} == {}


def policy_of(name: str) -> RetryPolicy:
    policy = ACTIVITY_OPTIONS[name]["retry_policy"]
    assert policy is not None
    return policy


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 3.0), (2, 3.0), (3, 4.0), (6, 30.0)])
def test_a_retry_after_shorter_than_the_policys_back_off_does_not_shorten_it(
    attempt: int, seconds: float
) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, retry_policy=policy_of("assess_loss"))
    error = ApiException(status=429, reason="Too Many Requests")
    error.headers = {"Retry-After": "3"}
    made = env.run(lambda: k8s_error(error, verb="list", obj="pods serving"))
    assert made.next_retry_delay == timedelta(seconds=seconds)
    assert made.message.endswith("(retry after 3s)")


def test_an_http_service_that_throttles_is_retried_after_its_retry_after() -> None:
    request = httpx.Request("GET", "http://router.example/metrics")
    response = httpx.Response(503, headers={"Retry-After": "5"}, request=request)
    with pytest.raises(ApplicationError) as failed, http_errors("scrape", "router"):
        response.raise_for_status()
    assert not failed.value.non_retryable
    assert failed.value.next_retry_delay == timedelta(seconds=5)
    assert failed.value.message == "scrape router: HTTP 503 (retry after 5s)"
