"""A DCGM-exporter-style `/metrics` per simulated node: Xid and ECC per GPU.

Served by the fleet on each node's InternalIP (port `DCGM_PORT` in `serve`, ephemeral in
tests) and read by fleetmend's triage activity. The fault injector writes Xid and ECC
events here; the kubelet records which pod holds which GPU, so the series carry the
`namespace`/`pod`/`container` labels dcgm-exporter adds with its Kubernetes mapping.

As in dcgm-exporter, `DCGM_FI_DEV_XID_ERRORS` is a gauge holding the last Xid code seen
(0 = none) and the ECC fields are running totals (volatile: since the last driver load;
aggregate: lifetime). Xid 48 is a double-bit ECC error, so it also bumps the DBE counts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

DCGM_PORT = 9400

# Xid codes that imply an uncorrectable memory error (seed 002, section 10.2).
_DBE_XIDS = {48, 95}
_SBE_XIDS = {94}


@dataclass
class Gpu:
    index: int
    uuid: str
    xid: int = 0
    sbe_vol: int = 0
    dbe_vol: int = 0
    sbe_agg: int = 0
    dbe_agg: int = 0
    temp_c: float = 41.0
    pod: tuple[str, str] | None = None  # (namespace, name) of the pod holding it


@dataclass
class NodeGpus:
    node: str
    product: str
    gpus: list[Gpu] = field(default_factory=list)

    @classmethod
    def create(cls, node: str, count: int, product: str) -> NodeGpus:
        def uuid(i: int) -> str:
            h = hashlib.sha1(f"{node}/{i}".encode()).hexdigest()
            return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

        return cls(node, product, [Gpu(i, uuid(i)) for i in range(count)])

    def record_xid(self, index: int, xid: int) -> None:
        gpu = self.gpus[index]
        gpu.xid = xid
        if xid in _DBE_XIDS:
            gpu.dbe_vol += 1
            gpu.dbe_agg += 1
        elif xid in _SBE_XIDS:
            gpu.sbe_vol += 1
            gpu.sbe_agg += 1

    def assign(self, indices: list[int], pod: tuple[str, str] | None) -> None:
        for i in indices:
            self.gpus[i].pod = pod

    def free_indices(self) -> list[int]:
        return [g.index for g in self.gpus if g.pod is None]

    def indices_of(self, pod: tuple[str, str]) -> list[int]:
        return [g.index for g in self.gpus if g.pod == pod]

    def exposition(self) -> str:
        fields = (
            ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "xid"),
            (
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                "counter",
                "Total number of single-bit volatile ECC errors.",
                "sbe_vol",
            ),
            (
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "counter",
                "Total number of double-bit volatile ECC errors.",
                "dbe_vol",
            ),
            (
                "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
                "counter",
                "Total number of single-bit persistent ECC errors.",
                "sbe_agg",
            ),
            (
                "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
                "counter",
                "Total number of double-bit persistent ECC errors.",
                "dbe_agg",
            ),
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c"),
        )
        lines: list[str] = []
        for name, kind, doc, attr in fields:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} {kind}")
            for g in self.gpus:
                labels = (
                    f'gpu="{g.index}",UUID="{g.uuid}",device="nvidia{g.index}",'
                    f'modelName="{self.product}",Hostname="{self.node}"'
                )
                if g.pod is not None:
                    labels += f',container="vllm",namespace="{g.pod[0]}",pod="{g.pod[1]}"'
                value = getattr(g, attr)
                lines.append(f"{name}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"


def dcgm_app(node: NodeGpus) -> Starlette:
    async def metrics(request: Request) -> Response:
        return Response(node.exposition(), media_type="text/plain; version=0.0.4")

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])
