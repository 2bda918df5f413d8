"""A stand-in ReplicaLossWorkflow with the real contract (status query, approve update).

The CLI is tested against the contract in workflows/types.py, not against the runbook:
this workflow registers under the real name, answers `status` with a plausible shape and
validates `approve` the way the real one must (unknown or decided gate: refused).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from workflows.types import (
        QUERY_STATUS,
        UPDATE_APPROVE,
        WORKFLOW_NAME,
        ApprovalInput,
        IncidentInput,
    )


@workflow.defn(name=WORKFLOW_NAME)
class SampleIncident:
    def __init__(self) -> None:
        self.step = "protect"
        self.gates: dict[str, dict[str, Any]] = {
            "deroute-beyond-blast-radius": {
                "gate": "deroute-beyond-blast-radius",
                "question": "deroute 2 of 4 replicas (50% > 25%)?",
                "default": "deny",
                "decided": False,
            }
        }
        self.timeline: list[dict[str, Any]] = [
            {"at": "2026-11-29T08:00:01Z", "step": "assess", "message": "1 replica lost"},
            {"at": "2026-11-29T08:00:03Z", "step": "deroute", "message": "pod-1 out of slice"},
        ]

    @workflow.run
    async def run(self, incident: IncidentInput) -> str:
        await workflow.wait_condition(lambda: all(g["decided"] for g in self.gates.values()))
        return "closed"

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "pending_gates": list(self.gates.values()),
            "timeline": self.timeline,
            "replicas_lost": 1,
        }

    @workflow.update(name=UPDATE_APPROVE)
    def approve(self, decision: ApprovalInput) -> str:
        gate = self.gates[decision.gate]
        gate["decided"] = True
        verdict = "approved" if decision.approve else "denied"
        self.timeline.append(
            {
                "at": workflow.now().isoformat(),
                "step": "gate",
                "message": f"{decision.gate} {verdict} by {decision.approver}",
            }
        )
        return verdict

    @approve.validator
    def _known_open_gate(self, decision: ApprovalInput) -> None:
        gate = self.gates.get(decision.gate)
        if gate is None:
            raise ValueError(f"no gate {decision.gate!r}; open: {sorted(self.gates)}")
        if gate["decided"]:
            raise ValueError(f"gate {decision.gate!r} is already decided")


@activity.defn(name="sample_slow_step")
async def sample_slow_step(seconds: float) -> str:
    """Heartbeats while it works, as every long fleetmend activity must."""
    import asyncio

    waited = 0.0
    while waited < seconds:
        activity.heartbeat(waited)
        await asyncio.sleep(0.1)
        waited += 0.1
    return f"done after {seconds}s"


@workflow.defn(name="SampleSlowWorkflow")
class SampleSlowWorkflow:
    @workflow.run
    async def run(self, seconds: float) -> str:
        return await workflow.execute_activity(
            sample_slow_step,
            seconds,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=5),
        )
