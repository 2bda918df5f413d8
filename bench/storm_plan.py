"""The alert storm's notifications, as two Alertmanager replicas would send them.

Pure: `storm_plan` returns every notification with its send time, so `storm_bench` only
plays it and `tests/bench` checks its arithmetic without a server. Per pool, one alert
group of `ALERTNAMES` (one alert each, all about the pool's first replica); every round
re-sends the whole group (Alertmanager's group_interval: repeats), from each of the HA
replicas (the same notification twice: HA duplicates); later rounds carry some alerts as
resolved (send_resolved). Rounds are spread evenly over the duration, pools staggered
within a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from worker.drill import webhook_payload

ALERTNAMES = (
    "FleetmendGPUXidError",
    "FleetmendPodOOMKilled",
    "FleetmendPodNotReady",
    "FleetmendReplicaNoTraffic",
)
# Alert i resolves from this fraction of the rounds on (None: firing to the end).
RESOLVES_AT = (None, None, 2 / 3, 5 / 6)
HA_STAGGER_S = 0.02


@dataclass(frozen=True)
class Target:
    namespace: str
    pool: str
    pod: str


@dataclass(frozen=True)
class Notification:
    at_s: float
    target: Target
    sender: int  # which Alertmanager replica sent it
    round: int
    payload: dict[str, Any]

    @property
    def alerts(self) -> int:
        return len(self.payload["alerts"])


def rounds_for(total_alerts: int, pools: int, senders: int) -> int:
    """Rounds so that pools x senders x len(ALERTNAMES) x rounds == total_alerts exactly."""
    per_round = pools * senders * len(ALERTNAMES)
    if pools < 1 or senders < 1 or total_alerts < per_round or total_alerts % per_round:
        raise ValueError(
            f"total_alerts ({total_alerts}) must be a positive multiple of pools ({pools}) x "
            f"senders ({senders}) x alerts per group ({len(ALERTNAMES)}) = {per_round}"
        )
    return total_alerts // per_round


def resolved_from(alert: int, rounds: int) -> int | None:
    """First round in which alert `alert` is resolved (at least the last round)."""
    fraction = RESOLVES_AT[alert]
    if fraction is None:
        return None
    return min(rounds - 1, int(fraction * rounds))


def _alert(target: Target, name: str, starts_at: datetime) -> dict[str, Any]:
    return {
        "labels": {
            "alertname": name,
            "severity": "critical",
            "namespace": target.namespace,
            "pool": target.pool,
            "pod": target.pod,
        },
        "annotations": {"summary": f"{name} on {target.pod}"},
        "startsAt": starts_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def group_payload(
    target: Target, round_: int, rounds: int, started: datetime, sender: int
) -> dict[str, Any]:
    alerts = [_alert(target, name, started) for name in ALERTNAMES]
    payload = webhook_payload(alerts)
    payload["externalURL"] = f"http://alertmanager-{sender}.invalid"
    firing = 0
    for i, alert in enumerate(payload["alerts"]):
        resolves = resolved_from(i, rounds)
        if resolves is not None and round_ >= resolves:
            alert["status"] = "resolved"
            alert["endsAt"] = (started + timedelta(seconds=resolves)).strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            firing += 1
    payload["status"] = "firing" if firing else "resolved"
    return payload


def storm_plan(
    targets: list[Target],
    *,
    total_alerts: int,
    duration_s: float,
    started: datetime,
    senders: int = 2,
) -> list[Notification]:
    """Every notification of the storm, sorted by send time; exactly `total_alerts` alerts."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    rounds = rounds_for(total_alerts, len(targets), senders)
    interval = duration_s / rounds
    plan = []
    for r in range(rounds):
        for p, target in enumerate(targets):
            base = r * interval + p * interval / len(targets)
            for sender in range(senders):
                plan.append(
                    Notification(
                        at_s=base + sender * HA_STAGGER_S,
                        target=target,
                        sender=sender,
                        round=r,
                        payload=group_payload(target, r, rounds, started, sender),
                    )
                )
    plan.sort(key=lambda n: n.at_s)
    return plan
