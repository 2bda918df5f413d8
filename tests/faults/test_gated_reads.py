"""The read gate: a matching read is served only after the inspection, others at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from fleetsim.kube.chaos import Chaos, RequestInfo
from tests.faults.gated_reads import GatedReads, Reads


async def test_a_matching_read_waits_for_the_inspection_and_is_then_served() -> None:
    chaos = Chaos()
    order: list[str] = []

    async def inspect(req: RequestInfo) -> None:
        order.append(f"inspect {req.object_ref}")

    async def body() -> bytes:
        return b""

    def serving(ref: str) -> Callable[[], Awaitable[Response]]:
        async def serve() -> Response:
            order.append(f"serve {ref}")
            return Response(status_code=200)

        return serve

    gated = GatedReads(chaos, inspect)
    gated.gates = [Reads("list", "pods")]
    pods = RequestInfo("list", "pods", None, "serving", None)
    other_ns = RequestInfo("list", "pods", None, "kube-system", None)
    named = RequestInfo("get", "pods", None, "serving", "p-0")
    for req in (pods, other_ns, named):
        response = await chaos.handle(req, body, serving(req.object_ref))
        assert response.status_code == 200
    assert order == [
        "inspect pods serving",
        "serve pods serving",
        "serve pods kube-system",
        "serve pods serving/p-0",
    ]
    assert gated.held == 1
