"""When the ramp bench's pair of drills is evidence (`bench.ramp_bench.reproduced`)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.ramp_bench import NO_ENDPOINT, SCENARIO, reproduced
from fleetsim.scenario import load_scenario


def run(ramp: bool, **changes: Any) -> dict[str, Any]:
    """One drill's figures as `bench.ramp_bench.run` returns them: a clean run by default,
    the equal share's at the model's peak (26.6 s at the runbook's parameters)."""
    return {
        "ramp": ramp,
        "late": 0,
        "late_on_new": 0,
        "peak_wait_new_s": 1.0 if ramp else 26.0,
        "dropped": 0,
        "failed_by_reason": {},
    } | changes


@pytest.mark.parametrize(
    ("ramped", "equal", "because"),
    [
        (run(True), run(False), []),
        (run(True, late=3), run(False), ["fleetmend's ramp left 3 late requests"]),
        (run(True), run(False, peak_wait_new_s=9.0), ["under 80% of the request-level"]),
        (run(True, dropped=68), run(False), ["ramp=True: 68 arrivals dropped as overdue"]),
        (
            run(True),
            run(False, failed_by_reason={NO_ENDPOINT: 5535, "ConnectError": 59}),
            ["ramp=False: 5535 requests failed with no endpoint in the ready set"],
        ),
        # A failure of another kind is the policy's to explain, not the fleet's overload.
        (run(True), run(False, failed_by_reason={"ConnectError": 59}), []),
    ],
)
def test_a_pair_is_evidence_only_with_no_late_ramp_a_modelled_equal_share_and_a_fleet_that_kept_up(
    ramped: dict[str, Any], equal: dict[str, Any], because: list[str]
) -> None:
    why = reproduced([ramped, equal], load_scenario(SCENARIO), colder=False)
    assert len(why) == len(because)
    for line, expected in zip(why, because, strict=True):
        assert expected in line
