"""What the Kubernetes API was asked to change: every mutating request, counted, and holdable.

Used by `fleetsim/kube/server.py` (each POST, PUT, PATCH and DELETE that the store accepted
is recorded once, after it took effect) and served by `fleetsim/control.py`
(`GET /mutations`, `/mutations/holds`). Fault-injection tests count effects here, on the
fleet's side, rather than trusting the ledger that is under test: an effect applied twice
shows as two writes stamped with the same operation id on the same object.

A hold pauses the first mutating request that matches it, before the store sees it, until
the hold is released: a test holds a worker's write, kills the worker while its activity
is blocked on it, then releases the write, which then takes effect with nobody left to
record it (the "applied, not recorded" crash window).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OP_ANNOTATION = "fleetmend.io/op-id"  # the stamp fleetmend's effects write (activities/effects.py)
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON_PATCH_PATH = "/metadata/annotations/" + OP_ANNOTATION.replace("~", "~0").replace("/", "~1")
_HOLD_POLL_S = 0.02


def stamped_op_id(body: Any) -> str | None:
    """The op id a request body stamps: merge/strategic/apply bodies and JSON patches."""
    if isinstance(body, dict):
        metadata = body.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        value = annotations.get(OP_ANNOTATION) if isinstance(annotations, dict) else None
        return value if isinstance(value, str) else None
    if isinstance(body, list):
        for op in body:
            if not isinstance(op, dict) or op.get("op") not in ("add", "replace"):
                continue
            if op.get("path") == _JSON_PATCH_PATH and isinstance(op.get("value"), str):
                return str(op["value"])
            if op.get("path") == "/metadata/annotations" and isinstance(op.get("value"), dict):
                value = op["value"].get(OP_ANNOTATION)
                return value if isinstance(value, str) else None
    return None


def object_key(plural: str, namespace: str | None, name: str | None, sub: str | None) -> str:
    """`pods/serving/llama-0`, `deployments/serving/llama/scale`, `nodes/gpu-1`."""
    parts = [plural, *(p for p in (namespace, name, sub) if p)]
    return "/".join(parts)


@dataclass(frozen=True)
class Mutation:
    method: str
    object: str
    op_id: str | None


@dataclass
class Hold:
    """Pauses the first matching request: `op_id_contains` in its stamp, `method` if given."""

    id: int
    op_id_contains: str
    method: str | None = None
    holding: Mutation | None = None  # the request it caught, once caught
    released: bool = False

    def matches(self, mutation: Mutation) -> bool:
        if self.holding is not None or self.released:
            return False
        if self.method is not None and mutation.method != self.method:
            return False
        return mutation.op_id is not None and self.op_id_contains in mutation.op_id

    def describe(self) -> dict[str, Any]:
        caught = self.holding
        return {
            "id": self.id,
            "op_id_contains": self.op_id_contains,
            "method": self.method,
            "released": self.released,
            "holding": None
            if caught is None
            else {"method": caught.method, "object": caught.object, "op_id": caught.op_id},
        }


@dataclass
class MutationLog:
    """Thread-safe: the API server's loop records, the control app and tests read and hold."""

    _log: list[Mutation] = field(default_factory=list)
    _holds: dict[int, Hold] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, mutation: Mutation) -> None:
        with self._lock:
            self._log.append(mutation)

    def entries(self) -> list[Mutation]:
        with self._lock:
            return list(self._log)

    def writes(self, op_id: str) -> int:
        """Mutating requests stamped with exactly `op_id`."""
        return sum(1 for m in self.entries() if m.op_id == op_id)

    def summary(self) -> dict[str, Any]:
        """Counts by object, by op id, and by (op id, object): the last shows a duplicate."""
        entries = self.entries()
        by_pair = Counter(f"{m.op_id} {m.object}" for m in entries if m.op_id is not None)
        return {
            "total": len(entries),
            "by_object": dict(Counter(m.object for m in entries)),
            "by_op_id": dict(Counter(m.op_id for m in entries if m.op_id is not None)),
            "by_op_id_and_object": dict(by_pair),
            "unstamped": [
                {"method": m.method, "object": m.object} for m in entries if m.op_id is None
            ],
        }

    # ------------------------------------------------------------------ holds

    def hold(self, op_id_contains: str, *, method: str | None = None) -> Hold:
        if not op_id_contains:
            raise ValueError("op_id_contains: must not be empty (it would hold every write)")
        if method is not None and method.upper() not in MUTATING_METHODS:
            raise ValueError(f"method: {method!r} is not one of {sorted(MUTATING_METHODS)}")
        with self._lock:
            hold = Hold(next(self._ids), op_id_contains, method.upper() if method else None)
            self._holds[hold.id] = hold
            return hold

    def release(self, hold_id: int) -> Hold:
        with self._lock:
            hold = self._holds.get(hold_id)
            if hold is None:
                raise KeyError(hold_id)
            hold.released = True
            return hold

    def holds(self) -> list[Hold]:
        with self._lock:
            return list(self._holds.values())

    async def wait_if_held(self, mutation: Mutation) -> None:
        """Block the request while a hold caught it; the first matching hold catches it."""
        with self._lock:
            hold = next((h for h in self._holds.values() if h.matches(mutation)), None)
            if hold is None:
                return
            hold.holding = mutation
        while True:
            with self._lock:
                if hold.released:
                    return
            await asyncio.sleep(_HOLD_POLL_S)
