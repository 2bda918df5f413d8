"""The external system a model's proposed actions land on, keyed by operation id.

Called by replicas (`fleetsim.replica`) when a completion carrying an `action` reaches
the point where the serving side executes its tool call: half-way through the stream,
so a replica that dies after it and a request replayed elsewhere execute it twice. That
is the runbook's action-execution boundary made countable: `duplicates` counts
operation ids executed more than once; with `dedupe=True` the sink behaves like an
operation-id ledger and suppresses the repeat instead (`suppressed`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ActionSink:
    dedupe: bool = False
    executions: Counter[str] = field(default_factory=Counter)
    suppressed: int = 0

    def execute(self, operation_id: str) -> bool:
        """Apply the action; False when the ledger suppressed a repeat."""
        if self.dedupe and self.executions[operation_id]:
            self.suppressed += 1
            return False
        self.executions[operation_id] += 1
        return True

    @property
    def executed(self) -> int:
        return sum(self.executions.values())

    @property
    def duplicates(self) -> int:
        """Executions beyond the first per operation id."""
        return sum(n - 1 for n in self.executions.values() if n > 1)

    def snapshot(self) -> dict[str, int]:
        return {
            "actions_executed": self.executed,
            "actions_duplicate": self.duplicates,
            "actions_suppressed": self.suppressed,
        }
