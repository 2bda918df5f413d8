"""Kubernetes API fault windows (`fleetsim.kube.chaos`): which requests they hit, how they
answer, for how long, and the mutation log that shows what took effect."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from fleetsim.kube.chaos import (
    ApiFault,
    Chaos,
    Mutation,
    MutationLog,
    RequestInfo,
    Window,
    stamped_op_id,
    verb_of,
)
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer
from fleetsim.scenario import Fault

from .conftest import NS, llm_template


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def chaos(clock: FakeClock) -> Chaos:
    return Chaos(clock=clock)


@pytest.fixture
def core(cluster: Cluster, chaos: Chaos) -> Iterator[client.CoreV1Api]:
    server = KubeServer(cluster, chaos=chaos).start()
    try:
        with client.ApiClient(client.Configuration(host=server.url)) as api:
            yield client.CoreV1Api(api)
    finally:
        server.stop()


def make_pod(core: client.CoreV1Api, name: str = "p0") -> None:
    body = {"metadata": {"name": name, "labels": {"app": "x"}}, "spec": llm_template(1)["spec"]}
    core.create_namespaced_pod(NS, body)


def label(core: client.CoreV1Api, value: str, *, op: str = "op-1", name: str = "p0") -> None:
    body = {"metadata": {"labels": {"serving": value}, "annotations": {"fleetmend.io/op-id": op}}}
    core.patch_namespaced_pod(name, NS, body, _request_timeout=2)


def serving_label(core: client.CoreV1Api, name: str = "p0") -> str | None:
    labels = core.read_namespaced_pod(name, NS).metadata.labels or {}
    value = labels.get("serving")
    return None if value is None else str(value)


def info(verb: str = "patch", resource: str = "pods", **kw: str | None) -> RequestInfo:
    return RequestInfo(
        verb=verb,  # type: ignore[arg-type]
        resource=resource,
        subresource=kw.get("sub"),
        namespace=kw.get("namespace", NS),
        name=kw.get("name", "p0"),
    )


# ------------------------------------------------------------------ what a window matches


def test_a_window_matches_only_its_verbs_resources_and_namespaces_while_open() -> None:
    fault = ApiFault(
        answer="error", verbs=["patch"], resources=["pods"], namespaces=[NS], for_wall_s=30
    )
    window = Window(fault, opens_at=100.0, closes_at=130.0)

    assert window.matches(info(), 100.0)
    assert window.matches(info(), 129.9)
    assert not window.matches(info(), 99.9)
    assert not window.matches(info(), 130.0)
    assert not window.matches(info(verb="get"), 110.0)
    assert not window.matches(info(resource="deployments"), 110.0)
    assert not window.matches(info(namespace="other"), 110.0)
    assert not window.matches(info(namespace=None, resource="pods"), 110.0)


def test_a_subresource_is_matched_by_its_own_name_not_its_parents() -> None:
    window = Window(ApiFault(answer="error", resources=["deployments/scale"]), 0.0, 30.0)
    assert window.matches(info(resource="deployments", sub="scale"), 1.0)
    assert not window.matches(info(resource="deployments"), 1.0)
    parent_only = Window(ApiFault(answer="error", resources=["deployments"]), 0.0, 30.0)
    assert not parent_only.matches(info(resource="deployments", sub="scale"), 1.0)


def test_by_default_a_window_hits_every_mutating_verb_everywhere_and_no_read() -> None:
    window = Window(ApiFault(answer="throttle"), 0.0, 30.0)
    for verb in ("create", "update", "patch", "delete"):
        assert window.matches(info(verb=verb, namespace=None, resource="nodes"), 1.0)
    for verb in ("get", "list", "watch"):
        assert not window.matches(info(verb=verb), 1.0)


def test_http_methods_map_to_the_kubernetes_verbs() -> None:
    assert verb_of("GET", named=True, watch=False) == "get"
    assert verb_of("GET", named=False, watch=False) == "list"
    assert verb_of("GET", named=False, watch=True) == "watch"
    assert [verb_of(m, named=True, watch=False) for m in ("POST", "PUT", "PATCH", "DELETE")] == [
        "create",
        "update",
        "patch",
        "delete",
    ]
    with pytest.raises(ValueError, match="HTTP OPTIONS"):
        verb_of("OPTIONS", named=True, watch=False)


def test_bad_fault_settings_are_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        ApiFault.model_validate({"answer": "error", "status": 404})
    assert err.value.errors()[0]["loc"] == ("status",)
    with pytest.raises(ValidationError, match="verbs"):
        ApiFault.model_validate({"answer": "error", "verbs": ["explode"]})
    with pytest.raises(ValidationError, match="lose_response applies to answer: timeout"):
        ApiFault(answer="throttle", lose_response=True)
    with pytest.raises(ValidationError, match="for_wall_s"):
        ApiFault.model_validate({"answer": "timeout", "for_wall_s": 0})


def test_a_scenario_fault_of_kind_kube_api_needs_its_api_settings_and_only_it_takes_them() -> None:
    fault = Fault.model_validate(
        {"at": 5, "kind": "kube-api", "api": {"answer": "throttle", "retry_after_s": 3}}
    )
    assert fault.api is not None and fault.api.retry_after_s == 3
    with pytest.raises(ValidationError, match="kube-api needs `api`"):
        Fault.model_validate({"at": 5, "kind": "kube-api"})
    with pytest.raises(ValidationError, match="only kube-api takes it"):
        Fault.model_validate(
            {
                "at": 5,
                "kind": "pod-evicted",
                "target": {"namespace": NS, "pool": "llm"},
                "api": {"answer": "error"},
            }
        )


# ------------------------------------------------------------------ the mutation log


def test_the_log_finds_a_stamped_effect_applied_twice_and_ignores_refusals_and_dry_runs() -> None:
    log = MutationLog()
    once = Mutation("patch", "pods serving/a", "op-a", 200, applied=True, during=None)
    log.record(once)
    log.record(Mutation("patch", "pods serving/a", "op-a", 500, applied=False, during="error"))
    log.record(Mutation("patch", "pods serving/b", "op-b", 200, applied=True, during=None))
    log.record(Mutation("patch", "pods serving/b", "op-b", 200, applied=False, during=None))
    assert log.applied_twice() == {}
    log.record(once)
    assert log.applied_twice() == {"patch pods serving/a op=op-a": 2}
    assert len(log.refused()) == 2


def test_the_op_id_is_read_from_the_body_whatever_the_body_is() -> None:
    stamped = {"metadata": {"annotations": {"fleetmend.io/op-id": "inc/deroute/p0"}}}
    assert stamped_op_id(json.dumps(stamped).encode()) == "inc/deroute/p0"
    for junk in (b"", b"not json", b"[1, 2]", b'{"metadata": 3}', b'{"metadata": {}}'):
        assert stamped_op_id(junk) is None


# ------------------------------------------------------------------ over HTTP, official client


def test_an_error_window_answers_500_applies_nothing_and_closes_on_time(
    core: client.CoreV1Api, chaos: Chaos, clock: FakeClock
) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="error", resources=["pods"], for_wall_s=30))

    with pytest.raises(ApiException) as err:
        label(core, "false")
    assert err.value.status == 500
    body = json.loads(err.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "InternalError", 500)
    assert serving_label(core) is None, "a refused patch must change nothing"

    clock.now += 30
    label(core, "false")
    assert serving_label(core) == "false"
    [refused] = chaos.mutations.refused()
    assert (refused.status, refused.during, refused.op_id) == (500, "error", "op-1")
    assert chaos.mutations.applied()[("patch", f"pods {NS}/p0", "op-1")] == 1
    assert chaos.describe()[0]["answered"] == 1


def test_an_error_window_can_answer_any_5xx(core: client.CoreV1Api, chaos: Chaos) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="error", status=503))
    with pytest.raises(ApiException) as err:
        label(core, "false")
    assert err.value.status == 503


def test_a_throttle_window_answers_429_with_retry_after(
    core: client.CoreV1Api, chaos: Chaos
) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="throttle", retry_after_s=7))

    with pytest.raises(ApiException) as err:
        label(core, "false")
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "7"
    assert json.loads(err.value.body)["details"] == {"retryAfterSeconds": 7}
    assert serving_label(core) is None


def test_reads_pass_a_mutating_window_and_a_read_window_refuses_reads(
    core: client.CoreV1Api, chaos: Chaos
) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="error"))
    assert core.read_namespaced_pod("p0", NS).metadata.name == "p0"
    chaos.close_all()
    chaos.open(ApiFault(answer="error", verbs=["get", "list"]))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS)
    assert err.value.status == 500


def test_a_timeout_window_holds_the_request_past_the_clients_timeout_and_applies_nothing(
    core: client.CoreV1Api, chaos: Chaos
) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="timeout", hang_s=3))

    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        body = {"metadata": {"labels": {"serving": "false"}}}
        core.patch_namespaced_pod("p0", NS, body, _request_timeout=0.3)
    assert serving_label(core) is None


def test_a_lost_response_window_applies_the_change_and_the_client_never_hears_of_it(
    core: client.CoreV1Api, chaos: Chaos
) -> None:
    make_pod(core)
    chaos.open(ApiFault(answer="timeout", hang_s=3, lose_response=True))

    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        body = {"metadata": {"labels": {"serving": "false"}}}
        core.patch_namespaced_pod("p0", NS, body, _request_timeout=0.3)
    assert serving_label(core) == "false"
    [mutation] = [m for m in chaos.mutations.entries if m.verb == "patch"]
    assert (mutation.applied, mutation.during) == (True, "timeout")


def test_a_hung_request_is_answered_504_when_the_hang_ends() -> None:
    async def no_wait(seconds: float) -> None:
        assert seconds == 60.0

    async def healthy() -> object:
        raise AssertionError("a timeout without lose_response must not reach the server")

    async def body() -> bytes:
        return b"{}"

    chaos = Chaos(sleep=no_wait)
    chaos.open(ApiFault(answer="timeout"))
    response = asyncio.run(chaos.handle(info(), body, healthy))  # type: ignore[arg-type]
    assert response.status_code == 504
    assert chaos.mutations.entries[0].applied is False


def test_a_create_is_counted_under_the_name_in_its_body(
    core: client.CoreV1Api, chaos: Chaos
) -> None:
    make_pod(core, "made")
    assert chaos.mutations.applied() == {("create", f"pods {NS}/made", None): 1}
