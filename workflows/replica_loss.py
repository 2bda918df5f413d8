"""ReplicaLossWorkflow: the runbook "serving replica or GPU node lost", one run per incident.

Started by `worker/intake.py` with signal-with-start (id `replica-loss/{namespace}/{pool}`,
conflict policy USE_EXISTING), so every replica the pool loses while the incident is open
joins it as a `replica_lost` signal. The flow is the runbook's, in its order:

    Assess -> Deroute -> Protect -> In-flight -> Promote warm | Provision
           -> Reschedule -> Triage -> Ramp -> Verify -> Roll back

Each step is one method named with the runbook's words. Mutating steps register their
compensation on the saga before they act; a failed step, a cancellation or an operator's
abort unwinds the saga newest first. Risky acts wait on approval gates whose timeout
outcome is the safe one. All state lives in one `IncidentState`, carried whole by
continue-as-new.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ActivityConfig, ParentClosePolicy

from workflows import saga
from workflows.approvals import (
    ApprovalRejected,
    close_gate,
    decide_gate,
    open_gate,
    validate_approval,
)
from workflows.decisions import (
    check_blast_radius,
    hold_weights,
    next_cooldown,
    probe_floor,
    probe_passed,
    probe_share_from_rate,
    probe_weight,
    serving_capacity,
)
from workflows.opids import incident_id, operation_id
from workflows.reconcile import ReconcileWorkflow, reconcile_workflow_id
from workflows.retries import note_retry
from workflows.types import (
    QUERY_STATUS,
    SIGNAL_ABORT,
    SIGNAL_ALERT_RESOLVED,
    SIGNAL_APPROVE,
    SIGNAL_ATTEMPT_FAILED,
    SIGNAL_REPLICA_LOST,
    UPDATE_APPROVE,
    WORKFLOW_NAME,
    AbortRequest,
    AlertResolved,
    ApprovalInput,
    AttemptFailed,
    Effect,
    Facts,
    GateDecision,
    GateKind,
    IncidentInput,
    IncidentResult,
    IncidentState,
    IncidentStatus,
    LostReplica,
    PendingGate,
    ReconcileInput,
    ReplicaShare,
    TimelineEntry,
)

with workflow.unsafe.imports_passed_through():
    from activities.cluster import (
        ASSESS_OPTIONS,
        DEROUTE_OPTIONS,
        FORCE_DELETE_OPTIONS,
        LEAD_TIME_OPTIONS,
        PENDING_OPTIONS,
        PROMOTE_WARM_OPTIONS,
        READ_ROUTING_OPTIONS,
        RELOCATE_OPTIONS,
        REPLACEMENTS_OPTIONS,
        SCALE_OPTIONS,
        VERIFY_CAPACITY_OPTIONS,
        WARM_WORKLOAD_OPTIONS,
        AssessInput,
        ClusterActivities,
        DemoteWarmInput,
        DerouteInput,
        ForceDeleteInput,
        LeadTimeInput,
        LossReport,
        PendingInput,
        PromoteWarmInput,
        RelocateInput,
        Replacement,
        ReplacementsInput,
        RoutingStateInput,
        ScaleInput,
        ScaleResult,
        VerifyCapacityInput,
        WarmWorkloadInput,
    )
    from activities.common import PodRef, local_options
    from activities.gateway import (
        RESTORE_SHED_TIER_OPTIONS,
        RETRY_CONTRACT_OPTIONS,
        ROUTER_WEIGHTS_OPTIONS,
        SHED_TIER_OPTIONS,
        GatewayActivities,
        PressureSummary,
        RestoreShedTierInput,
        RetryContractInput,
        RouterWeightsInput,
        ShedTierInput,
        TierSpec,
    )
    from activities.metrics import (
        READ_PRESSURE_OPTIONS,
        READ_RATES_OPTIONS,
        VERIFY_SERVING_OPTIONS,
        MetricsActivities,
        PressureInput,
        RatesInput,
        VerifyServingInput,
    )
    from activities.notify import NOTIFY_OPTIONS, Fact, NotifyActivities, NotifyInput
    from activities.ramp import RAMP_OPTIONS, RampActivities, RampInput
    from activities.triage import TRIAGE_OPTIONS, TriageActivities, TriageInput
    from activities.warmup import WARMUP_OPTIONS, WarmupActivities, WarmupInput

R = TypeVar("R")

ASSESS_RATE_WINDOW_S = 1.0
ROLLOUT_NOT_CHURNED = (
    "not scaled: the losses share a rollout, and new replicas of its revision would fail "
    "the same way; revert the revision"
)
RAMP_DISABLED = (
    "disabled by the incident's options: a replacement takes an equal share the moment "
    "it is ready (the runbook's baseline)"
)
PATCH_RATES_AFTER_DEROUTE = "rates-after-deroute"

SA_ID = SearchAttributeKey.for_keyword("IncidentId")
SA_NAMESPACE = SearchAttributeKey.for_keyword("IncidentNamespace")
SA_POOL = SearchAttributeKey.for_keyword("IncidentPool")
SA_SEVERITY = SearchAttributeKey.for_keyword("IncidentSeverity")
SA_STEP = SearchAttributeKey.for_keyword("IncidentStep")


class IncidentAborted(Exception):
    """An operator sent `abort`: the running step is cancelled and the saga unwinds."""


def alert_key(loss: LostReplica) -> str:
    """The identity of one delivery of an alert: Alertmanager resends the same one."""
    if loss.fingerprint:
        started = loss.starts_at.isoformat() if loss.starts_at else ""
        return f"{loss.fingerprint}@{started}"
    return f"{loss.pod or ''}/{loss.node or ''}/{loss.fault}"


@workflow.defn(name=WORKFLOW_NAME)
class ReplicaLossWorkflow:
    @workflow.init
    def __init__(self, input: IncidentInput) -> None:
        self.input = input
        if input.state is not None:
            self.state = input.state
        else:
            now = workflow.now()
            wid = workflow.info().workflow_id
            self.state = IncidentState(
                incident_id=incident_id(wid, now),
                workflow_id=wid,
                namespace=input.namespace,
                pool=input.pool,
                dry_run=input.dry_run,
                started_at=now,
            )
        self._entry: TimelineEntry | None = None
        self._step_task: asyncio.Task[None] | None = None
        self._rates_after_deroute = False

    # ------------------------------------------------------------------ messages

    @workflow.signal(name=SIGNAL_REPLICA_LOST)
    def replica_lost(self, loss: LostReplica) -> None:
        key = alert_key(loss)
        # Idempotency guard: a resent alert is the same loss, not a new one.
        if key in self.state.seen_alerts:
            return
        self.state.seen_alerts.append(key)
        self.state.losses.append(loss)
        if len(self.state.losses) > 1:
            self._note(
                "loss-joined",
                "joined the running incident",
                {"pod": loss.pod, "node": loss.node, "fault": loss.fault, "alert": key},
            )

    @workflow.signal(name=SIGNAL_ALERT_RESOLVED)
    def alert_resolved(self, resolved: AlertResolved) -> None:
        # Recorded only: the alert clearing is not evidence that capacity is back.
        self.state.resolved.append(resolved)
        self._note(
            "alert-resolved",
            "recorded; recovery continues until verified",
            {"pod": resolved.pod, "node": resolved.node, "alert": resolved.fingerprint},
        )

    @workflow.signal(name=SIGNAL_ABORT)
    def abort(self, request: AbortRequest | None = None) -> None:
        if self.state.abort is None:
            self.state.abort = request or AbortRequest()

    @workflow.signal(name=SIGNAL_ATTEMPT_FAILED)
    def attempt_failed(self, report: AttemptFailed) -> None:
        # Evidence only: the retry itself is Temporal's, so no command depends on this.
        timeline = self.state.timeline
        running = [e for e in timeline if e.outcome == "running"]
        if running or timeline:
            note_retry((running or timeline)[-1].evidence, report)

    @workflow.update(name=UPDATE_APPROVE)
    def approve(self, request: ApprovalInput) -> GateDecision:
        gate = decide_gate(self.state, request, workflow.now())
        self._note_gate(gate.name)
        return GateDecision(
            gate=gate.name, outcome=gate.outcome or "rejected", approver=gate.approver or ""
        )

    @approve.validator
    def validate_approve(self, request: ApprovalInput) -> None:
        validate_approval(self.state, request)

    @workflow.signal(name=SIGNAL_APPROVE)
    def approve_signal(self, request: ApprovalInput) -> None:
        # A signal cannot be refused, so an invalid one is recorded and ignored.
        try:
            gate = decide_gate(self.state, request, workflow.now())
        except ApprovalRejected as rejected:
            self._note("approval-ignored", str(rejected), request.model_dump(mode="json"))
            return
        self._note_gate(gate.name)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> IncidentStatus:
        s = self.state
        return IncidentStatus(
            incident_id=s.incident_id,
            step=s.step,
            outcome=s.outcome,
            dry_run=s.dry_run,
            severity=s.facts.severity,
            losses=[loss.pod or loss.node or "?" for loss in s.losses],
            pending_gates=[
                PendingGate(
                    gate=g.name,
                    kind=g.kind,
                    would_do=g.would_do,
                    on_timeout=g.on_timeout,
                    deadline=g.deadline,
                    evidence=g.evidence,
                )
                for g in s.gates.values()
                if g.pending
            ],
            timeline=s.timeline,
            effects=s.effects,
            compensations=s.saga,
            runs=s.runs,
        )

    # ------------------------------------------------------------------ the run

    @workflow.run
    async def run(self, input: IncidentInput) -> IncidentResult:
        await workflow.wait_condition(
            lambda: bool(self.state.losses) or self.state.abort is not None
        )
        if self.state.runs == 1 and not self.state.timeline:
            # The per-incident flag may come from the alert's label rather than the start.
            self.state.dry_run = self.state.dry_run or any(
                loss.dry_run for loss in self.state.losses
            )
            self._note(
                "opened", "dry run" if self.state.dry_run else "live", {"limits": self._limits()}
            )
        self._publish_search_attributes()
        failure: BaseException | None = None
        try:
            await self._run_runbook()
            saga.discharge_all(self.state)
        except asyncio.CancelledError:
            self.state.outcome = "cancelled"
            await self._stop_step()
            await self._compensate("the incident workflow was cancelled")
            await self._close()
            raise
        except IncidentAborted:
            self.state.outcome = "aborted"
            req = self.state.abort or AbortRequest()
            await self._compensate(f"aborted by {req.requested_by or 'an operator'}: {req.reason}")
        except (ActivityError, ApplicationError, ChildWorkflowError) as err:
            failure = err
            self.state.outcome = "compensated"
            await self._compensate(f"step {self.state.step} failed: {_cause(err)}")
        await self._close()
        if failure is not None:
            raise ApplicationError(
                f"incident {self.state.incident_id}: step {self.state.step} failed "
                f"({_cause(failure)}); {self._compensated()} effect(s) compensated",
                non_retryable=True,
            ) from failure
        return IncidentResult(
            incident_id=self.state.incident_id,
            outcome=self.state.outcome,
            steps=list(self.state.completed_steps),
            effects=len([e for e in self.state.effects if not e.compensation]),
            compensated=self._compensated(),
            runs=self.state.runs,
        )

    async def _run_runbook(self) -> None:
        await self._step("assess", self.assess)
        await self._step("deroute", self.deroute)
        await self._step("protect", self.protect_survivors)
        await self._step("inflight", self.decide_inflight_requests)
        if workflow.patched("hold-cold-replacements"):
            await self._step("hold-replacements", self.hold_replacements)
        if self._warm_capacity_available():
            await self._step("promote-warm", self.promote_warm_capacity)
            # Incidents recorded before this step existed replay without it.
            if workflow.patched("rebuild-warm-floor"):
                await self._step("rebuild-warm-floor", self.rebuild_warm_floor)
        else:
            await self._step("provision", self.provision_capacity)
        await self._step("reschedule", self.reschedule_replacement)
        await self._step("triage", self.triage_hardware)
        await self._step("ramp", self.restore_traffic_gradually)
        await self._step("verify", self.verify_recovery)
        await self._step("roll-back", self.roll_back_emergency_measures)
        kept = not self.state.verified or self.state.keep_shedding_reason
        self.state.outcome = "recovered-measures-kept" if kept else "recovered"

    # ------------------------------------------------------------------ the runbook's steps

    async def assess(self) -> None:
        """Confirm it is capacity loss, size it, look for a common cause, read the warm floor."""
        s = self.state
        # Losses that join while the assessment runs are taken in at the next boundary.
        assessed = len(s.losses)
        request = AssessInput(
            namespace=s.namespace,
            pool=s.pool,
            losses=[
                LossReport(pod=loss.pod, node=loss.node, fault=loss.fault, starts_at=loss.starts_at)
                for loss in s.losses[:assessed]
            ],
        )
        # Incidents from this patch on run the reads ahead of the deroute as local
        # activities (no task-queue round trip each) and tell the channel once the
        # endpoint is out: the dead endpoint is more urgent than the message.
        deroute_first = workflow.patched("deroute-first")
        if deroute_first:
            # Every patch this path takes is marked before its first local activity: a patch
            # marker that follows a local activity's result inside one workflow task does
            # not replay (the SDK reports it as nondeterminism).
            workflow.patched(PATCH_RATES_AFTER_DEROUTE)
            result = await workflow.execute_local_activity_method(
                ClusterActivities.assess_loss, request, **local_options(ASSESS_OPTIONS)
            )
        else:
            result = await workflow.execute_activity_method(
                ClusterActivities.assess_loss, request, **ASSESS_OPTIONS
            )
        s.assessed_losses = assessed
        measured: dict[str, float | None] = {}
        # A lost replica is never measured and counts as the survivors' average, so the
        # share of capacity the deroute takes out is lost/pool whatever the survivors'
        # rates: incidents from this patch on decide it from the counts and read the rates
        # once the endpoint is out, instead of a second's window while it is still routed.
        self._rates_after_deroute = workflow.patched(PATCH_RATES_AFTER_DEROUTE)
        if not self._rates_after_deroute:
            rates = await workflow.execute_activity_method(
                MetricsActivities.read_replica_rates,
                RatesInput(targets=result.survivors, interval_s=ASSESS_RATE_WINDOW_S),
                **READ_RATES_OPTIONS,
            )
            measured = {r.pod: r.requests_per_s for r in rates.replicas}
        replicas = [*result.lost_replicas, *(p.name for p in result.survivors)]
        s.facts = Facts(
            pool_size=result.pool_size,
            severity=result.severity,
            lost_replicas=list(result.lost_replicas),
            lost_nodes=list(result.lost_nodes),
            lost_fraction=result.lost_fraction,
            survivors=[p.model_dump(mode="json") for p in result.survivors],
            capacity=serving_capacity(replicas, measured),
            warm_ready=[p.model_dump(mode="json") for p in result.warm_floor.ready],
            model=result.model or result.warm_floor.model,
            revision=result.revision or result.warm_floor.revision,
            workload_kind=result.workload_kind,
            workload_name=result.workload_name,
            common_causes=[c.cause for c in result.common_causes],
        )
        workflow.upsert_search_attributes([SA_SEVERITY.value_set(result.severity)])
        self._evidence(
            pool_size=result.pool_size,
            lost=result.lost_replicas,
            lost_fraction=result.lost_fraction,
            severity=result.severity,
            severity_reason=result.severity_reason,
            largest_domain_loss=result.largest_domain_loss,
            common_causes=[c.model_dump(mode="json") for c in result.common_causes],
            warm_floor=result.warm_floor.count,
            warm_excluded=result.warm_floor.excluded,
            capacity=s.facts.capacity,
        )
        s.severity_unannounced = True
        if not deroute_first:
            await self._announce_severity()

    async def _announce_severity(self) -> None:
        """Tell the channel what the assessment found, once per assessment."""
        s = self.state
        if not s.severity_unannounced:
            return
        s.severity_unannounced = False
        await self._notify(
            "severity",
            f"{s.namespace}/{s.pool}: {s.facts.severity}",
            [
                Fact(name="replicas lost", value=len(s.facts.lost_replicas)),
                Fact(name="pool size", value=s.facts.pool_size),
                Fact(name="fraction lost", value=round(s.facts.lost_fraction * 100, 1), unit="%"),
                Fact(name="warm floor", value=len(s.facts.warm_ready), unit="replicas"),
            ],
        )

    async def deroute(self) -> None:
        """Get the dead endpoints out of the routing set first; everything else is worse until then."""
        s = self.state
        pending = [
            p for p in s.facts.lost_replicas if p not in s.derouted and p not in s.held_routed
        ]
        if not pending:
            self._evidence(note="nothing left to deroute")
            await self._announce_severity()
            return
        request = RoutingStateInput(namespace=s.namespace, service=s.pool, pods=pending)
        if workflow.patched("deroute-first"):
            routing = await workflow.execute_local_activity_method(
                ClusterActivities.read_routing_state, request, **local_options(READ_ROUTING_OPTIONS)
            )
        else:
            routing = await workflow.execute_activity_method(
                ClusterActivities.read_routing_state, request, **READ_ROUTING_OPTIONS
            )
        self._evidence(
            publish_not_ready_addresses=routing.publish_not_ready_addresses,
            still_routable=routing.still_routable,
        )
        for pod in pending:
            if pod not in routing.still_routable:
                # Out of the ready set for now; the label still comes off, so a node that
                # comes back cannot route traffic to a replica nobody has qualified.
                self._note("deroute", "already out of the ready set", {"pod": pod})
            decision = check_blast_radius(
                s.facts.capacity, s.derouted, pod, self.input.blast_radius_fraction
            )
            self._note(
                "blast-radius", "within" if decision.allowed else "beyond", decision.model_dump()
            )
            if not decision.allowed:
                # The operator hears the severity before being asked about the deroute.
                await self._announce_severity()
            if not decision.allowed and not await self._gate(
                f"blast-radius/{pod}",
                "blast-radius",
                f"deroute {pod}: {decision.reason}",
                decision.model_dump(),
            ):
                s.held_routed.append(pod)
                continue
            # No compensation: a dead endpoint is never routed back, whatever happens next.
            result = await self._act(
                "deroute",
                pod,
                ClusterActivities.deroute_replica,
                functools.partial(DerouteInput, namespace=s.namespace, service=s.pool, pod=pod),
                DEROUTE_OPTIONS,
            )
            s.derouted.extend(p for p in [pod, *result.pods] if p not in s.derouted)
            self._evidence(
                **{
                    pod: {
                        "label_removed": result.label_removed,
                        "confirmed": result.confirmed,
                        "group": result.group,
                    }
                }
            )
            if not result.confirmed and not s.dry_run:
                await self._announce_severity()
                await self._force_endpoint_out(pod, still=routing.still_routable.get(pod, ""))
        await self._announce_severity()
        if self._rates_after_deroute:
            await self._measure_survivors()

    async def _measure_survivors(self) -> None:
        """The survivors' measured rates, for the record, once the dead endpoints are out."""
        s = self.state
        survivors = [PodRef.model_validate(p) for p in s.facts.survivors]
        rates = await workflow.execute_activity_method(
            MetricsActivities.read_replica_rates,
            RatesInput(targets=survivors, interval_s=ASSESS_RATE_WINDOW_S),
            **READ_RATES_OPTIONS,
        )
        measured = {r.pod: r.requests_per_s for r in rates.replicas}
        s.facts.capacity = serving_capacity(list(s.facts.capacity), measured)
        self._evidence(capacity_measured_after_deroute=s.facts.capacity)

    async def _force_endpoint_out(self, pod: str, still: str) -> None:
        """The last resort of the deroute step, only with an operator's approval."""
        s = self.state
        name = f"force-delete/{pod}"
        if not await self._gate(
            name,
            "force-delete",
            f"force-delete pod {pod} (grace period 0): its endpoint is still routable ({still}); "
            "its in-flight requests and post-mortem state are lost",
            {"pod": pod, "still_routable": still},
        ):
            return
        gate = s.gates[name]
        # No compensation: a deleted pod cannot be undeleted; its controller replaces it.
        await self._act(
            "deroute",
            f"{pod}/force-delete",
            ClusterActivities.force_delete_pod,
            lambda **op: ForceDeleteInput(
                **op,
                namespace=s.namespace,
                pod=pod,
                approved_by=gate.approver,
                approval_reason=gate.reason,
            ),
            FORCE_DELETE_OPTIONS,
        )

    async def protect_survivors(self) -> None:
        """Tighten admission before the shortfall spreads from one replica to all of them."""
        s = self.state
        survivors = [PodRef.model_validate(p) for p in s.facts.survivors]
        pressure = await workflow.execute_activity_method(
            MetricsActivities.read_pressure,
            PressureInput(targets=survivors),
            **READ_PRESSURE_OPTIONS,
        )
        healthy = max(len(survivors) - len(pressure.unreachable), 0)
        summary = PressureSummary(
            healthy_replicas=healthy,
            waiting_per_replica=pressure.total_waiting / healthy if healthy else 0.0,
            max_kv_cache_usage=pressure.max_kv_cache_usage,
            preemption_rate=pressure.total_preemption_rate,
            thrashing_replicas=len(pressure.thrashing),
            lost_fraction=s.facts.lost_fraction,
        )
        self._evidence(pressure=summary.model_dump(), thrashing=pressure.thrashing)
        warm = len(s.facts.warm_ready)
        forward = self._op("protect", "shed-tier")
        # Registered before acting; the prior tier is filled in once the gateway reports it.
        entry = saga.register(
            s,
            forward_op_id=forward,
            step="protect",
            target="shed-tier",
            undo=RestoreShedTierInput(
                **self._mutating(forward),
                namespace=s.namespace,
                pool=s.pool,
                warm_floor_ready=warm,
                warm_floor_target=warm,
                compensates=forward,
            ),
        )
        limit = self.input.auto_shed_tier_limit
        result = await self._act(
            "protect",
            "shed-tier",
            GatewayActivities.apply_shed_tier,
            lambda **op: ShedTierInput(
                **op,
                namespace=s.namespace,
                pool=s.pool,
                pressure=summary,
                max_level=limit,
                last_known_level=s.shed_level,
            ),
            SHED_TIER_OPTIONS,
        )
        saga.refine(
            entry,
            RestoreShedTierInput(
                **self._mutating(forward),
                namespace=s.namespace,
                pool=s.pool,
                restore_to=result.previous,
                warm_floor_ready=warm,
                warm_floor_target=warm,
                compensates=forward,
            ),
        )
        s.shed_previous = result.previous.model_dump(mode="json")
        s.shed_replaced[forward] = s.shed_previous
        s.shed_level = result.applied.level
        self._evidence(
            decision=result.decision.model_dump(), applied=result.applied.name, limit=limit
        )
        wanted = result.decision.wanted_level
        if not result.decision.capped or not await self._gate(
            f"shed-tier/D{wanted}",
            "shed-tier",
            f"tighten admission to D{wanted} beyond the automatic limit D{limit}: "
            + "; ".join(result.decision.reasons),
            result.decision.model_dump(),
        ):
            return
        escalation = self._op("protect", f"shed-tier/D{wanted}")

        def undo_escalation(restore_to: TierSpec) -> RestoreShedTierInput:
            return RestoreShedTierInput(
                **self._mutating(escalation),
                namespace=s.namespace,
                pool=s.pool,
                restore_to=restore_to,
                warm_floor_ready=warm,
                warm_floor_target=warm,
                compensates=escalation,
            )

        escalation_undo = None
        if workflow.patched("compensate-each-shed-tier"):
            # Its own undo, back to the tier beneath, so an abort or a failure records what
            # undid the escalation: the ledger reports an emergency measure without it as drift.
            escalation_undo = saga.register(
                s,
                forward_op_id=escalation,
                step="protect",
                target=f"shed-tier/D{wanted}",
                undo=undo_escalation(result.applied),
            )
        # Roll-back undoes each tier; before this patch the first tier's undo undid both.
        tighter = await self._act(
            "protect",
            f"shed-tier/D{wanted}",
            GatewayActivities.apply_shed_tier,
            lambda **op: ShedTierInput(
                **op,
                namespace=s.namespace,
                pool=s.pool,
                pressure=summary,
                max_level=wanted,
                last_known_level=s.shed_level,
            ),
            SHED_TIER_OPTIONS,
        )
        if escalation_undo is not None:
            saga.refine(escalation_undo, undo_escalation(tighter.previous))
        s.shed_replaced[escalation] = tighter.previous.model_dump(mode="json")
        s.shed_level = tighter.applied.level

    async def decide_inflight_requests(self) -> None:
        """Retry only what no caller has seen a byte of; end the rest with a terminal error."""
        s = self.state
        # No compensation: a request already retried or terminated cannot be un-retried.
        result = await self._act(
            "inflight",
            s.pool,
            GatewayActivities.apply_retry_contract,
            lambda **op: RetryContractInput(
                **op, namespace=s.namespace, pool=s.pool, lost_pods=s.facts.lost_replicas
            ),
            RETRY_CONTRACT_OPTIONS,
        )
        self._evidence(
            policy=result.policy,
            retried=result.total_retried,
            terminated=result.total_terminated,
            per_replica={
                pod: {"retried": c.retried, "terminated": c.terminated}
                for pod, c in sorted(result.per_replica.items())
            },
            counts_available=result.counts_available,
            counts_error=result.counts_error,
        )

    async def promote_warm_capacity(self) -> None:
        """Shift traffic onto loaded, registered spares of the exact model and revision."""
        s = self.state
        count = min(max(len(s.facts.lost_replicas), 1), len(s.facts.warm_ready))
        anticipated = [p["name"] for p in s.facts.warm_ready[:count]]
        forward = self._op("promote-warm", s.pool)
        entry = saga.register(
            s,
            forward_op_id=forward,
            step="promote-warm",
            target=s.pool,
            undo=DemoteWarmInput(
                **self._mutating(forward), namespace=s.namespace, pods=anticipated, mode="weight"
            ),
        )
        # Weight mode at the probe share: a spare is half-open until it served within the SLO.
        result = await self._act(
            "promote-warm",
            s.pool,
            ClusterActivities.promote_warm,
            lambda **op: PromoteWarmInput(
                **op,
                namespace=s.namespace,
                pool=s.pool,
                model=s.facts.model or "",
                revision=s.facts.revision or "",
                count=count,
                mode="weight",
                weight=probe_weight(self.input.probe_share),
            ),
            PROMOTE_WARM_OPTIONS,
        )
        promoted = [p.name for p in result.promoted]
        saga.refine(
            entry,
            DemoteWarmInput(
                **self._mutating(forward),
                namespace=s.namespace,
                pods=sorted(set(anticipated) | set(promoted)),
                mode="weight",
            ),
        )
        s.new_replicas = [p.model_dump(mode="json") for p in result.promoted]
        for pod in promoted:
            s.shares[pod] = ReplicaShare(
                pod=pod, cooldown_s=self.input.cooldown_s, state="half-open"
            )
        self._evidence(
            promoted=promoted, skipped=result.skipped, probe_share=self.input.probe_share
        )

    async def rebuild_warm_floor(self) -> None:
        """Scaling comes after promotion, and its job is to rebuild the warm floor just spent."""
        s = self.state
        promoted = [p["name"] for p in s.new_replicas]
        if not promoted:
            self._evidence(scale="nothing promoted: the warm floor is untouched")
            return
        owner = await workflow.execute_activity_method(
            ClusterActivities.find_warm_workload,
            WarmWorkloadInput(namespace=s.namespace, pods=promoted),
            **WARM_WORKLOAD_OPTIONS,
        )
        if owner.kind is None or owner.name is None:
            self._evidence(scale=f"cannot rebuild the warm floor: {owner.reason}")
            return
        kind, name = owner.kind, owner.name
        target = owner.replicas + len(promoted)
        result = await self._scale("rebuild-warm-floor", kind, name, target, owner.replicas)
        self._evidence(
            workload=f"{kind}/{name}", replicas_from=result.previous_replicas, replicas_to=target
        )

    async def hold_replacements(self) -> None:
        """A controller's replacement is ready before it is fast: hold it at the probe share
        from the start, so the router never gives it an equal share cold (ramp_back.py)."""
        s = self.state
        if not self.input.ramp:
            self._evidence(ramp=RAMP_DISABLED)
            return
        # A cold replica held at the floor share, then probed at what its warm-up measured
        # it serves, instead of a fixed share a very cold replica cannot keep up with.
        sized = workflow.patched("hold-share-from-measured-rate")
        found = await self._find_replacements()
        if not found:
            self._evidence(note="no replacement started yet")
            return
        # Nothing is measured before it is ready, and a fixed share can be more than a
        # cold replica serves: incidents from this patch on hold it at the floor.
        ceiling = self.input.probe_share
        hold = min(self.input.probe_share_floor, ceiling) if sized else ceiling
        weights = hold_weights(
            [p["name"] for p in s.facts.survivors], [r.pod.name for r in found], hold
        )
        await self._set_weights("hold-replacements", s.pool, weights)
        s.replacements = [r.pod.model_dump(mode="json") for r in found]
        for r in found:
            s.shares[r.pod.name] = ReplicaShare(
                pod=r.pod.name, cooldown_s=self.input.cooldown_s, state="half-open"
            )
        self._evidence(held=[r.pod.name for r in found], weights=weights)
        if sized:
            self._evidence(
                hold_share=hold,
                hold_share_why=(
                    f"not ready, nothing measured: the floor of {hold:.1%} until its warm-up "
                    f"measures what it serves (at most the probe share of "
                    f"{self.input.probe_share:.1%})"
                ),
            )

    async def _find_replacements(self) -> list[Replacement]:
        s = self.state
        known = [
            *(p["name"] for p in s.facts.survivors),
            *s.facts.lost_replicas,
            *(p["name"] for p in s.new_replicas),
        ]
        result = await workflow.execute_activity_method(
            ClusterActivities.find_replacements,
            ReplacementsInput(namespace=s.namespace, pool=s.pool, known=known),
            **REPLACEMENTS_OPTIONS,
        )
        return result.replacements

    async def _await_replacements(self) -> list[PodRef]:
        """The held replacements once Ready (they load weights first), bounded by
        `replacement_wait_s`; whichever are Ready then are ramped, the rest stay held."""
        s = self.state
        held = {p["name"] for p in s.replacements}
        poll = timedelta(seconds=max(0.5, self.input.ramp_step_interval_s / 4))
        wait = (
            self.input.replacement_wait_s
            if workflow.patched("hold-share-from-measured-rate")
            else self.input.gate_timeout_s
        )
        deadline = workflow.now() + timedelta(seconds=wait)
        while True:
            found = await self._find_replacements()
            ready = [r.pod for r in found if r.ready]
            stuck = {r.pod.name: r.stuck for r in found if r.stuck and not r.ready}
            waiting = [
                r.pod.name
                for r in found
                if r.pod.name in held and not r.ready and r.pod.name not in stuck
            ]
            if not waiting or workflow.now() >= deadline:
                break
            await workflow.sleep(poll)
        for pod in ready:
            s.shares.setdefault(
                pod.name,
                ReplicaShare(pod=pod.name, cooldown_s=self.input.cooldown_s, state="half-open"),
            )
        self._evidence(
            replacements_ready=[p.name for p in ready], still_loading=waiting, stuck=stuck
        )
        return ready

    async def provision_capacity(self) -> None:
        """No warm capacity: announce the lead time as a number, then scale only if approved."""
        s = self.state
        lead = await workflow.execute_activity_method(
            ClusterActivities.estimate_lead_time,
            LeadTimeInput(namespace=s.namespace, pool=s.pool),
            **LEAD_TIME_OPTIONS,
        )
        self._evidence(lead_time_s=lead.seconds, source=lead.source)
        await self._notify(
            "lead-time",
            f"{s.namespace}/{s.pool}: no warm capacity; recovery is {lead.seconds / 60:.0f} minutes out",
            [Fact(name="provisioning lead time", value=round(lead.seconds), unit="s")],
        )
        kind, name = s.facts.workload_kind, s.facts.workload_name
        if kind not in ("Deployment", "LeaderWorkerSet") or not name:
            self._evidence(scale="no scalable workload found for the pool")
            return
        if "rollout" in s.facts.common_causes and workflow.patched("rollout-not-churned"):
            # Replicas of a bad revision fail the same way: scaling only churns them. The fix
            # is reverting the revision the way it shipped (an operator's call).
            self._evidence(scale=ROLLOUT_NOT_CHURNED)
            await self._notify(
                "bad-rollout",
                f"{s.namespace}/{s.pool}: the losses share a rollout; nothing scaled: "
                f"revert {kind}/{name} to its previous revision",
                [Fact(name="replicas lost", value=len(s.facts.lost_replicas))],
            )
            return
        target = s.facts.pool_size + len(s.facts.lost_replicas)
        if not await self._gate(
            "provision",
            "provision",
            f"scale {kind}/{name} from {s.facts.pool_size} to {target} replicas: each new replica "
            f"takes about {lead.seconds:.0f}s ({lead.source}) to load weights and become ready",
            {"lead_time_s": lead.seconds, "replicas": target},
        ):
            return
        result = await self._scale("provision", kind, name, target, s.facts.pool_size)
        self._evidence(previous_replicas=result.previous_replicas, replicas=result.replicas)

    async def _scale(
        self, step: str, kind: str, name: str, replicas: int, undo_to: int
    ) -> ScaleResult:
        """Scale a workload through the ledger, its scale-back registered first."""
        s = self.state
        target = f"{kind.lower()}/{name}"
        forward = self._op(step, target)
        entry = saga.register(
            s,
            forward_op_id=forward,
            step=step,
            target=target,
            undo=ScaleInput(
                **self._mutating(forward),
                namespace=s.namespace,
                kind=kind,
                name=name,
                replicas=undo_to,
            ),
        )
        result = await self._act(
            step,
            target,
            ClusterActivities.scale_pool,
            lambda **op: ScaleInput(
                **op, namespace=s.namespace, kind=kind, name=name, replicas=replicas
            ),
            SCALE_OPTIONS,
        )
        # Undo to what the workload really had, read when the scale applied.
        saga.refine(
            entry,
            ScaleInput(
                **self._mutating(forward),
                namespace=s.namespace,
                kind=kind,
                name=name,
                replicas=result.previous_replicas,
            ),
        )
        return result

    async def reschedule_replacement(self) -> None:
        """A replacement needs an admissible allocation: tell fragmentation from shortage."""
        s = self.state
        result = await workflow.execute_activity_method(
            ClusterActivities.diagnose_pending,
            PendingInput(namespace=s.namespace, pool=s.pool),
            **PENDING_OPTIONS,
        )
        self._evidence(
            diagnosis=result.diagnosis,
            explanation=result.explanation,
            free_gpus_total=result.free_gpus_total,
            largest_free_block=result.largest_free_block,
            pending=[p.pod for p in result.pending],
        )
        if result.diagnosis == "fragmentation":
            await self._notify(
                "fragmentation",
                f"{s.namespace}/{s.pool}: replacement pending on fragmentation",
                [
                    Fact(name="free GPUs", value=result.free_gpus_total),
                    Fact(name="largest free block", value=result.largest_free_block, unit="GPUs"),
                ],
                text=result.explanation,
            )

    async def triage_hardware(self) -> None:
        """Only now, with the node out of the serving path, classify its fault and quarantine it."""
        s = self.state
        if "rollout" in s.facts.common_causes and workflow.patched("rollout-not-triaged"):
            # Pods of a bad revision crash on healthy nodes: cordoning them would take good
            # capacity away for a fault that is in the software.
            self._evidence(skipped="the losses share a rollout: no hardware to triage")
            return
        still_serving = {loss.node for loss in s.losses if loss.pod in s.held_routed and loss.node}
        for node in s.facts.lost_nodes:
            if node in s.triaged_nodes:
                continue
            if node in still_serving:
                self._note("triage", "skipped: the node still serves", {"node": node})
                continue
            known = [
                int(x)
                for loss in s.losses
                if loss.node == node
                for x in [loss.labels.get("xid", "")]
                if x.isdigit()
            ]
            # No compensation: a failed node stays cordoned until it passes qualification.
            try:
                result = await self._act(
                    "triage",
                    node,
                    TriageActivities.triage_node,
                    functools.partial(
                        TriageInput, node=node, serving_namespaces=[s.namespace], known_xids=known
                    ),
                    TRIAGE_OPTIONS,
                )
            except ActivityError as err:
                # The node serves again (the controller placed the replacement of an evicted
                # pod on it): triage refuses, and that is no reason to undo the recovery.
                if _refused(err) and workflow.patched("triage-refusal-skips-the-node"):
                    self._note("triage", "skipped: the node serves again", {"node": node})
                    s.nodes_serving_again.append(node)
                    continue
                raise
            s.triaged_nodes.append(node)
            self._evidence(
                **{
                    node: {
                        "disposition": result.disposition,
                        "runbook": result.runbook,
                        "reason": result.reason,
                    }
                }
            )

    async def restore_traffic_gradually(self) -> None:
        """A replacement is ready before it is fast: probe share first, then ramp by measured rate."""
        s = self.state
        new = [PodRef.model_validate(p) for p in s.new_replicas]
        if not self.input.ramp:
            self._evidence(ramp=RAMP_DISABLED)
            return
        if s.replacements:
            new += await self._await_replacements()
        if not new:
            self._evidence(note="no new replica to ramp")
            return
        warmed: list[str] = []
        if s.dry_run:
            # Probing needs real traffic; the ramp below records its intent with no pod warmed.
            self._evidence(
                would=f"warm up {', '.join(p.name for p in new)}, probe each at "
                f"{self.input.probe_share:.0%} share, then ramp by measured rate"
            )
        for replica in [] if s.dry_run else new:
            if await self._half_open(replica):
                warmed.append(replica.name)
        survivors = [PodRef.model_validate(p) for p in s.facts.survivors]
        forward = self._op("ramp", s.pool)
        entry = saga.register(
            s,
            forward_op_id=forward,
            step="ramp",
            target=s.pool,
            undo=RouterWeightsInput(**self._mutating(forward), namespace=s.namespace, weights={}),
        )
        result = await self._act(
            "ramp",
            s.pool,
            RampActivities.ramp_traffic,
            lambda **op: RampInput(
                **op,
                namespace=s.namespace,
                warm_replicas=survivors,
                new_replicas=new,
                warmed_pods=warmed,
                ttft_slo_s=self.input.ttft_slo_s,
                probe_share=self._ramp_probe_share(new),
                steps=self.input.ramp_steps,
                step_interval_s=self.input.ramp_step_interval_s,
            ),
            RAMP_OPTIONS,
        )
        saga.refine(
            entry,
            RouterWeightsInput(
                **self._mutating(forward),
                namespace=s.namespace,
                # A pod without a prior weight is left to the promote step's demotion.
                weights={p: w for p, w in result.previous_weights.items() if w is not None},
            ),
        )
        if result.keep_shedding:
            s.keep_shedding_reason = result.keep_shedding_reason or "a new replica's cache is cold"
        for pod in warmed:
            s.shares[pod].state = "full" if pod not in result.held_back else "held-back"
        self._evidence(
            completed=result.completed,
            steps=len(result.steps),
            final_weights=result.final_weights,
            held_back=result.held_back,
        )

    def _ramp_probe_share(self, new: list[PodRef]) -> float:
        """The ramp's lowest share for a new replica: the smallest probe share sized for
        them, or the configured one when none was sized (before the patch)."""
        sized = [
            share.probe_share
            for p in new
            if (share := self.state.shares.get(p.name)) is not None and share.probe_share
        ]
        return min(sized) if sized else self.input.probe_share

    async def _half_open(self, replica: PodRef) -> bool:
        """Seed 002, 8.3: probe share; pass -> full share; fail -> cool down, doubling, bounded."""
        s = self.state
        share = s.shares.setdefault(
            replica.name, ReplicaShare(pod=replica.name, cooldown_s=self.input.cooldown_s)
        )
        sized = workflow.patched("hold-share-from-measured-rate")
        warm = await workflow.execute_activity_method(
            WarmupActivities.warm_up_replica,
            WarmupInput(replica=replica, model=s.facts.model or ""),
            **WARMUP_OPTIONS,
        )
        self._note("warm-up", "passed" if warm.passed else "failed", warm.model_dump())
        if sized:
            share.probe_share = await self._size_probe_share(replica, warm.served_per_s)
            # A promoted spare is already at the configured share, a replacement at the floor.
            promoted = replica.name in {p["name"] for p in s.new_replicas}
            given = probe_weight(self.input.probe_share) if promoted else None
            if warm.passed and probe_weight(share.probe_share) != given:
                await self._set_weight(replica.name, probe_weight(share.probe_share), "probe-1")
        probe = self.input.probe_share if share.probe_share is None else share.probe_share
        passed = False
        while share.probes < self.input.max_probes:
            share.probes += 1
            if share.probes > 1 or not warm.passed:
                await self._set_weight(replica.name, 0, f"cool-{share.probes}")
                share.state = "cooling"
                await workflow.sleep(timedelta(seconds=share.cooldown_s))
                await self._set_weight(replica.name, probe_weight(probe), f"probe-{share.probes}")
                share.state = "half-open"
            rates = await workflow.execute_activity_method(
                MetricsActivities.read_replica_rates,
                RatesInput(targets=[replica], interval_s=self.input.probe_window_s),
                **READ_RATES_OPTIONS,
            )
            rate = rates.replicas[0] if rates.replicas else None
            passed, why = probe_passed(
                rate.requests_per_s if rate else None,
                rate.ttft_p99_s if rate else None,
                ttft_slo_s=self.input.ttft_slo_s,
            )
            self._note(
                "half-open",
                "passed" if passed else "failed",
                {
                    "pod": replica.name,
                    "probe": share.probes,
                    "cooldown_s": share.cooldown_s,
                    "why": why,
                },
            )
            if passed:
                share.cooldown_s = next_cooldown(
                    share.cooldown_s,
                    failed=False,
                    base_s=self.input.cooldown_s,
                    max_s=self.input.cooldown_max_s,
                )
                return True
            share.cooldown_s = next_cooldown(
                share.cooldown_s,
                failed=True,
                base_s=self.input.cooldown_s,
                max_s=self.input.cooldown_max_s,
            )
        share.state = "held-back"
        await self._set_weight(replica.name, 0, "held-back")
        return False

    async def _size_probe_share(self, replica: PodRef, served_per_s: float | None) -> float:
        """The probe share `replica` can serve: its warm-up's measured rate against the
        pool's traffic, read now (the survivors' rates and its own at the hold share)."""
        survivors = [PodRef.model_validate(p) for p in self.state.facts.survivors]
        rates = await workflow.execute_activity_method(
            MetricsActivities.read_replica_rates,
            RatesInput(targets=[*survivors, replica], interval_s=ASSESS_RATE_WINDOW_S),
            **READ_RATES_OPTIONS,
        )
        measured = [r.requests_per_s for r in rates.replicas if r.requests_per_s is not None]
        pool = sum(measured) if measured else None
        floor = probe_floor(
            self.input.probe_share_floor,
            pool_per_s=pool,
            window_s=self.input.probe_window_s,
            min_requests=self.input.min_probe_requests,
        )
        chosen = probe_share_from_rate(
            ceiling=self.input.probe_share,
            floor=min(floor, self.input.probe_share),
            served_per_s=served_per_s,
            pool_per_s=pool,
            headroom=self.input.probe_share_headroom,
        )
        self._note(
            "probe-share",
            f"{chosen.share:.1%} ({chosen.bound})",
            {
                "pod": replica.name,
                "share": round(chosen.share, 4),
                "weight": probe_weight(chosen.share),
                "served_per_s": served_per_s,
                "pool_per_s": pool,
                "why": chosen.reason,
            },
        )
        return chosen.share

    async def _set_weight(self, pod: str, weight: int, round_name: str) -> None:
        await self._set_weights("ramp", f"{pod}/{round_name}", {pod: weight})

    async def _set_weights(self, step: str, target: str, weights: dict[str, int]) -> None:
        """Router weights through the ledger, the previous weights registered as the undo."""
        s = self.state
        forward = self._op(step, target)
        entry = saga.register(
            s,
            forward_op_id=forward,
            step=step,
            target=target,
            undo=RouterWeightsInput(**self._mutating(forward), namespace=s.namespace, weights={}),
        )
        result = await self._act(
            step,
            target,
            GatewayActivities.set_router_weights,
            lambda **op: RouterWeightsInput(**op, namespace=s.namespace, weights=weights),
            ROUTER_WEIGHTS_OPTIONS,
        )
        saga.refine(
            entry,
            RouterWeightsInput(
                **self._mutating(forward),
                namespace=s.namespace,
                weights={p: w for p, w in result.previous.items() if w is not None},
            ),
        )

    async def verify_recovery(self) -> None:
        """Per pod, never by fleet average; and the warm floor must be back."""
        s = self.state
        survivors = [PodRef.model_validate(p) for p in s.facts.survivors]
        new = [PodRef.model_validate(p) for p in s.new_replicas]
        target_replicas = target_endpoints = s.facts.pool_size
        failed_nodes = [n for n in s.facts.lost_nodes if n not in s.nodes_serving_again]
        if workflow.patched("verify-counts-promoted-spares"):
            # A promoted spare serves in place of a lost replica but belongs to the warm
            # workload: the pool's own workload owes only the rest. Its stand-in for a pod
            # stranded on a dead node may never fit, and need not while the spare serves.
            target_replicas = max(0, s.facts.pool_size - len(s.new_replicas))
        failed_by_attempt: dict[str, list[str]] = {}
        for attempt in range(1, self.input.verify_attempts + 1):
            capacity = await workflow.execute_activity_method(
                ClusterActivities.verify_capacity,
                VerifyCapacityInput(
                    namespace=s.namespace,
                    pool=s.pool,
                    service=s.pool,
                    target_replicas=target_replicas,
                    target_endpoints=target_endpoints,
                    warm_floor_target=len(s.facts.warm_ready),
                    model=s.facts.model,
                    revision=s.facts.revision,
                    failed_nodes=failed_nodes,
                    present_before=[
                        *(str(p["name"]) for p in s.facts.survivors),
                        *s.facts.lost_replicas,
                    ],
                ),
                **VERIFY_CAPACITY_OPTIONS,
            )
            serving = await workflow.execute_activity_method(
                MetricsActivities.verify_serving,
                VerifyServingInput(
                    survivors=survivors,
                    new_replicas=new,
                    ttft_slo_s=self.input.ttft_slo_s,
                    waiting_baseline=self.input.waiting_baseline,
                    sample_interval_s=self.input.verify_window_s,
                ),
                **VERIFY_SERVING_OPTIONS,
            )
            checks = [*capacity.checks, *serving.checks]
            # The last attempt's numbers replace the earlier ones; what failed stays.
            failed_by_attempt[str(attempt)] = sorted(c.name for c in checks if not c.passed)
            self._evidence(
                attempt=attempt,
                checks={c.name: {"passed": c.passed, **c.evidence} for c in checks},
                failed_by_attempt=dict(failed_by_attempt),
            )
            s.misplaced = [
                str(pod)
                for c in capacity.checks
                if c.name == "replacement-placement" and not c.passed
                for pod in c.evidence.get("misplaced", [])
            ]
            s.verified = capacity.passed and serving.passed
            if s.verified or s.dry_run:
                return
            if attempt < self.input.verify_attempts:
                # A replacement can still be loading weights when the ramp ends.
                await workflow.sleep(timedelta(seconds=self.input.verify_interval_s))

    async def roll_back_emergency_measures(self) -> None:
        """Undo the emergency tightening only once the warm floor is restored; fix misplacements."""
        s = self.state
        for pod in s.misplaced:
            # Cordon first, then delete: deleting alone lets the controller recreate it in place.
            await self._act(
                "roll-back",
                f"{pod}/relocate",
                ClusterActivities.relocate_misplaced_pod,
                functools.partial(RelocateInput, namespace=s.namespace, pod=pod),
                RELOCATE_OPTIONS,
            )
        if not s.verified:
            self._evidence(
                kept="shedding stays: the warm floor is not restored", level=s.shed_level
            )
            return
        restore_to = TierSpec.model_validate(s.shed_previous) if s.shed_previous else TierSpec()
        warm = len(s.facts.warm_ready)
        # Every tier applied (the automatic one, and any escalation a gate approved) gets its
        # own rollback, so the ledger links each measure to what undid it: no drift.
        measures = [self._op("protect", "shed-tier")]
        if workflow.patched("roll-back-every-shed-tier"):
            measures += [
                e.op_id
                for e in s.effects
                if e.activity == "apply_shed_tier"
                and not e.compensation
                and e.op_id not in measures
            ]
        if workflow.patched("roll-back-only-applied-tiers"):
            # No tier applied (the automatic limit is 0 and its gate timed out): nothing to
            # undo, and a rollback of an operation the ledger never saw is refused.
            applied = {e.op_id for e in s.effects if e.activity == "apply_shed_tier"}
            measures = [m for m in measures if m in applied]
        newest_first = workflow.patched("roll-back-tiers-newest-first")
        if newest_first:
            # As a saga unwinds: the escalation back to the automatic tier, then that tier
            # back to what was there before the incident; each write a real change.
            measures.reverse()
        for measure in measures:
            suffix = measure.removeprefix(self._op("protect", "shed-tier"))
            replaced = s.shed_replaced.get(measure) if newest_first else None
            await self._act(
                "roll-back",
                f"shed-tier{suffix}",
                GatewayActivities.restore_shed_tier,
                functools.partial(
                    RestoreShedTierInput,
                    namespace=s.namespace,
                    pool=s.pool,
                    restore_to=TierSpec.model_validate(replaced) if replaced else restore_to,
                    warm_floor_ready=warm,
                    warm_floor_target=warm,
                    compensates=measure,
                ),
                RESTORE_SHED_TIER_OPTIONS,
            )
        for measure in [self._op("protect", "shed-tier"), *measures]:
            saga.discharge(s, measure)
        s.shed_level = restore_to.level
        await self._notify(
            "recovered",
            f"{s.namespace}/{s.pool}: capacity verified, emergency shedding rolled back",
            [Fact(name="replicas lost", value=len(s.facts.lost_replicas))],
        )

    # ------------------------------------------------------------------ machinery

    async def _step(self, name: str, method: Callable[[], Awaitable[None]]) -> None:
        """Run one runbook step: timeline entry, abort race, late losses, continue-as-new."""
        s = self.state
        if name in s.completed_steps:
            await self._take_in_late_losses()
            return
        if s.abort is not None:
            raise IncidentAborted()
        s.step = name
        self._publish_step()
        self._entry = TimelineEntry(step=name, started_at=workflow.now(), dry_run=s.dry_run)
        s.timeline.append(self._entry)
        entry = self._entry
        try:
            await self._race_abort(method)
        except (Exception, asyncio.CancelledError) as err:
            entry.ended_at = workflow.now()
            entry.outcome = (
                "aborted" if isinstance(err, IncidentAborted) else f"failed: {_cause(err)}"
            )
            raise
        entry.ended_at = workflow.now()
        if entry.outcome == "running":
            entry.outcome = "would have acted (dry run)" if s.dry_run else "done"
        s.completed_steps.append(name)
        await self._take_in_late_losses()
        await self._continue_as_new_if_suggested()

    async def _race_abort(self, method: Callable[[], Awaitable[None]]) -> None:
        self._step_task = asyncio.create_task(_as_coroutine(method))
        aborted = asyncio.create_task(workflow.wait_condition(lambda: self.state.abort is not None))
        try:
            await workflow.wait([self._step_task, aborted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if not self._step_task.done():
            await self._stop_step()
            raise IncidentAborted()
        task, self._step_task = self._step_task, None
        task.result()

    async def _stop_step(self) -> None:
        """Cancel the running step and wait for its activity to acknowledge, before unwinding."""
        task, self._step_task = self._step_task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ActivityError, ApplicationError):
            await task

    async def _take_in_late_losses(self) -> None:
        """A loss that joined after the assessment is assessed and derouted before going on."""
        s = self.state
        if "deroute" not in s.completed_steps or s.assessed_losses >= len(s.losses):
            return
        for name, method in (("assess", self.assess), ("deroute", self.deroute)):
            self._entry = TimelineEntry(step=name, started_at=workflow.now(), dry_run=s.dry_run)
            s.timeline.append(self._entry)
            await self._race_abort(method)
            self._entry.ended_at = workflow.now()
            self._entry.outcome = "late loss taken in"

    async def _continue_as_new_if_suggested(self) -> None:
        info = workflow.info()
        limit = self.input.max_history_events
        if not info.is_continue_as_new_suggested() and not (
            limit is not None and info.get_current_history_length() > limit
        ):
            return
        # An approval or a signal half-handled would be lost with the old run.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.runs += 1
        self._note(
            "continue-as-new",
            f"run {self.state.runs}",
            {"events": info.get_current_history_length()},
        )
        workflow.continue_as_new(self.input.model_copy(update={"state": self.state}))

    async def _act(
        self,
        step: str,
        target: str,
        activity: Callable[..., R],
        build: Callable[..., BaseModel],
        options: ActivityConfig,
    ) -> R:
        """One mutating activity: operation id, dry-run flag, and an effect in the timeline."""
        op_id = self._op(step, target)
        request = build(**self._mutating(op_id))
        result: Any = await workflow.execute_activity_method(activity, request, **options)  # type: ignore[call-overload]
        attempt = int(getattr(result, "attempt", 1))
        if attempt > 1 and self._entry is not None:
            self._entry.retried[target] = attempt
        self.state.effects.append(
            Effect(
                op_id=op_id,
                step=step,
                activity=getattr(activity, "__name__", str(activity)),
                target=target,
                dry_run=self.state.dry_run,
                applied_now=getattr(result, "applied_now", None),
                at=workflow.now(),
                attempt=attempt,
            )
        )
        if self.state.dry_run:
            self._note(
                step,
                "would apply (dry run)",
                {"op_id": op_id, "intent": request.model_dump(mode="json")},
            )
        return result  # type: ignore[no-any-return]

    async def _gate(
        self, name: str, kind: GateKind, would_do: str, evidence: dict[str, Any]
    ) -> bool:
        """Wait for an operator; on timeout the gate's safe default (never the risky act) holds."""
        s = self.state
        gate = open_gate(
            s,
            name=name,
            kind=kind,
            would_do=would_do,
            configured_timeout_s=self.input.gate_timeout_s,
            now=workflow.now(),
            evidence=evidence,
        )
        if gate.pending and s.dry_run:
            # A dry run shows the question it would have asked and takes the safe default.
            close_gate(gate, "dry-run", workflow.now())
            self._note_gate(name)
        elif gate.pending:
            self._note(
                "gate-opened",
                name,
                {"would_do": would_do, "on_timeout": gate.on_timeout, "timeout_s": gate.timeout_s},
            )
            try:
                await workflow.wait_condition(
                    lambda: not gate.pending or s.abort is not None,
                    timeout=timedelta(seconds=gate.timeout_s),
                )
            except TimeoutError:
                close_gate(gate, "timed-out", workflow.now())
            if s.abort is not None:
                close_gate(gate, "aborted", workflow.now())
            if gate.outcome in ("timed-out", "aborted"):
                self._note_gate(name)
        return gate.outcome == "approved"

    async def _notify(self, milestone: str, title: str, facts: list[Fact], text: str = "") -> None:
        """Tell the incident channel; a channel that is down never stops the recovery."""
        try:
            await self._act(
                "notify",
                milestone,
                NotifyActivities.notify_incident_channel,
                lambda **op: NotifyInput(**op, title=title, facts=facts, text=text),
                NOTIFY_OPTIONS,
            )
        except ActivityError as err:
            self._note("notify", f"not delivered: {_cause(err)}", {"title": title})

    async def _compensate(self, why: str) -> None:
        """Unwind the saga newest first; a failed undo is recorded and the rest still run."""
        s = self.state
        s.step = "compensate"
        self._publish_step()
        entry = TimelineEntry(
            step="compensate", started_at=workflow.now(), dry_run=s.dry_run, evidence={"why": why}
        )
        s.timeline.append(entry)
        failed: list[str] = []
        for comp in list(saga.to_unwind(s)):
            if saga.is_noop(comp):
                comp.discharged = True
                continue
            request, options = saga.call_of(comp)
            try:
                result: Any = await workflow.execute_activity(
                    comp.activity, request, result_type=None, **options
                )
            except ActivityError as err:
                comp.error = _cause(err)
                failed.append(comp.op_id)
                continue
            comp.done = True
            applied = result.get("applied_now") if isinstance(result, dict) else None
            attempt = int(result.get("attempt", 1)) if isinstance(result, dict) else 1
            if attempt > 1:
                entry.retried[comp.target] = attempt
            s.effects.append(
                Effect(
                    op_id=comp.op_id,
                    step="compensate",
                    activity=comp.activity,
                    target=comp.target,
                    dry_run=s.dry_run,
                    applied_now=applied,
                    compensation=True,
                    at=workflow.now(),
                    attempt=attempt,
                )
            )
        entry.ended_at = workflow.now()
        entry.outcome = f"{self._compensated()} undone" + (
            f", {len(failed)} failed" if failed else ""
        )
        entry.evidence["failed"] = failed

    async def _close(self) -> None:
        """Close the incident with its reconciliation: "no duplicated effects" is verification."""
        s = self.state
        s.step = "closed"
        self._publish_step()
        rid = reconcile_workflow_id(s.incident_id)
        evidence: dict[str, Any] = {"reconciliation": rid}
        try:
            # Abandoned, so cancelling the incident never cancels the check of what it did.
            report = await workflow.execute_child_workflow(
                ReconcileWorkflow.run,
                ReconcileInput(incident_id=s.incident_id, namespace=s.namespace, pool=s.pool),
                id=rid,
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
            evidence["findings"] = [f.model_dump() for f in report.findings]
        except ChildWorkflowError as err:
            # The scheduled reconciliation sweeps this incident again; closing must not wait.
            evidence["error"] = _cause(err)
        self._note("closed", s.outcome, evidence)
        await workflow.wait_condition(workflow.all_handlers_finished)

    # ------------------------------------------------------------------ small helpers

    def _warm_capacity_available(self) -> bool:
        f = self.state.facts
        return bool(f.warm_ready) and bool(f.model) and bool(f.revision)

    def _op(self, step: str, target: str) -> str:
        return operation_id(self.state.incident_id, step, target)

    def _mutating(self, op_id: str) -> dict[str, Any]:
        return {
            "op_id": op_id,
            "incident_id": self.state.incident_id,
            "dry_run": self.state.dry_run,
        }

    def _compensated(self) -> int:
        return len([c for c in self.state.saga if c.done])

    def _limits(self) -> dict[str, Any]:
        i = self.input
        return {
            "blast_radius_fraction": i.blast_radius_fraction,
            "auto_shed_tier_limit": i.auto_shed_tier_limit,
            "gate_timeout_s": i.gate_timeout_s,
        }

    def _evidence(self, **values: Any) -> None:
        if self._entry is not None:
            self._entry.evidence.update(values)

    def _note(self, step: str, outcome: str, evidence: dict[str, Any]) -> None:
        now = workflow.now()
        self.state.timeline.append(
            TimelineEntry(
                step=step,
                started_at=now,
                ended_at=now,
                outcome=outcome,
                evidence=evidence,
                dry_run=self.state.dry_run,
            )
        )

    def _note_gate(self, name: str) -> None:
        g = self.state.gates[name]
        self._note(
            "gate",
            f"{name}: {g.outcome}",
            {
                "approver": g.approver,
                "reason": g.reason,
                "would_do": g.would_do,
                "on_timeout": g.on_timeout,
            },
        )

    def _publish_search_attributes(self) -> None:
        s = self.state
        workflow.upsert_search_attributes(
            [
                SA_ID.value_set(s.incident_id),
                SA_NAMESPACE.value_set(s.namespace),
                SA_POOL.value_set(s.pool),
                SA_SEVERITY.value_set(s.facts.severity),
                SA_STEP.value_set(s.step),
            ]
        )

    def _publish_step(self) -> None:
        updates: list[SearchAttributeUpdate[Any]] = [SA_STEP.value_set(self.state.step)]
        workflow.upsert_search_attributes(updates)


async def _as_coroutine(method: Callable[[], Awaitable[None]]) -> None:
    await method()


def _refused(err: BaseException) -> bool:
    """The activity declined on purpose (activities.errors.RefusedError), not failed."""
    cause = err.__cause__
    return isinstance(cause, ApplicationError) and cause.type == "RefusedError"


def _cause(err: BaseException) -> str:
    """The innermost message: an ActivityError wraps the activity's own ApplicationError."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
