"""fleetsim's fluid queue reproduces the runbook's published `ramp_back.py` table.

Only the printed figures come from the runbook; the model is `fleetsim.queueing`.
"""

from __future__ import annotations

import pytest

from fleetsim.queueing import (
    FifoServer,
    FluidQueue,
    ServiceCurve,
    simulate_ramp,
    simulate_ramp_requests,
    warm_rate_at,
)


def test_case_1_to_3_equal_share_overloads_the_cold_replica() -> None:
    eq = simulate_ramp("equal_on_ready")
    rm = simulate_ramp("ramp_on_measured_rate")
    assert round(eq.peak_wait_new) == 31
    assert round(rm.peak_wait_new, 1) == 0.0
    assert round(eq.goodput) == 35682
    assert round(rm.goodput) == 36000
    assert round(eq.late) == 313
    assert round(rm.late) == 0
    assert round(eq.final_depth_new) == 0 and round(rm.final_depth_new) == 0
    assert f"{rm.goodput / eq.goodput - 1:.0%}" == "1%"


def test_case_4_a_replica_that_starts_warm_makes_the_policies_identical() -> None:
    eq = simulate_ramp("equal_on_ready", cold_frac=1.0, warmup_s=0)
    rm = simulate_ramp("ramp_on_measured_rate", cold_frac=1.0, warmup_s=0)
    assert eq.goodput == rm.goodput
    assert round(eq.goodput) == 36000 and eq.late == 0


def test_case_5_coldness_sweep() -> None:
    peaks = [
        round(simulate_ramp("equal_on_ready", cold_frac=f).peak_wait_new)
        for f in (1.0, 0.75, 0.5, 0.25)
    ]
    assert peaks == [0, 0, 11, 31]


@pytest.mark.parametrize("cold_frac", [0.1, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("warmup_s", [30, 120, 600])
def test_case_6_rate_weighting_leaves_nothing_late_when_the_replacement_is_headroom(
    cold_frac: float, warmup_s: float
) -> None:
    r = simulate_ramp("ramp_on_measured_rate", cold_frac=cold_frac, warmup_s=warmup_s)
    assert r.late == 0 and r.peak_wait_new <= 30.0


def test_case_7_routing_is_not_admission() -> None:
    kw = {"arrival": 80.0, "cold_frac": 0.1, "warmup_s": 600.0}
    eq = simulate_ramp("equal_on_ready", **kw)  # type: ignore[arg-type]
    rm = simulate_ramp("ramp_on_measured_rate", **kw)  # type: ignore[arg-type]
    assert round(eq.late) == 6585
    assert round(rm.late) == 34267


def test_conserving_accounting_serves_every_arrival_and_keeps_the_late_counts() -> None:
    runbook = simulate_ramp("equal_on_ready")
    conserving = simulate_ramp("equal_on_ready", accounting="conserving")
    assert conserving.served + conserving.final_depth_new == pytest.approx(conserving.arrivals)
    assert conserving.late == pytest.approx(runbook.late)
    assert conserving.peak_wait_new == pytest.approx(runbook.peak_wait_new)
    # The runbook's rule drops the backlog cleared in the step a queue empties.
    assert runbook.served < conserving.served
    assert round(conserving.goodput) == 35687


def test_fluid_queue_reports_wait_as_backlog_over_rate() -> None:
    q = FluidQueue(deadline_s=1.0)
    out = q.step(inflow=30.0, rate=10.0)
    assert out.served == 10.0 and q.backlog == 20.0 and out.wait_s == 2.0
    assert out.late == 10.0


def test_warm_rate_climbs_linearly_then_holds() -> None:
    kw = {"warm_rate": 20.0, "cold_frac": 0.25, "warmup_s": 120.0}
    assert warm_rate_at(0, **kw) == 5.0
    assert warm_rate_at(60, **kw) == 12.5
    assert warm_rate_at(500, **kw) == 20.0


def test_fifo_server_on_a_warm_curve_spaces_starts_by_the_rate() -> None:
    s = FifoServer()
    warm = ServiceCurve(4.0, 1.0, 0.0, ready_at=-100.0)
    starts = [s.admit(0.0, warm) for _ in range(3)]
    assert starts == pytest.approx([0.0, 0.25, 0.5])
    assert s.backlog(0.1, warm) == pytest.approx(2.6)
    assert s.admit(10.0, warm) == 10.0


def test_service_curve_integrates_the_warm_up_and_inverts() -> None:
    curve = ServiceCurve(20.0, 0.25, 120.0, ready_at=0.0)
    # 5 req/s climbing to 20 over 120 s: the area of a trapezoid, then a rectangle.
    assert curve.capacity(120.0) == pytest.approx(120 * (5 + 20) / 2)
    assert curve.capacity(130.0) == pytest.approx(1500 + 200)
    for t in (0.5, 60.0, 119.0, 300.0):
        assert curve.time_at(curve.capacity(t)) == pytest.approx(t)


def test_a_backlog_built_cold_drains_faster_as_the_replica_warms() -> None:
    cold = ServiceCurve(20.0, 0.25, 120.0, ready_at=0.0)
    s = FifoServer()
    last = [s.admit(0.0, cold) for _ in range(100)][-1]
    # At the cold rate alone the 100th would wait 99 / 5 = 19.8 s.
    assert 15.0 < last < 19.8


def test_the_ramp_request_by_request_through_the_replicas_queues() -> None:
    """fleetsim's own per-request figures (not the runbook's): same ordering, and the
    fluid estimate (backlog over the current rate) is the conservative one."""
    eq = simulate_ramp_requests("equal_on_ready")
    rm = simulate_ramp_requests("ramp_on_measured_rate")
    assert eq.served == rm.served == 36000
    assert round(eq.peak_wait_new, 1) == 26.6 and rm.peak_wait_new < 0.1
    assert eq.late == rm.late == 0
    assert eq.peak_wait_new < simulate_ramp("equal_on_ready").peak_wait_new
    sweep = [
        round(simulate_ramp_requests("equal_on_ready", cold_frac=f).peak_wait_new)
        for f in (1.0, 0.5)
    ]
    assert sweep == [0, 10]
    full = {"arrival": 80.0, "cold_frac": 0.1, "warmup_s": 600.0}
    eq7 = simulate_ramp_requests("equal_on_ready", **full)  # type: ignore[arg-type]
    rm7 = simulate_ramp_requests("ramp_on_measured_rate", **full)  # type: ignore[arg-type]
    assert 0 < eq7.late < rm7.late


def fifo_waits_in_the_runbooks_queue(cold_frac: float = 0.25) -> tuple[float, float]:
    """The runbook's own one-second-step queue on the new replica (equal share), read two
    ways: its wait (backlog over the current rate) and each arrival's own FIFO wait (the
    steps until everything ahead of it, and it, has been served)."""
    q = FluidQueue(deadline_s=30.0, accounting="conserving")
    arrived, departed, estimate = [0.0], [0.0], 0.0
    for t in range(600):
        rate = warm_rate_at(t, warm_rate=20.0, cold_frac=cold_frac, warmup_s=120.0)
        out = q.step(15.0, rate)
        estimate = max(estimate, out.wait_s)
        arrived.append(arrived[-1] + 15.0)
        departed.append(departed[-1] + out.served)
    own = max(
        next(k for k in range(t, len(departed)) if departed[k] >= arrived[t] - 1e-9) - t
        for t in range(1, 400)
    )
    return estimate, float(own)


def test_the_runbooks_31_s_is_its_estimate_not_any_requests_wait() -> None:
    # The estimate assumes the rate stays where it is; it climbs while a request queues,
    # so in the runbook's own queue nobody waits past the 30 s deadline.
    estimate, own = fifo_waits_in_the_runbooks_queue()
    assert round(estimate, 1) == 31.2
    assert own == 27.0
    colder_estimate, colder_own = fifo_waits_in_the_runbooks_queue(cold_frac=0.1)
    assert colder_own > 30.0 and colder_estimate > colder_own
