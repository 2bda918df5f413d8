"""The Kubernetes HTTP API over the fleet's Store: what the official client and kubectl talk to.

Called from tests, drills and `python -m fleetsim serve`. `build_app(cluster)` is
the Starlette (ASGI) app; `KubeServer` runs it with uvicorn either in a background
thread (`start()` / `stop()`, for synchronous callers) or in the caller's asyncio
loop (`await serve_async()` / `await aclose()`); `.url` is the address to put in a
kubeconfig or `Configuration(host=...)`. Starting the server also starts the
cluster's timers on the server's loop unless the cluster already keeps time.

Routes: discovery (`/api`, `/apis`, `/api/v1`, `/apis/G/V`, `/version`), then
`/api/v1/...` and `/apis/G/V/...` for every resource in `resources.py`, namespaced
and cluster-wide, with the `status` and `scale` subresources and pod `eviction`.
A GET whose Accept header asks for `as=Table` gets a meta.k8s.io Table. `?watch=1`
streams newline-delimited watch events. Every failure is a `Status` body with the
code a real API server uses, and an exception in a handler is a 500 Status, never
a dead server. Resource requests pass through `chaos.py`, which injects API faults
while a window is open, and every mutating request that took effect is counted in
`mutations` (`fleetsim/kube/mutations.py`), where a test can also hold one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fleetsim.kube import discovery, patch as patching, rbac, tables
from fleetsim.kube.chaos import Chaos, RequestInfo, verb_of
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    conflict,
    invalid,
    not_found,
)
from fleetsim.kube.mutations import (
    MUTATING_METHODS,
    Mutation,
    MutationLog,
    object_key,
    stamped_op_id,
)
from fleetsim.kube.resources import Resource, lookup
from fleetsim.kube.selectors import FieldSelector, LabelSelector, parse_fields, parse_labels
from fleetsim.kube.store import Event, Obj, Scope, Store

log = logging.getLogger(__name__)

_NOT_FOUND = "the server could not find the requested resource"
_RETURNS_OBJECT_ON_DELETE = ("pods", "services")


@dataclass(frozen=True)
class Target:
    res: Resource
    namespace: str | None
    name: str | None
    sub: str | None


def _json(body: Any, code: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=code)


def _error(exc: ApiError) -> JSONResponse:
    return _json(exc.status(), exc.code)


def _success(res: Resource, name: str, uid: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": res.group, "kind": res.plural, "uid": uid},
    }


def _dry_run(request: Request) -> bool:
    value = request.query_params.get("dryRun")
    if value is None or value == "":
        return False
    if value != "All":
        raise BadRequest(f"Unsupported dry run option: {value!r} (only All)")
    return True


def _scope(t: Target) -> Scope:
    if t.sub == "status":
        return "status"
    return "main" if "status" in t.res.subresources else "all"


def _object_name(t: Target, body: Any) -> str | None:
    # A create names its object in the body, not the URL.
    if t.name is not None or not isinstance(body, dict):
        return t.name
    name = (body.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


def _wants_table(request: Request) -> bool:
    # kubectl lists Table first and plain JSON as the fallback; any client that
    # accepts a Table at all gets one, as the real server prefers the first match.
    accept = request.headers.get("accept", "")
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def _scale(obj: Obj, res: Resource) -> Obj:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = spec.get("selector") or {}
    if res.kind == "LeaderWorkerSet":
        selector_text = status.get("hpaPodSelector", "")
    else:
        labels = selector.get("matchLabels") or {}
        selector_text = ",".join(f"{k}={v}" for k, v in labels.items())
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": int(spec.get("replicas", 1))},
        "status": {"replicas": int(status.get("replicas", 0)), "selector": selector_text},
    }


class Api:
    """Request handling, separate from routing so it can be read top to bottom."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        token: str | None = None,
        authorizer: rbac.Authorizer | None = None,
        chaos: Chaos | None = None,
        mutations: MutationLog | None = None,
    ) -> None:
        self.cluster = cluster
        self.store: Store = cluster.store
        self.token = token
        # With an authorizer, its tokens are the only credentials and RBAC decides.
        self.authorizer = authorizer
        self.chaos = chaos or Chaos()
        self.mutations = mutations if mutations is not None else MutationLog()
        self._closing = asyncio.Event()
        self._watch_queues: set[asyncio.Queue[Event | None]] = set()

    # ---------------------------------------------------------------- routing
    def routes(self) -> list[Route]:
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        return [
            Route("/version", self._guard(self.version)),
            Route("/healthz", self._guard(self.ok)),
            Route("/readyz", self._guard(self.ok)),
            Route("/livez", self._guard(self.ok)),
            Route("/openapi/v3", self._guard(self.openapi_root)),
            Route("/openapi/v3/{gv:path}", self._guard(self.openapi_group_version)),
            Route("/api", self._guard(self.api_versions)),
            Route("/apis", self._guard(self.api_groups)),
            Route("/api/{rest:path}", self._guard(self.core), methods=methods),
            Route("/apis/{rest:path}", self._guard(self.grouped), methods=methods),
        ]

    def _authenticated(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        if self.authorizer is not None:
            scheme, _, token = auth.partition(" ")
            user = self.authorizer.user(token) if scheme == "Bearer" else None
            request.state.user = user
            return user is not None
        return self.token is None or auth == f"Bearer {self.token}"

    def _authorize(self, request: Request, t: Target | None) -> None:
        """403 unless RBAC allows the request (no-op without an authorizer)."""
        if self.authorizer is None:
            return
        user = str(request.state.user)
        if t is None:
            req = rbac.Request(user=user, verb=request.method.lower(), path=request.url.path)
        else:
            verb = rbac.request_verb(
                request.method,
                named=t.name is not None,
                watch=request.query_params.get("watch") in ("1", "true", "True"),
            )
            req = rbac.Request(
                user=user,
                verb=verb,
                api_group=t.res.group,
                resource=t.res.plural,
                subresource=t.sub,
                namespace=t.namespace,
                name=t.name,
            )
        if self.authorizer.allows(req):
            return
        if t is None:
            raise Forbidden(rbac.forbidden_message(req))
        raise Forbidden(
            rbac.forbidden_message(req), name=t.name, kind=t.res.plural, group=t.res.group
        )

    def _guard(self, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            if not self._authenticated(request):
                body = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "Unauthorized",
                    "reason": "Unauthorized",
                    "code": 401,
                }
                return _json(body, 401)
            try:
                if not request.url.path.startswith(("/api/", "/apis/")):
                    self._authorize(request, None)
                response: Response = await handler(request)
                return response
            except ApiError as exc:
                return _error(exc)
            except Exception as exc:
                log.exception("fleetsim API handler failed: %s %s", request.method, request.url)
                err = ApiError(f"Internal error occurred: {exc}")
                return _error(err)

        return endpoint

    async def ok(self, request: Request) -> Response:
        return Response("ok", media_type="text/plain")

    async def version(self, request: Request) -> Response:
        return _json(discovery.version())

    async def openapi_root(self, request: Request) -> Response:
        return _json(discovery.openapi_v3_root())

    async def openapi_group_version(self, request: Request) -> Response:
        parts = request.path_params["gv"].strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) == 2:
            doc = discovery.openapi_v3_group_version("", parts[1])
        elif parts[:1] == ["apis"] and len(parts) == 3:
            doc = discovery.openapi_v3_group_version(parts[1], parts[2])
        else:
            doc = None
        if doc is None:
            raise NotFound(_NOT_FOUND)
        return _json(doc)

    async def api_versions(self, request: Request) -> Response:
        return _json(discovery.api_versions(f"{request.url.hostname}:{request.url.port}"))

    async def api_groups(self, request: Request) -> Response:
        return _json(discovery.api_group_list())

    async def core(self, request: Request) -> Response:
        parts = [p for p in request.path_params["rest"].split("/") if p]
        if not parts:
            return await self.api_versions(request)
        return await self._resource_request(request, "", parts[0], parts[1:])

    async def grouped(self, request: Request) -> Response:
        parts = [p for p in request.path_params["rest"].split("/") if p]
        if len(parts) < 2:
            raise NotFound(_NOT_FOUND)
        return await self._resource_request(request, parts[0], parts[1], parts[2:])

    async def _resource_request(
        self, request: Request, group: str, version: str, parts: list[str]
    ) -> Response:
        if not parts:
            if request.method != "GET":
                raise MethodNotAllowed(
                    "the server does not allow this method on the requested resource"
                )
            doc = discovery.api_resource_list(group, version)
            if doc is None:
                raise NotFound(_NOT_FOUND)
            return _json(doc)
        target = self._target(group, version, parts)
        self._authorize(request, target)
        watch = request.query_params.get("watch") in ("1", "true", "True")
        info = RequestInfo(
            verb=verb_of(request.method, named=target.name is not None, watch=watch),
            resource=target.res.plural,
            subresource=target.sub,
            namespace=target.namespace,
            name=target.name,
            dry_run=bool(request.query_params.get("dryRun")),
        )
        return await self.chaos.handle(info, request.body, lambda: self._answer(request, target))

    async def _answer(self, request: Request, target: Target) -> Response:
        try:
            if request.method not in MUTATING_METHODS or request.query_params.get("dryRun"):
                return await self._dispatch(request, target)
            return await self._counted(request, target)
        except ApiError as exc:
            return _error(exc)

    async def _counted(self, request: Request, target: Target) -> Response:
        body = await self._body_or_none(request)
        mutation = Mutation(
            request.method,
            object_key(target.res.plural, target.namespace, _object_name(target, body), target.sub),
            stamped_op_id(body),
        )
        await self.mutations.wait_if_held(mutation)
        response = await self._dispatch(request, target)
        if response.status_code < 400:
            self.mutations.record(mutation)
        return response

    async def _body_or_none(self, request: Request) -> Any:
        # Counting never fails a request: a bad body gets its 400 from the verb itself.
        try:
            return await self._body(request)
        except BadRequest:
            return None

    async def _dispatch(self, request: Request, target: Target) -> Response:
        method = request.method
        if target.name is None:
            if method == "GET":
                return await self.list_or_watch(request, target)
            if method == "POST":
                return await self.create(request, target)
            raise MethodNotAllowed(
                "the server does not allow this method on the requested resource"
            )
        if target.sub not in (None, "status", "scale", "eviction"):
            raise NotFound(_NOT_FOUND)
        if target.sub == "eviction":
            if method != "POST":
                raise MethodNotAllowed("only POST is allowed on pods/eviction")
            return await self.evict(request, target)
        if method == "GET":
            return await self.get(request, target)
        if method == "PUT":
            return await self.replace(request, target)
        if method == "PATCH":
            return await self.patch(request, target)
        if method == "DELETE" and target.sub is None:
            return await self.delete(request, target)
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    def _target(self, group: str, version: str, parts: list[str]) -> Target:
        namespace: str | None = None
        if (
            parts[0] == "namespaces"
            and len(parts) >= 3
            and lookup(group, version, parts[2]) is not None
        ):
            namespace, parts = parts[1], parts[2:]
        res = lookup(group, version, parts[0])
        if res is None or len(parts) > 3:
            raise NotFound(_NOT_FOUND)
        if res.namespaced is False and namespace is not None:
            raise NotFound(_NOT_FOUND)
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        if sub is not None and sub not in res.subresources:
            raise NotFound(_NOT_FOUND)
        return Target(res, namespace, name, sub)

    # ------------------------------------------------------------------ verbs
    async def list_or_watch(self, request: Request, t: Target) -> Response:
        q = request.query_params
        labels = parse_labels(q.get("labelSelector"))
        fields = parse_fields(q.get("fieldSelector"), t.res.field_labels)
        if q.get("watch") in ("1", "true", "True"):
            return self.watch(request, t, labels, fields)
        items, rv = self.store.list_with_version(
            t.res, namespace=t.namespace, label_selector=labels, field_selector=fields
        )
        if _wants_table(request):
            return _json(
                tables.table(
                    t.res,
                    items,
                    now=self.store.now(),
                    resource_version=rv,
                    include_object=q.get("includeObject", "PartialObjectMetadata"),
                )
            )
        for item in items:
            # List items carry no kind/apiVersion on a real server; the list does.
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return _json(
            {
                "kind": f"{t.res.kind}List",
                "apiVersion": t.res.api_version,
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    async def get(self, request: Request, t: Target) -> Response:
        assert t.name is not None
        obj = self.store.get(t.res, t.name, namespace=t.namespace)
        if t.sub == "scale":
            return _json(_scale(obj, t.res))
        if _wants_table(request) and t.sub is None:
            return _json(
                tables.table(
                    t.res,
                    [obj],
                    now=self.store.now(),
                    resource_version=obj["metadata"]["resourceVersion"],
                    include_object=request.query_params.get(
                        "includeObject", "PartialObjectMetadata"
                    ),
                )
            )
        return _json(obj)

    async def _body(self, request: Request) -> Any:
        raw = await request.body()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"error decoding request body: {exc}") from exc

    def _require_namespace(self, t: Target) -> None:
        if (
            t.res.namespaced
            and t.namespace
            and self.store.try_get("namespaces", t.namespace) is None
        ):
            raise not_found("namespaces", t.namespace)

    async def create(self, request: Request, t: Target) -> Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("the body of the request is not an object")
        kind = body.get("kind")
        if kind and kind != t.res.kind:
            raise BadRequest(
                f"the kind of the object ({kind}) does not match the URL ({t.res.kind})"
            )
        self._require_namespace(t)
        if "status" in t.res.subresources:
            # A real server ignores client-supplied status on create.
            body.pop("status", None)
        meta = body.get("metadata") or {}
        meta.pop("resourceVersion", None)
        created = self.store.create(t.res, body, namespace=t.namespace, dry_run=_dry_run(request))
        return _json(created, 201)

    async def replace(self, request: Request, t: Target) -> Response:
        assert t.name is not None
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("the body of the request is not an object")
        if t.sub == "scale":
            return _json(self._set_scale(t, body, dry_run=_dry_run(request)))
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != t.name:
            raise BadRequest(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({t.name})"
            )
        meta["name"] = t.name
        scope = _scope(t)
        updated = self.store.replace(
            t.res, body, namespace=t.namespace, scope=scope, dry_run=_dry_run(request)
        )
        return _json(updated)

    async def patch(self, request: Request, t: Target) -> Response:
        assert t.name is not None
        body = await self._body(request)
        if body is None:
            raise BadRequest("the patch body is empty")
        content_type = request.headers.get("content-type", "")
        if t.sub == "scale":
            current = _scale(self.store.get(t.res, t.name, namespace=t.namespace), t.res)
            patched = patching.apply_patch(current, body, content_type, custom=False)
            return _json(self._set_scale(t, patched, dry_run=_dry_run(request)))
        scope = _scope(t)
        updated = self.store.patch(
            t.res,
            t.name,
            body,
            namespace=t.namespace,
            patch_type=content_type,
            scope=scope,
            dry_run=_dry_run(request),
        )
        return _json(updated)

    def _set_scale(self, t: Target, scale: Any, *, dry_run: bool = False) -> Obj:
        assert t.name is not None
        replicas = ((scale or {}).get("spec") or {}).get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise invalid(
                "Scale",
                t.name,
                [("spec.replicas", f"Invalid value: {replicas!r}: must be an integer")],
                "autoscaling",
            )
        wanted_rv = ((scale or {}).get("metadata") or {}).get("resourceVersion")
        obj = self.store.get(t.res, t.name, namespace=t.namespace)
        if wanted_rv and wanted_rv != obj["metadata"]["resourceVersion"]:
            raise conflict(t.res.plural, t.name, t.res.group)
        body = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"replicas": replicas},
        }
        try:
            updated = self.store.patch(
                t.res, t.name, body, namespace=t.namespace, patch_type="merge", dry_run=dry_run
            )
        except Conflict:
            raise conflict(t.res.plural, t.name, t.res.group) from None
        return _scale(updated, t.res)

    def _delete_options(self, request: Request, body: Any) -> dict[str, Any]:
        opts = dict(body) if isinstance(body, dict) else {}
        q = request.query_params
        if "gracePeriodSeconds" in q:
            try:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError as exc:
                raise BadRequest(f"invalid gracePeriodSeconds: {q['gracePeriodSeconds']}") from exc
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        return opts

    async def delete(self, request: Request, t: Target) -> Response:
        assert t.name is not None
        opts = self._delete_options(request, await self._body(request))
        grace = opts.get("gracePeriodSeconds")
        result = self.store.delete(
            t.res,
            t.name,
            namespace=t.namespace,
            grace_period_seconds=int(grace) if grace is not None else None,
            preconditions=opts.get("preconditions"),
            propagation_policy=opts.get("propagationPolicy"),
            dry_run=_dry_run(request) or opts.get("dryRun") == ["All"],
        )
        pending = bool(result["metadata"].get("deletionTimestamp")) and (
            self.store.try_get(t.res, t.name, namespace=t.namespace) is not None
        )
        code = 202 if pending else 200
        if t.res.plural in _RETURNS_OBJECT_ON_DELETE:
            return _json(result, code)
        return _json(_success(t.res, t.name, result["metadata"].get("uid", "")), code)

    async def evict(self, request: Request, t: Target) -> Response:
        assert t.name is not None
        body = await self._body(request) or {}
        opts = (body.get("deleteOptions") or {}) if isinstance(body, dict) else {}
        grace = opts.get("gracePeriodSeconds")
        self.store.delete(
            t.res,
            t.name,
            namespace=t.namespace,
            grace_period_seconds=int(grace) if grace is not None else None,
        )
        return _json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            201,
        )

    # ------------------------------------------------------------------ watch
    def watch(
        self, request: Request, t: Target, labels: LabelSelector, fields: FieldSelector
    ) -> Response:
        q = request.query_params
        rv_param = q.get("resourceVersion")
        start_rv = int(rv_param) if rv_param and rv_param != "0" else None
        timeout = float(q.get("timeoutSeconds") or 0) or None
        as_table = _wants_table(request)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        def tap(event: Event) -> None:
            # A stream whose loop has gone (server stopped mid-watch) just stops listening.
            if loop.is_closed():
                untap()
                return
            loop.call_soon_threadsafe(queue.put_nowait, event)

        backlog, untap = self.store.watch_from(start_rv, tap)
        self._watch_queues.add(queue)

        def relevant(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if t.namespace and obj["metadata"].get("namespace") != t.namespace:
                return False
            return labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)

        def frame(event: Event) -> bytes | None:
            if event.resource.key != t.res.key:
                return None
            now_in = relevant(event.object) if event.type != "DELETED" else False
            was_in = relevant(event.old)
            if event.type == "ADDED" and now_in:
                kind = "ADDED"
            elif event.type == "DELETED" and relevant(event.object):
                kind = "DELETED"
            elif event.type == "MODIFIED" and now_in:
                kind = "MODIFIED" if was_in else "ADDED"
            elif event.type == "MODIFIED" and was_in:
                kind = "DELETED"  # it left the selection, as the watch cache reports
            else:
                return None
            body: Obj = event.object
            if as_table:
                # `kubectl get -w` watches in Table form: one row per event.
                body = tables.table(
                    t.res,
                    [event.object],
                    now=self.store.now(),
                    resource_version=event.object["metadata"]["resourceVersion"],
                    include_object=q.get("includeObject", "PartialObjectMetadata"),
                )
            return (json.dumps({"type": kind, "object": body}) + "\n").encode()

        async def stream() -> AsyncIterator[bytes]:
            event: Event | None
            # timeoutSeconds is the client's network timeout: wall time, not fleet time.
            deadline = time.monotonic() + timeout if timeout else None
            try:
                for past in backlog:
                    data = frame(past)
                    if data:
                        yield data
                while not self._closing.is_set():
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        return
                    try:
                        event = await asyncio.wait_for(queue.get(), timeout=wait)
                    except TimeoutError:
                        return
                    if event is None:
                        return
                    data = frame(event)
                    if data:
                        yield data
            finally:
                untap()
                self._watch_queues.discard(queue)

        return StreamingResponse(stream(), media_type="application/json")

    def close_watches(self) -> None:
        """End every open watch stream and every injected hang (server shutdown)."""
        self._closing.set()
        self.chaos.release()
        for queue in list(self._watch_queues):
            queue.put_nowait(None)


def build_app(
    cluster: Cluster,
    *,
    token: str | None = None,
    authorizer: rbac.Authorizer | None = None,
    chaos: Chaos | None = None,
    mutations: MutationLog | None = None,
) -> Starlette:
    api = Api(cluster, token=token, authorizer=authorizer, chaos=chaos, mutations=mutations)
    app = Starlette(routes=api.routes())
    app.state.api = api
    return app


class KubeServer:
    """uvicorn running the API on 127.0.0.1 (an ephemeral port unless given)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        authorizer: rbac.Authorizer | None = None,
        chaos: Chaos | None = None,
    ) -> None:
        self.cluster = cluster
        self.app = build_app(cluster, token=token, authorizer=authorizer, chaos=chaos)
        self.token = token
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def mutations(self) -> MutationLog:
        """Every mutating request that took effect, and the holds a test set."""
        return self._api.mutations

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the server (and, unless the cluster had one, its timers) runs on."""
        loop = getattr(self, "_loop", None)
        if loop is None:
            raise RuntimeError("the server is not running")
        return loop

    # ----------------------------------------------------------- in a thread
    def start(self, timeout: float = 10.0) -> KubeServer:
        def run() -> None:
            asyncio.run(self._serve())

        self._thread = threading.Thread(target=run, name="fleetsim-kube-api", daemon=True)
        self._thread.start()
        # Waiting for a socket to listen is wall time, whatever the fleet clock says.
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fleetsim API server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._api.close_watches)
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # ------------------------------------------------------- in the caller's loop
    async def serve_async(self) -> KubeServer:
        self._task = asyncio.get_running_loop().create_task(self._serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("fleetsim API server did not start")
            await asyncio.sleep(0.01)
        return self

    async def aclose(self) -> None:
        self._api.close_watches()
        self._server.should_exit = True
        if self._task is not None:
            await self._task
            self._task = None

    @property
    def chaos(self) -> Chaos:
        """Fault windows and the mutation log of this server (`fleetsim.kube.chaos`)."""
        return self._api.chaos

    @property
    def _api(self) -> Api:
        api: Api = self.app.state.api
        return api

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        owns_timers = not self.cluster.timers.attached
        if owns_timers:
            self.cluster.start(self._loop)
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            if owns_timers:
                self.cluster.stop()

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> KubeServer:
        return await self.serve_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
