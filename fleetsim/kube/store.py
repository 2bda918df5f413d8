"""The fleet's object store: the in-memory etcd + API-server semantics behind fleetsim.

Called from the HTTP server (every request ends here), from the simulated
controllers, and from the fleet builder (the replica engineer's kubelet, faults,
scenarios), which use it directly instead of going through HTTP.

Objects are plain JSON dicts exactly as the API serves them. Every call returns a
deep copy, so callers may mutate what they get back, except reads with `copy=False`
(the controllers' hot path), which return the stored snapshot: stored objects are
replaced on every change, never edited in place, so such a snapshot stays valid but
must never be modified. Event objects are shared by all subscribers: read-only too. The semantics are the API
server's: uid/creationTimestamp/resourceVersion/generation are stamped here,
`metadata.resourceVersion` in an update is a precondition (409 Conflict when stale),
a no-op update does not bump resourceVersion, pods wait out their grace period
(`deletionTimestamp` set, the object stays until `remove`), and finalizers hold an
object until they are cleared. Errors are `fleetsim.kube.errors.ApiError`s.

Two ways to follow changes:

- `subscribe(callback)`: called after the mutation, outside the store lock, one event
  at a time in resourceVersion order. Callbacks may mutate the store (controllers
  do); the events that causes are delivered after the current one. Keep callbacks
  quick and non-blocking: they run on the thread that made the change (possibly
  the HTTP server's event loop). Hand long work (starting a process) to your own
  thread or loop.
- `tap(callback)`: called under the store lock at the moment of the change, for
  watch streams that must see every event in order; it must not call the store.

Resource names accept any spelling `fleetsim.kube.resources.resolve` does:
"pods", "Pod", "po", "deployments.apps", "endpointslices", "lws", ...

Example::

    store = Store(clock=ManualClock())
    store.create("nodes", {"metadata": {"name": "gpu-0"}, "status": {...}})
    pod = store.get("pods", "llm-0", namespace="serving")
    store.patch("pods", "llm-0", {"metadata": {"labels": {"serving": None}}},
                namespace="serving")                      # merge patch by default
    store.mutate("pods", "llm-0", lambda p: p["status"].update(podIP="127.10.0.7"),
                 namespace="serving")                     # read-modify-write, no 409
    unsubscribe = store.subscribe(lambda ev: print(ev.type, ev.name))
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fleetsim.clock import Clock, WallClock
from fleetsim.kube import defaults, patch as patching, validation
from fleetsim.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    conflict,
    not_found,
)
from fleetsim.kube.resources import Resource, resolve
from fleetsim.kube.selectors import FieldSelector, LabelSelector, parse_fields, parse_labels

log = logging.getLogger(__name__)

Obj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
# "all": Python callers may change anything. "main"/"status": the HTTP main resource
# ignores status changes and the /status subresource changes status only.
Scope = Literal["all", "main", "status"]

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet
_HISTORY = 2000


@dataclass(frozen=True)
class Event:
    """One change, as a watch stream reports it; `old` is the state before it."""

    type: EventType
    resource: Resource
    object: Obj
    old: Obj | None
    resource_version: int

    @property
    def name(self) -> str:
        return str(self.object["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.object["metadata"].get("namespace")
        return str(ns) if ns else None


Subscriber = Callable[[Event], None]
# Spelled out here because inside Store the name `list` is the method.
ObjList = list[Obj]
EventList = list[Event]


def clone(value: Any) -> Any:
    """Deep copy for JSON data: several times faster than copy.deepcopy, which matters
    because every read and every event hands out a private copy."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    return value


def _key(namespace: str | None, name: str) -> tuple[str, str]:
    return (namespace or "", name)


class Store:
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        epoch: datetime | None = None,
        seed: int = 0,
    ) -> None:
        self.clock: Clock = clock or WallClock()
        # Wall-clock instant that simulated time 0 stands for, for timestamps.
        self.epoch = epoch or datetime.now(UTC).replace(microsecond=0)
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._rv = 0
        self._history: collections.deque[Event] = collections.deque(maxlen=_HISTORY)
        self._subscribers: list[tuple[str | None, Subscriber]] = []
        self._taps: list[Subscriber] = []
        self._pending: collections.deque[Event] = collections.deque()
        self._dispatch_guard = threading.Lock()
        self._dispatching = False

    # ------------------------------------------------------------------ time
    def now(self) -> datetime:
        """The simulated instant, as a wall-clock datetime (for timestamps)."""
        return self.epoch + timedelta(seconds=self.clock.now())

    def timestamp(self) -> str:
        return self.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    # ------------------------------------------------------------------ reads
    def get(
        self,
        resource: str | Resource,
        name: str,
        *,
        namespace: str | None = None,
        copy: bool = True,
    ) -> Obj:
        """The object; `copy=False` returns the stored one, for read-only callers."""
        res = _resource(resource)
        with self._lock:
            obj = self._objects[res.key].get(_key(_ns(res, namespace), name))
            if obj is None:
                raise not_found(res.plural, name, res.group)
            return clone(obj) if copy else obj

    def backdate(
        self, resource: str | Resource, name: str, seconds: float, *, namespace: str | None = None
    ) -> None:
        """The simulator's own: make an object `seconds` older than now, as if it had been
        created before the fleet started (no client can; creationTimestamp is the server's)."""
        res = _resource(resource)
        created = (self.now() - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            obj = self._objects[res.key].get(_key(_ns(res, namespace), name))
            if obj is not None:
                obj["metadata"]["creationTimestamp"] = created

    def try_get(
        self,
        resource: str | Resource,
        name: str,
        *,
        namespace: str | None = None,
        copy: bool = True,
    ) -> Obj | None:
        res = _resource(resource)
        with self._lock:
            obj = self._objects[res.key].get(_key(_ns(res, namespace), name))
            if obj is None:
                return None
            return clone(obj) if copy else obj

    def list(
        self,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        copy: bool = True,
    ) -> list[Obj]:
        """Objects in creation order; `namespace=None` means all namespaces.
        `copy=False` returns the stored objects themselves, for read-only callers
        (the controllers): never modify them, change objects through the store."""
        return self.list_with_version(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            copy=copy,
        )[0]

    def list_with_version(
        self,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        copy: bool = True,
    ) -> tuple[ObjList, str]:
        res = _resource(resource)
        labels = _labels(label_selector)
        fields = _fields(res, field_selector)
        with self._lock:
            items = [
                clone(obj) if copy else obj
                for (ns, _), obj in self._objects[res.key].items()
                if (namespace is None or not res.namespaced or ns == namespace)
                and labels.matches(obj["metadata"].get("labels"))
                and fields.matches(obj)
            ]
            return items, str(self._rv)

    # ----------------------------------------------------------------- writes
    def create(
        self,
        resource: str | Resource,
        obj: Obj,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Store a new object; `metadata.generateName` is honoured. 409 if it exists.
        `dry_run`: validate and return what would be stored, storing nothing."""
        res = _resource(resource)
        new = clone(obj)
        meta = new.setdefault("metadata", {})
        new["apiVersion"] = res.api_version
        new["kind"] = res.kind
        if res.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") and meta["namespace"] != ns:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(res, meta.get("namespace"), meta["generateName"])
            defaults.apply(res, new)
            validation.validate(res, new, None)
            key = _key(meta.get("namespace"), meta["name"])
            if key in self._objects[res.key]:
                qualified = res.key if res.group else res.plural
                raise AlreadyExists(
                    f'{qualified} "{meta["name"]}" already exists',
                    name=meta["name"],
                    kind=res.plural,
                    group=res.group,
                )
            meta["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
            meta["creationTimestamp"] = self.timestamp()
            meta.pop("deletionTimestamp", None)
            if "spec" in new:
                meta["generation"] = 1
            if dry_run:
                return clone(new)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[res.key][key] = new
            self._emit("ADDED", res, new, None)
            result = clone(new)
        self._drain()
        return result

    def replace(
        self,
        resource: str | Resource,
        obj: Obj,
        *,
        namespace: str | None = None,
        scope: Scope = "all",
        dry_run: bool = False,
    ) -> Obj:
        """PUT: `obj` replaces the stored object. A resourceVersion in it must be current."""
        res = _resource(resource)
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise BadRequest("name is required for an update")
        ns = _ns(res, namespace or (obj.get("metadata") or {}).get("namespace"))
        return self._update(res, name, ns, lambda _old: clone(obj), scope, True, dry_run)

    def patch(
        self,
        resource: str | Resource,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = patching.MERGE,
        scope: Scope = "all",
        dry_run: bool = False,
    ) -> Obj:
        """PATCH with a decoded body. `patch_type`: a content type from `patch` or
        "merge" / "strategic" / "json". A resourceVersion in the patch is a precondition."""
        res = _resource(resource)
        ctype = {"merge": patching.MERGE, "strategic": patching.STRATEGIC, "json": patching.JSON}
        content_type = ctype.get(patch_type, patch_type)

        def apply(old: Obj) -> Obj:
            new = patching.apply_patch(old, body, content_type, custom=res.custom)
            if not isinstance(new, dict):
                raise Invalid("the patch did not produce an object")
            return new

        precondition = content_type != patching.JSON
        return self._update(res, name, _ns(res, namespace), apply, scope, precondition, dry_run)

    def mutate(
        self,
        resource: str | Resource,
        name: str,
        fn: Callable[[Obj], Obj | None],
        *,
        namespace: str | None = None,
    ) -> Obj:
        """Atomic read-modify-write for controllers and the kubelet: `fn` edits the
        object in place (or returns a new one); never a 409. No change, no new version."""
        res = _resource(resource)

        def apply(old: Obj) -> Obj:
            new = clone(old)
            returned = fn(new)
            return returned if returned is not None else new

        return self._update(res, name, _ns(res, namespace), apply, "all", False)

    def delete(
        self,
        resource: str | Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, str] | None = None,
        propagation_policy: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Delete like the API server. A bound pod with a grace period > 0, or any object
        with finalizers, only gets `deletionTimestamp` and stays until `remove` (the
        termination controller removes pods once their grace period has elapsed).
        Returns the object's last state."""
        res = _resource(resource)
        ns = _ns(res, namespace)
        with self._lock:
            old = self._objects[res.key].get(_key(ns, name))
            if old is None:
                raise not_found(res.plural, name, res.group)
            meta = old["metadata"]
            for field, value in (preconditions or {}).items():
                if value and meta.get(field) != value:
                    raise Conflict(
                        f"Precondition failed: {field} in precondition: {value}, "
                        f"{field} in object meta: {meta.get(field)}",
                        name=name,
                        kind=res.plural,
                        group=res.group,
                    )
            grace = self._grace(res, old, grace_period_seconds)
            if dry_run:
                return clone(old)
            if propagation_policy == "Orphan":
                self._orphan_dependents_locked(meta["uid"])
            if grace > 0 or meta.get("finalizers"):
                new = clone(old)
                nmeta = new["metadata"]
                current = nmeta.get("deletionGracePeriodSeconds")
                if nmeta.get("deletionTimestamp") is None or (
                    current is not None and grace < current
                ):
                    nmeta["deletionTimestamp"] = (self.now() + timedelta(seconds=grace)).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    )
                    nmeta["deletionGracePeriodSeconds"] = grace
                    self._commit(res, old, new)
                result = clone(self._objects[res.key][_key(ns, name)])
            else:
                result = self._remove_locked(res, ns, name)
        self._drain()
        return result

    def remove(
        self, resource: str | Resource, name: str, *, namespace: str | None = None
    ) -> Obj | None:
        """Take the object out now, whatever its grace period or finalizers: the
        kubelet finishing a pod's termination. None if it was already gone."""
        res = _resource(resource)
        with self._lock:
            if _key(_ns(res, namespace), name) not in self._objects[res.key]:
                return None
            result = self._remove_locked(res, _ns(res, namespace), name)
        self._drain()
        return result

    # ------------------------------------------------------------ following
    def subscribe(self, callback: Subscriber, *, resource: str | None = None) -> Callable[[], None]:
        """Call `callback(event)` after each change (of `resource` only, if given)."""
        entry = (_resource(resource).key if resource else None, callback)
        with self._lock:
            self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def tap(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(event)` under the store lock as each change happens."""
        with self._lock:
            self._taps.append(callback)

        def untap() -> None:
            with self._lock:
                if callback in self._taps:
                    self._taps.remove(callback)

        return untap

    def history_since(self, resource_version: int) -> EventList:
        """Events after `resource_version`; 410 Gone if they are no longer kept."""
        with self._lock:
            if resource_version > self._rv:
                return []
            oldest = self._history[0].resource_version if self._history else self._rv + 1
            if resource_version < oldest - 1:
                raise Gone(f"too old resource version: {resource_version} ({oldest - 1})")
            return [e for e in self._history if e.resource_version > resource_version]

    def watch_from(
        self, resource_version: int | None, callback: Subscriber
    ) -> tuple[EventList, Callable[[], None]]:
        """Atomically: the backlog a watch starting at `resource_version` must send
        first (synthetic ADDED for everything when None), and a tap for what follows."""
        with self._lock:
            if resource_version is None:
                backlog = [
                    Event("ADDED", _resource(key), clone(obj), None, self._rv)
                    for key, objs in self._objects.items()
                    for obj in objs.values()
                ]
            else:
                backlog = self.history_since(resource_version)
            return backlog, self.tap(callback)

    # ------------------------------------------------------------- internals
    def _update(
        self,
        res: Resource,
        name: str,
        namespace: str | None,
        change: Callable[[Obj], Obj],
        scope: Scope,
        check_version: bool,
        dry_run: bool = False,
    ) -> Obj:
        with self._lock:
            key = _key(namespace, name)
            old = self._objects[res.key].get(key)
            if old is None:
                raise not_found(res.plural, name, res.group)
            new = change(clone(old))
            meta = new.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise Invalid(f'{res.kind} "{name}" is invalid: metadata: must be an object')
            if meta.get("name", name) != name:
                raise BadRequest(
                    f"the name of the object ({meta.get('name')}) does not match the name "
                    f"on the URL ({name})"
                )
            wanted_rv = meta.get("resourceVersion")
            if check_version and wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise conflict(res.plural, name, res.group)
            if scope == "main" and "status" in old:
                new["status"] = clone(old["status"])
            elif scope == "main":
                new.pop("status", None)
            elif scope == "status":
                status = new.get("status")
                new = clone(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            # Fields the server owns: a client cannot change them.
            meta = new["metadata"]
            for field in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
                else:
                    meta.pop(field, None)
            meta["name"] = name
            if namespace:
                meta["namespace"] = namespace
            new["apiVersion"] = res.api_version
            new["kind"] = res.kind
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old:
                return clone(old)
            validation.validate(res, new, old)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 0)) + 1
            if dry_run:
                return clone(new)
            # The last finalizer went: the deletion that waited on it completes now
            # (a pod still inside its grace period waits for the termination controller).
            finalize = (
                bool(meta.get("deletionTimestamp"))
                and not meta.get("finalizers")
                and bool(old["metadata"].get("finalizers"))
                and not (res.graceful_delete and meta.get("deletionGracePeriodSeconds"))
            )
            self._commit(res, old, new)
            result = clone(new)
            if finalize:
                result = self._remove_locked(res, namespace, name)
        self._drain()
        return result

    def _commit(self, res: Resource, old: Obj, new: Obj) -> None:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[res.key][_key(new["metadata"].get("namespace"), new["metadata"]["name"])] = (
            new
        )
        self._emit("MODIFIED", res, new, old)

    def _remove_locked(self, res: Resource, namespace: str | None, name: str) -> Obj:
        old = self._objects[res.key].pop(_key(namespace, name))
        gone = clone(old)
        self._rv += 1
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._emit("DELETED", res, gone, old)
        return clone(gone)

    def _orphan_dependents_locked(self, owner_uid: str) -> None:
        for key, objs in self._objects.items():
            for obj in list(objs.values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    new = clone(obj)
                    new["metadata"]["ownerReferences"] = [
                        r for r in refs if r.get("uid") != owner_uid
                    ]
                    self._commit(_resource(key), obj, new)

    def _emit(self, type_: EventType, res: Resource, obj: Obj, old: Obj | None) -> None:
        event = Event(type_, res, clone(obj), clone(old), self._rv)
        self._history.append(event)
        for tap in list(self._taps):
            try:
                tap(event)
            except Exception:
                log.exception("store tap failed on %s %s", type_, event.name)
        self._pending.append(event)

    def _drain(self) -> None:
        """Deliver pending events to subscribers, one dispatcher at a time."""
        while True:
            with self._dispatch_guard:
                if self._dispatching:
                    return  # the dispatching thread (maybe this one, re-entered) delivers it
                self._dispatching = True
            try:
                while True:
                    with self._lock:
                        if not self._pending:
                            break
                        event = self._pending.popleft()
                        subscribers = list(self._subscribers)
                    for key, callback in subscribers:
                        if key is None or key == event.resource.key:
                            try:
                                callback(event)
                            except Exception:
                                log.exception(
                                    "subscriber %r failed on %s %s %s",
                                    callback,
                                    event.type,
                                    event.resource.plural,
                                    event.name,
                                )
            finally:
                with self._dispatch_guard:
                    self._dispatching = False
            with self._lock:
                if not self._pending:
                    return

    def _grace(self, res: Resource, obj: Obj, requested: int | None) -> int:
        if not res.graceful_delete:
            return 0
        # An unbound or finished pod has no kubelet to wait for: it goes at once.
        if not (obj.get("spec") or {}).get("nodeName"):
            return 0
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return max(0, int(requested))
        return int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    def _generate_name(self, res: Resource, namespace: str | None, prefix: str) -> str:
        for _ in range(100):
            name = prefix + "".join(self._random.choice(_NAME_ALPHABET) for _ in range(5))
            if _key(namespace, name) not in self._objects[res.key]:
                return name
        raise AlreadyExists(f"could not generate a unique name from {prefix!r}")

    def all_objects(self) -> Iterable[tuple[Resource, Obj]]:
        """Every stored object (copies), for dumps and debugging."""
        with self._lock:
            items = [
                (_resource(key), clone(obj))
                for key, objs in self._objects.items()
                for obj in objs.values()
            ]
        return items


def _resource(resource: str | Resource) -> Resource:
    return resource if isinstance(resource, Resource) else resolve(resource)


def _ns(res: Resource, namespace: str | None) -> str | None:
    if not res.namespaced:
        return None
    return namespace or "default"


def _labels(selector: str | LabelSelector | None) -> LabelSelector:
    if isinstance(selector, LabelSelector):
        return selector
    return parse_labels(selector)


def _fields(res: Resource, selector: str | FieldSelector | None) -> FieldSelector:
    if isinstance(selector, FieldSelector):
        return selector
    return parse_fields(selector, res.field_labels)
