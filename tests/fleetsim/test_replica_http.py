"""Simulated vLLM replicas on their own loopback IPs, served from one process."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetsim.clock import ManualClock, ScaledClock
from fleetsim.dcgm import NodeGpus, dcgm_app
from fleetsim.engine import Engine, EngineConfig, Health
from fleetsim.netserve import AddressHost
from fleetsim.replica import HEADER_ARRIVED_AT, HEADER_QUEUE_WAIT, Replica, ReplicaIdentity
from fleetsim.vllm_metrics import metric_names


def make_replica(
    clock, *, version="0.10.1", core="V1", warm=True, rate=50.0, ready_at=None
) -> Replica:
    cfg = EngineConfig(
        model="llama-3-70b", warm_rate=rate, cold_frac=0.25, warmup_s=120, tokens=4,
        token_interval_s=0.01,
    )  # fmt: skip
    ready_at = clock.now() if ready_at is None else ready_at
    engine = Engine(cfg, clock, ready_at=ready_at, warm=warm)
    ident = ReplicaIdentity("serving", "llm-0", "llm", "llama-3-70b", "r1", version, core, "gpu-0")
    return Replica(ident, engine)


def families(text: str) -> dict[str, dict]:
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_replicas_answer_on_distinct_loopback_ips_from_one_process() -> None:
    host = AddressHost()
    clock = ScaledClock(20)
    try:
        a = await host.serve("127.77.0.2", 0, make_replica(clock).app)
        b = await host.serve("127.77.0.3", a[1], make_replica(clock).app)
        assert a[0] != b[0] and a[1] == b[1]
        async with httpx.AsyncClient(timeout=5) as client:
            for ip, port in (a, b):
                r = await client.get(f"http://{ip}:{port}/health")
                assert r.status_code == 200
            await host.close(a)
        async with httpx.AsyncClient(timeout=5) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://{a[0]}:{a[1]}/health")
            assert (await client.get(f"http://{b[0]}:{b[1]}/health")).status_code == 200
    finally:
        await host.close_all()


async def test_chat_completion_streams_sse_and_carries_the_action_operation_id() -> None:
    host = AddressHost()
    clock = ScaledClock(20)
    try:
        ip, port = await host.serve("127.77.0.4", 0, make_replica(clock).app)
        body = {
            "model": "llama-3-70b", "messages": [{"role": "user", "content": "hi"}],
            "stream": True, "action": {"operation_id": "op-1", "kind": "refund"},
        }  # fmt: skip
        async with httpx.AsyncClient(timeout=5) as client:
            async with client.stream(
                "POST", f"http://{ip}:{port}/v1/chat/completions", json=body
            ) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                assert float(r.headers[HEADER_QUEUE_WAIT]) >= 0
                events = [ln[6:] async for ln in r.aiter_lines() if ln.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
            assert text == " tok0 tok1 tok2 tok3"
            assert chunks[-1]["choices"][0]["delta"]["tool_calls"][0]["id"] == "op-1"

            body["stream"] = False
            r2 = await client.post(f"http://{ip}:{port}/v1/chat/completions", json=body)
            assert r2.status_code == 200
            msg = r2.json()["choices"][0]["message"]
            assert msg["content"] == " tok0 tok1 tok2 tok3"
            assert msg["tool_calls"][0]["id"] == "op-1"

            r3 = await client.post(
                f"http://{ip}:{port}/v1/chat/completions",
                json={"model": "other", "messages": []},
            )
            assert r3.status_code == 404
    finally:
        await host.close_all()


async def test_metrics_use_vllm_names_with_model_name_labels() -> None:
    host = AddressHost()
    clock = ScaledClock(20)
    try:
        replica = make_replica(clock)
        ip, port = await host.serve("127.77.0.5", 0, replica.app)
        async with httpx.AsyncClient(timeout=5) as client:
            await client.post(
                f"http://{ip}:{port}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "x"}]},
            )
            text = (await client.get(f"http://{ip}:{port}/metrics")).text
        assert "vllm:num_preemptions_total{" in text
        assert "vllm:prefix_cache_queries_total{" in text
        assert "vllm:prefix_cache_hits_total{" in text
        fams = families(text)
        for name in (
            "vllm:num_requests_waiting", "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
            "vllm:time_to_first_token_seconds",
        ):  # fmt: skip
            sample = fams[name].samples[0]
            assert sample.labels["model_name"] == "llama-3-70b", name
        ttft = fams["vllm:time_to_first_token_seconds"].samples
        ttft_count = next(s for s in ttft if s.name.endswith("_count"))
        assert ttft_count.value == 1
    finally:
        await host.close_all()


@pytest.mark.parametrize(
    ("version", "core", "kv", "gpu"),
    [("0.9.2", "V1", False, True), ("0.10.1", "V0", False, True),
     ("0.10.1", "V1", True, True), ("0.11.0", "V1", True, False)],
)  # fmt: skip
def test_cache_usage_metric_names_follow_the_engine_release(
    version: str, core: str, kv: bool, gpu: bool
) -> None:
    names = metric_names(version, core).kv_usage
    assert ("vllm:kv_cache_usage_perc" in names) is kv
    assert ("vllm:gpu_cache_usage_perc" in names) is gpu


async def test_cold_replica_queues_at_its_cold_rate_and_warms() -> None:
    clock = ManualClock()
    replica = make_replica(clock, warm=False, rate=20.0)
    engine = replica.engine
    assert engine.service_rate() == 5.0
    assert engine.prefix_hit_rate() == 0.0

    async def one() -> float:
        async for tok in engine.generate(1):
            return tok.queue_wait_s
        raise AssertionError

    tasks = [asyncio.create_task(one()) for _ in range(5)]
    await asyncio.sleep(0)
    assert engine.stats.waiting == 4  # the first starts at once
    for _ in range(20):
        await clock.advance(0.1)
    waits = sorted(await asyncio.gather(*tasks))
    # 5 req/s when cold, already climbing: each start a little sooner than 0.2 s apart.
    assert waits[0] == 0.0
    for k in range(1, 5):
        assert 0.19 * k < waits[k] < 0.2 * k
    await clock.advance(200)
    assert engine.service_rate() == 20.0
    assert engine.prefix_hit_rate() == pytest.approx(0.8)


async def test_fake_alive_replica_accepts_connections_and_never_answers() -> None:
    host = AddressHost()
    clock = ScaledClock(20)
    try:
        replica = make_replica(clock)
        ip, port = await host.serve("127.77.0.6", 0, replica.app)
        replica.engine.set_health(Health.FAKE_ALIVE)
        async with httpx.AsyncClient(timeout=0.3) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"http://{ip}:{port}/health")
    finally:
        await host.close_all()


async def test_gpu_hung_replica_passes_health_and_never_finishes_inference() -> None:
    host = AddressHost()
    clock = ScaledClock(20)
    try:
        replica = make_replica(clock)
        ip, port = await host.serve("127.77.0.7", 0, replica.app)
        replica.engine.set_health(Health.GPU_HUNG)
        async with httpx.AsyncClient(timeout=0.3) as client:
            assert (await client.get(f"http://{ip}:{port}/health")).status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                await client.post(f"http://{ip}:{port}/v1/chat/completions", json={"messages": []})
    finally:
        await host.close_all()


async def test_killing_a_replica_breaks_its_stream_mid_flight() -> None:
    host = AddressHost()
    clock = ScaledClock(1)
    try:
        replica = make_replica(clock)
        ip, port = await host.serve("127.77.0.8", 0, replica.app)
        got: list[str] = []
        async with httpx.AsyncClient(timeout=5) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream(
                    "POST", f"http://{ip}:{port}/v1/chat/completions",
                    json={"messages": [], "stream": True, "max_tokens": 50},
                ) as r:  # fmt: skip
                    async for line in r.aiter_lines():
                        got.append(line)
                        if len(got) == 1:
                            replica.engine.kill()
                            await host.close((ip, port))
        assert got and "[DONE]" not in "".join(got)
    finally:
        await host.close_all()


def test_dcgm_exports_last_xid_and_dbe_counts_with_pod_labels() -> None:
    node = NodeGpus.create("gpu-0", 2, "NVIDIA-H100-80GB-HBM3")
    node.assign([1], ("serving", "llm-0"))
    node.record_xid(1, 48)
    fams = families(node.exposition())
    xid = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert xid["1"].value == 48 and xid["0"].value == 0
    assert xid["1"].labels["pod"] == "llm-0" and "pod" not in xid["0"].labels
    dbe = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].samples}
    assert dbe == {"0": 0, "1": 1}


async def test_dcgm_app_serves_the_exposition() -> None:
    node = NodeGpus.create("gpu-1", 1, "NVIDIA-H100-80GB-HBM3")
    node.record_xid(0, 79)
    transport = httpx.ASGITransport(app=dcgm_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://n") as client:
        text = (await client.get("/metrics")).text
    assert 'DCGM_FI_DEV_XID_ERRORS{gpu="0"' in text and text.rstrip().endswith("41.0")


async def queue_waits(replica: Replica, stamps: list[str | None]) -> list[float]:
    """Send one request per stamp, all at once, and read the queue wait each reports."""
    transport = httpx.ASGITransport(app=replica.app)
    body = {"messages": [{"role": "user", "content": "x"}]}
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        responses = await asyncio.gather(
            *(
                client.post(
                    "/v1/chat/completions",
                    json=body,
                    headers={} if stamp is None else {HEADER_ARRIVED_AT: stamp},
                )
                for stamp in stamps
            )
        )
    assert [r.status_code for r in responses] == [200] * len(stamps)
    return [float(r.headers[HEADER_QUEUE_WAIT]) for r in responses]


async def test_a_burst_stamped_at_its_offered_arrivals_does_not_queue_in_the_replica() -> None:
    # Fast enough to keep the test short, slow enough that the oldest stamp stays well
    # inside MAX_ARRIVAL_AGE_S on a busy machine.
    clock = ScaledClock(5)
    up_since = clock.now() - 60.0
    # Offered 0.5 s apart to a 4 req/s replica, released together after a stall.
    stamps = [repr(clock.now() - 4.0 + 0.5 * k) for k in range(8)]
    stamped = make_replica(clock, rate=4.0, ready_at=up_since)
    assert await queue_waits(stamped, stamps) == [0.0] * 8
    # The same burst unstamped queues as a burst: the last waits about 7 / 4 s.
    unstamped = make_replica(clock, rate=4.0, ready_at=up_since)
    assert max(await queue_waits(unstamped, [None] * 8)) > 1.0


@pytest.mark.parametrize("stamp", ["soon", "nan", "inf", ""])
async def test_a_malformed_arrival_stamp_is_refused_naming_the_header(stamp: str) -> None:
    replica = make_replica(ScaledClock(1))
    transport = httpx.ASGITransport(app=replica.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={HEADER_ARRIVED_AT: stamp},
        )
    assert r.status_code == 400
    assert HEADER_ARRIVED_AT in r.json()["message"] and repr(stamp) in r.json()["message"]
    assert replica.engine.stats.prompt_tokens == 0 and replica.engine.stats.waiting == 0
