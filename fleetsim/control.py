"""A small HTTP control surface for a running fleet: counters, alerts, faults on demand.

Served by `python -m fleetsim serve` (its URL is printed at start) so a person running
a manual drill can read the router's counters and inject a fault into the live fleet;
usable in-process too (`control_app(fleet)` is plain ASGI). Bad input never stops the
fleet: a malformed fault or scenario gets 422 with one line per bad field, named by
its dotted path, and a fault aimed at something that is not there gets 409.

    GET  /counters            router and action counters (`Fleet.snapshot()`)
    GET  /alerts              alerts fired so far, Alertmanager's POST shape
    GET  /metrics             the router's per-replica retried/terminated counters (Prometheus)
    POST /faults              a fault (JSON or YAML body), e.g. {"kind": "fake-alive", ...}
    POST /scenarios/validate  a scenario (YAML or JSON body): 200 or 422 naming fields
    GET  /kube-api            API fault windows (`fleetsim.kube.chaos`) and mutation counts
    DELETE /kube-api          close every API fault window now
    GET  /mutations           mutating Kubernetes API requests, by object and by op-id stamp
    GET  /mutations/holds     the holds set and the request each one holds
    POST /mutations/holds     {"op_id_contains": "...", "method": "PATCH"}: hold the next match
    DELETE /mutations/holds/{id}  release it: the held request then takes effect

An API fault is a fault like the others: `POST /faults {"kind": "kube-api", "api": {...}}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fleetsim.faults import FaultError
from fleetsim.router_metrics import router_registry
from fleetsim.scenario import Fault, ScenarioError, parse_scenario, safe_yaml

if TYPE_CHECKING:
    from fleetsim.fleet import Fleet


def _field_errors(err: ValidationError) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in err.errors()
    ]


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return safe_yaml(raw.decode() or "null")
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"body is neither JSON nor YAML: {err}") from None


def control_app(fleet: Fleet) -> Starlette:
    registry = router_registry(lambda: fleet.counters)

    async def counters(request: Request) -> JSONResponse:
        return JSONResponse(fleet.snapshot())

    async def alerts(request: Request) -> JSONResponse:
        return JSONResponse(fleet.alerts())

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def faults(request: Request) -> JSONResponse:
        try:
            data = await _body(request)
        except ValueError as err:
            return JSONResponse({"errors": [str(err)]}, status_code=400)
        data = {"at": 0, **data} if isinstance(data, dict) else data
        try:
            fault = Fault.model_validate(data)
        except ValidationError as err:
            return JSONResponse({"errors": _field_errors(err)}, status_code=422)
        t = fault.target
        if t.pool is not None:
            try:
                fleet.scenario.pool(t.namespace or "", t.pool)
            except KeyError:
                return JSONResponse(
                    {"errors": [f"target.pool: no pool {t.namespace}/{t.pool} in this fleet"]},
                    status_code=422,
                )
        try:
            injected = fleet.inject(fault)
        except FaultError as err:
            return JSONResponse({"errors": [str(err)]}, status_code=409)
        return JSONResponse(
            {
                "kind": fault.kind,
                "at": injected.at,
                "pods": injected.pods,
                "nodes": injected.nodes,
                "alerts": [a.to_alertmanager() for a in injected.alerts],
            }
        )

    async def validate(request: Request) -> JSONResponse:
        try:
            data = await _body(request)
        except ValueError as err:
            return JSONResponse({"errors": [str(err)]}, status_code=400)
        try:
            scenario = parse_scenario(data, source="request body")
        except ScenarioError as err:
            return JSONResponse({"errors": err.problems}, status_code=422)
        return JSONResponse({"name": scenario.name, "faults": len(scenario.faults)})

    async def kube_api(request: Request) -> JSONResponse:
        chaos = fleet.kube_server.chaos
        if request.method == "DELETE":
            chaos.close_all()
        applied_twice = chaos.mutations.applied_twice()
        return JSONResponse(
            {
                "windows": chaos.describe(),
                "mutations": len(chaos.mutations.entries),
                "refused": len(chaos.mutations.refused()),
                "applied_twice": applied_twice,
            }
        )

    mutations = fleet.kube_server.mutations

    async def mutation_counts(request: Request) -> JSONResponse:
        return JSONResponse(mutations.summary())

    async def holds(request: Request) -> JSONResponse:
        return JSONResponse([h.describe() for h in mutations.holds()])

    async def add_hold(request: Request) -> JSONResponse:
        try:
            data = await _body(request)
        except ValueError as err:
            return JSONResponse({"errors": [str(err)]}, status_code=400)
        if not isinstance(data, dict) or not isinstance(data.get("op_id_contains"), str):
            return JSONResponse({"errors": ["op_id_contains: required, a string"]}, status_code=422)
        method = data.get("method")
        try:
            hold = mutations.hold(
                data["op_id_contains"], method=method if isinstance(method, str) else None
            )
        except ValueError as err:
            return JSONResponse({"errors": [str(err)]}, status_code=422)
        return JSONResponse(hold.describe(), status_code=201)

    async def release_hold(request: Request) -> JSONResponse:
        raw = request.path_params["hold_id"]
        try:
            hold = mutations.release(int(raw))
        except (KeyError, ValueError):
            return JSONResponse({"errors": [f"no hold {raw!r}"]}, status_code=404)
        return JSONResponse(hold.describe())

    return Starlette(
        routes=[
            Route("/kube-api", kube_api, methods=["GET", "DELETE"]),
            Route("/mutations", mutation_counts, methods=["GET"]),
            Route("/mutations/holds", holds, methods=["GET"]),
            Route("/mutations/holds", add_hold, methods=["POST"]),
            Route("/mutations/holds/{hold_id}", release_hold, methods=["DELETE"]),
            Route("/counters", counters, methods=["GET"]),
            Route("/alerts", alerts, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/faults", faults, methods=["POST"]),
            Route("/scenarios/validate", validate, methods=["POST"]),
        ]
    )
