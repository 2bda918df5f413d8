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
            "blast-radius": {
                "gate": "blast-radius",
                "kind": "blast-radius",
                "would_do": "deroute 2 of 4 replicas (50% > 25%)",
                "on_timeout": "keep 1 routed; page the owner",
                "deadline": "2026-11-29T08:15:00Z",
                "evidence": {"lost_fraction": 0.5},
                "decided": False,
            }
        }
        self.timeline: list[dict[str, Any]] = [
            {
                "step": "assess",
                "started_at": "2026-11-29T08:00:01Z",
                "ended_at": "2026-11-29T08:00:02.5Z",
                "outcome": "1 replica lost",
                "evidence": {"pool_size": 4},
            },
            {
                "step": "deroute",
                "started_at": "2026-11-29T08:00:03Z",
                "ended_at": None,
                "outcome": "pod-1 out of the slice",
                "evidence": {},
            },
        ]

    @workflow.run
    async def run(self, incident: IncidentInput) -> str:
        await workflow.wait_condition(lambda: all(g["decided"] for g in self.gates.values()))
        return "closed"

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> dict[str, Any]:
        """Shaped like workflows.types.IncidentStatus, plus a field the CLI does not know."""
        return {
            "incident_id": "inc-20261129-0800",
            "step": self.step,
            "outcome": "open",
            "dry_run": False,
            "severity": "degraded",
            "losses": ["pool-1"],
            "pending_gates": [
                {k: v for k, v in g.items() if k != "decided"}
                for g in self.gates.values()
                if not g["decided"]
            ],
            "timeline": self.timeline,
            "effects": [
                {
                    "op_id": "replica-loss/llm/p/deroute/pod-1",
                    "step": "deroute",
                    "activity": "deroute_replica",
                    "target": "llm/pod/pod-1",
                    "at": "2026-11-29T08:00:03Z",
                }
            ],
            "compensations": [{"op_id": "x", "done": False}],
            "runs": 1,
            "replicas_lost": 1,
        }

    @workflow.update(name=UPDATE_APPROVE)
    def approve(self, decision: ApprovalInput) -> dict[str, str]:
        gate = self.gates[decision.gate]
        gate["decided"] = True
        outcome = "approved" if decision.approve else "rejected"
        self.timeline.append(
            {
                "step": f"gate:{decision.gate}",
                "started_at": workflow.now().isoformat(),
                "ended_at": workflow.now().isoformat(),
                "outcome": f"{outcome} by {decision.approver}: {decision.reason}",
                "evidence": {},
            }
        )
        return {"gate": decision.gate, "outcome": outcome, "approver": decision.approver}

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
