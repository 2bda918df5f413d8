"""Credentials in configured URLs never reach an error, the timeline or a report."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.effects import EffectRunner
from activities.gateway import AnnotationGateway, GatewayActivities, RetryContractInput
from activities.notify import NotifyActivities, NotifyInput
from activities.redact import redact_url

from .conftest import NS, POOL, FleetHandle, scenario

SECRETS = ("s3cret", "XyZ-path-secret", "q-token-1")
WEBHOOK = "https://bot:s3cret@hooks.example/services/T0/XyZ-path-secret?token=q-token-1"


@pytest.mark.parametrize(
    ("url", "keep_path", "shown"),
    [
        (WEBHOOK, False, "https://hooks.example/..."),
        (WEBHOOK, True, "https://hooks.example/services/T0/XyZ-path-secret"),
        ("http://u:p@127.0.0.1:9090/metrics?k=v", True, "http://127.0.0.1:9090/metrics"),
        ("http://[::1]:80/", False, "http://[::1]:80"),
        ("http://10.0.0.1:8000/metrics", True, "http://10.0.0.1:8000/metrics"),
        ("user:pass@nowhere", True, "(unparseable URL)"),
        ("http://h:99999/x", True, "(unparseable URL)"),
    ],
)
def test_a_url_is_shown_without_userinfo_query_and_optionally_path(
    url: str, keep_path: bool, shown: str
) -> None:
    assert redact_url(url, keep_path=keep_path) == shown


def test_a_failed_post_to_the_incident_channel_names_only_its_host(runner: EffectRunner) -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    with pytest.raises(ApplicationError) as failed:
        ActivityEnvironment().run(
            NotifyActivities(http, WEBHOOK, runner).notify_incident_channel,
            NotifyInput(op_id="i/notify/secret", incident_id="i", title="t"),
        )
    message = str(failed.value)
    assert "hooks.example" in message and "500" in message
    assert not [s for s in SECRETS if s in message]


def test_unreadable_router_counts_are_reported_without_the_urls_credentials(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    url = "http://metrics:s3cret@127.0.0.1:9/metrics?token=q-token-1"
    gateway = AnnotationGateway(handle.api, http=handle.http, router_metrics_url=url)
    inflight = RetryContractInput(
        op_id="i/inflight", incident_id="i", namespace=NS, pool=POOL, lost_pods=["x"]
    )
    result = ActivityEnvironment().run(
        GatewayActivities(gateway, runner).apply_retry_contract, inflight
    )
    assert result.counts_available is False
    assert "http://127.0.0.1:9/metrics" in (result.counts_error or "")
    assert not [s for s in SECRETS if s in (result.counts_error or "")]
