"""Rate-weighted traffic restoration: the pure weight maths and the activity that applies it.

Called from `workflows/replica_loss.py` after warm-up. A replacement replica is ready
before it is fast (seed 000, `ramp_back.py`): each replica's router weight follows its
measured rate, a new replica's share grows over minutes while its own TTFT p99 stays
under the SLO, and the ramp holds or backs off that replica when it does not.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import (
    MUTATING_HEARTBEAT_S,
    EffectRunnerLike,
    MutatingInput,
    MutatingResult,
    PodRef,
    activity_options,
    heartbeat,
    run_effect,
)
from activities.gateway import Gateway, weights_written_by
from activities.metrics import request_rate, sample_window, ttft_p99

RampAction = Literal["advance", "hold", "back-off", "not-warmed"]


class RampStepRecord(BaseModel):
    index: int
    weights: dict[str, int]
    rates: dict[str, float | None]
    ttft_p99_s: dict[str, float | None]
    actions: dict[str, RampAction]


class RampInput(MutatingInput):
    namespace: str
    warm_replicas: list[PodRef]
    new_replicas: list[PodRef]
    # Only these new replicas passed warm-up; the others stay at the probe share.
    warmed_pods: list[str]
    steps: int = 5
    step_interval_s: float = 60.0
    ttft_slo_s: float = 2.0
    # TTFT above this fraction of the SLO holds a replica's share where it is.
    hold_fraction: float = 0.8
    probe_share: float = 0.02
    total_weight: int = 1000
    # A ramp that backs off more often than this gives up (the replica is not getting warm).
    max_back_offs: int = 3


class RampResult(MutatingResult):
    completed: bool
    steps: list[RampStepRecord]
    final_weights: dict[str, int]
    previous_weights: dict[str, int | None]
    held_back: list[str] = Field(default_factory=list)
    # Routing is not admission: shedding stays until every new replica's cache is warm.
    keep_shedding: bool
    keep_shedding_reason: str = ""
    applied_now: bool


# ---------------------------------------------------------------------------- pure maths


def rate_shares(rates: Mapping[str, float]) -> dict[str, float]:
    """Each replica's share of traffic in proportion to its measured rate (ramp_back.py)."""
    clean = {pod: max(0.0, r) for pod, r in rates.items()}
    total = sum(clean.values())
    if total <= 0:
        return {pod: 1.0 / len(clean) for pod in clean} if clean else {}
    return {pod: r / total for pod, r in clean.items()}


def shares_to_weights(shares: Mapping[str, float], total: int = 1000) -> dict[str, int]:
    """Integer router weights summing to `total` (largest remainder), never 0 for a share > 0.

    A replica with a positive share keeps at least weight 1 so it still sees probe traffic.
    """
    if not shares:
        return {}
    raw = {pod: share * total for pod, share in shares.items()}
    weights = {pod: int(v) for pod, v in raw.items()}
    leftover = total - sum(weights.values())
    # Largest remainder first; ties go to the first name, so weights are reproducible.
    for pod in sorted(raw, key=lambda p: (-(raw[p] - weights[p]), p))[:leftover]:
        weights[pod] += 1
    for pod, share in shares.items():
        if share > 0 and weights[pod] == 0:
            weights[pod] = 1
            # Keep the total: the probe's unit comes from the largest weight.
            largest = max(weights, key=lambda p: (weights[p], p))
            if weights[largest] > 1:
                weights[largest] -= 1
    return weights


def compute_ramp_weights(rates: Mapping[str, float], total: int = 1000) -> dict[str, int]:
    """Router weights from measured rates: the rate-weighted policy of the runbook's model."""
    return shares_to_weights(rate_shares(rates), total)


class RampPlan(BaseModel):
    """One step: the rate each replica is credited with, its weight and the action taken."""

    credited_rates: dict[str, float]
    weights: dict[str, int]
    actions: dict[str, RampAction]


def plan_ramp_step(
    *,
    warm_rates: Mapping[str, float | None],
    new_ttft_p99_s: Mapping[str, float | None],
    previous_credit: Mapping[str, float],
    step: int,
    steps: int,
    ttft_slo_s: float,
    hold_fraction: float = 0.8,
    probe_share: float = 0.02,
    warmed: set[str] | frozenset[str] = frozenset(),
    total_weight: int = 1000,
) -> RampPlan:
    """Credit each replica with a rate and turn the credits into weights (pure; unit-tested).

    Warm replicas are credited with their mean measured rate: one that keeps up serves
    what it is sent, so its own rate measures its share, not its capacity, and crediting
    each its own would compound the window's noise step after step. A new replica's credit
    climbs toward that rate by step/steps while its own TTFT p99 stays under
    `hold_fraction` of the SLO; between that and the SLO it holds its credit; over the SLO
    its credit halves. One that failed warm-up stays at the probe share.
    """
    measured = [r for r in warm_rates.values() if r is not None and r > 0]
    reference = sum(measured) / len(measured) if measured else 1.0
    credit: dict[str, float] = dict.fromkeys(warm_rates, reference)
    warm_total = sum(credit.values())
    # The rate that gives a share of exactly probe_share next to the warm replicas.
    probe_credit = warm_total * probe_share / max(1e-9, 1.0 - probe_share)
    ceiling = reference * min(1.0, max(0, step) / max(1, steps))
    actions: dict[str, RampAction] = {}
    for pod, ttft in new_ttft_p99_s.items():
        previous = previous_credit.get(pod, probe_credit)
        if pod not in warmed:
            actions[pod], credit[pod] = "not-warmed", probe_credit
        elif ttft is not None and ttft > ttft_slo_s:
            actions[pod], credit[pod] = "back-off", max(probe_credit, previous / 2)
        elif ttft is not None and ttft > hold_fraction * ttft_slo_s:
            actions[pod], credit[pod] = "hold", previous
        else:
            actions[pod], credit[pod] = "advance", max(previous, ceiling, probe_credit)
    return RampPlan(
        credited_rates=credit,
        weights=compute_ramp_weights(credit, total_weight),
        actions=actions,
    )


# A ramp runs for minutes and resumes from its heartbeat, so a retry costs little while a
# failure unwinds the whole recovery: it outlives several infrastructure faults (a worker
# killed, the ledger's database or Temporal restarted), bounded by schedule-to-close.
RAMP_OPTIONS = activity_options(
    start_to_close=3600, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10, schedule_to_close=7200
)


class RampActivities:
    """The ramp loop over the gateway (weights) and the replicas' metrics (rates, TTFT)."""

    def __init__(
        self,
        gateway: Gateway,
        http: httpx.Client,
        runner: EffectRunnerLike,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        self.gateway = gateway
        self.http = http
        self.runner = runner
        self.timeout_s = timeout_s

    @activity.defn
    def ramp_traffic(self, input: RampInput) -> RampResult:
        """Apply rate-weighted router weights in steps, watching TTFT p99 per new endpoint.

        Each step measures every replica over `step_interval_s` under the weights in force,
        then sets the next weights (one ledger operation per step, `{op_id}/step-{n}`).
        Progress is heartbeated, so a retried attempt resumes at the step it reached.
        """
        warm = {r.name: r for r in input.warm_replicas}
        new = {r.name: r for r in input.new_replicas}
        targets = [*input.warm_replicas, *input.new_replicas]
        pods = sorted({*warm, *new})
        details = activity.info().heartbeat_details if activity.in_activity() else ()
        state: dict[str, Any] = dict(details[0]) if details and isinstance(details[0], dict) else {}
        previous: dict[str, int | None] = state.get("previous") or self.gateway.read_weights(
            input.namespace, pods
        )
        credit: dict[str, float] = dict(state.get("credit", {}))
        back_offs: dict[str, int] = dict(state.get("back_offs", {}))
        records = [RampStepRecord.model_validate(r) for r in state.get("records", [])]
        step = int(state.get("step", 0))
        applied_any = bool(state.get("applied_any", False))
        weights: dict[str, int] = dict(state.get("weights", {}))
        # A step planned and heartbeated, perhaps not written when the last attempt died.
        pending: dict[str, Any] | None = state.get("pending")
        warmed = set(input.warmed_pods)
        if not new:
            return RampResult(
                completed=True,
                steps=[],
                final_weights={},
                previous_weights=previous,
                keep_shedding=False,
                applied_now=False,
            )
        max_iterations = input.steps + input.max_back_offs + 2
        completed = False
        held_back: set[str] = set()

        def progress() -> dict[str, Any]:
            return {
                "pending": pending,
                "previous": previous,
                "credit": credit,
                "back_offs": back_offs,
                "records": [r.model_dump() for r in records],
                "step": step,
                "applied_any": applied_any,
                "weights": weights,
            }

        while len(records) < max_iterations:
            if pending is not None:
                # Written as planned, never re-planned: the op id of a step names one set
                # of weights, whatever the survivors measure now.
                record = RampStepRecord.model_validate(pending)
                outcome = self._write_step(input, pods, record)
                written = outcome.result.get("weights")
                if outcome.confirmed and isinstance(written, dict):
                    record.weights = {p: int(w) for p, w in written.items() if w is not None}
                weights = record.weights
                applied_any = applied_any or outcome.applied_now
                records.append(record)
                pending = None
                heartbeat(progress())
                held_back = {p for p, n in back_offs.items() if n > input.max_back_offs}
                held_back |= {p for p in new if p not in warmed}
                if any(n > input.max_back_offs for n in back_offs.values()):
                    break
                continue
            window = sample_window(
                self.http,
                targets,
                input.step_interval_s,
                timeout=self.timeout_s,
                details=(progress(),),
            )
            rates: dict[str, float | None] = {}
            ttft: dict[str, float | None] = {}
            for name in pods:
                if name in window.errors:
                    rates[name], ttft[name] = None, None
                    continue
                b, a = window.before[name], window.after[name]
                rates[name] = request_rate(b, a, window.interval_s)
                ttft[name] = ttft_p99(b, a)[0]
            if (
                records
                and all(a == "advance" for p, a in records[-1].actions.items() if p in warmed)
                and step >= input.steps
                and all(
                    ttft.get(p) is None or ttft[p] <= input.hold_fraction * input.ttft_slo_s  # type: ignore[operator]
                    for p in new
                    if p in warmed
                )
            ):
                completed = True
                break
            step = min(input.steps, step + 1)
            plan = plan_ramp_step(
                warm_rates={p: rates.get(p) for p in warm},
                new_ttft_p99_s={p: ttft.get(p) for p in new},
                previous_credit=credit,
                step=step,
                steps=input.steps,
                ttft_slo_s=input.ttft_slo_s,
                hold_fraction=input.hold_fraction,
                probe_share=input.probe_share,
                warmed=warmed,
                total_weight=input.total_weight,
            )
            for pod, action in plan.actions.items():
                if action == "back-off":
                    back_offs[pod] = back_offs.get(pod, 0) + 1
                    # A back-off undoes the step it answered, so the ramp does not skip ahead.
                    step = max(0, step - 1)
            credit = {p: plan.credited_rates[p] for p in new}
            weights = plan.weights
            pending = RampStepRecord(
                index=len(records) + 1,
                weights=weights,
                rates=rates,
                ttft_p99_s=ttft,
                actions=plan.actions,
            ).model_dump()
            heartbeat(progress())

        not_warm = sorted(held_back | {p for p in new if p not in warmed})
        if completed and not not_warm:
            keep, reason = False, ""
        elif not completed:
            keep, reason = (
                True,
                (
                    f"ramp stopped after {len(records)} step(s) without every new replica at full "
                    f"share under {input.hold_fraction:.0%} of the {input.ttft_slo_s:g}s TTFT SLO"
                ),
            )
        else:
            keep, reason = True, f"not warm: {', '.join(not_warm)}"
        return RampResult(
            completed=completed,
            steps=records,
            final_weights=weights,
            previous_weights=previous,
            held_back=not_warm,
            keep_shedding=keep,
            keep_shedding_reason=reason,
            applied_now=applied_any,
        )

    def _write_step(self, input: RampInput, pods: list[str], record: RampStepRecord) -> Any:
        """One ramp step's weights through the ledger, under `{op_id}/step-{n}`."""
        return run_effect(
            self.runner,
            input,
            kind="router-weights",
            target=f"{input.namespace}/pod/{pods[0]}",
            intent={"ramp_step": record.index},
            apply=functools.partial(self._write, input.namespace, record.weights),
            confirm=functools.partial(
                weights_written_by, self.gateway, input.namespace, sorted(record.weights)
            ),
            op_id=f"{input.op_id}/step-{record.index}",
        )

    def _write(self, namespace: str, weights: dict[str, int], op_id: str) -> dict[str, Any]:
        # Bound per step with functools.partial: the ledger calls it with the step's op id.
        self.gateway.write_weights(namespace, dict(weights), op_id)
        return {"weights": weights}
