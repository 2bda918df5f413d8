"""Warm-up before traffic: the HA article's L2 warm-up sent straight to one replica.

Called from `workflows/replica_loss.py` for each promoted or new replica before the ramp
gives it more than a probe's share. Short, medium and concurrent requests cover the batch
and sequence shapes CUDA graph capture needs (seed 002, section 7.2); the replica passes
only if its TTFT dropped (or was already at the warm figure). Inference is safe to repeat,
so this activity does not go through the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import (
    PodRef,
    activity_options,
    heartbeat,
    heartbeating,
    result_heartbeating,
)
from activities.errors import PermanentError, TemporaryError, http_errors


class WarmupInput(BaseModel):
    replica: PodRef
    model: str
    short_requests: int = 3
    short_tokens: int = 8
    medium_requests: int = 1
    medium_tokens: int = 256
    concurrent_requests: int = 8
    # TTFT must fall by at least this fraction, unless it is already at or under warm_ttft_s.
    min_ttft_drop: float = 0.3
    warm_ttft_s: float = 0.5
    request_timeout_s: float = 60.0


class WarmupResult(BaseModel):
    pod: str
    passed: bool
    reason: str
    ttft_before_s: float | None
    ttft_after_s: float | None
    requests_sent: int
    failures: int
    shapes: dict[str, int] = Field(default_factory=dict)
    # Requests per second the replica started while serving the concurrent batch (wall
    # clock): what it can serve now, which a probe share must not exceed.
    served_per_s: float | None = None


WARMUP_OPTIONS = activity_options(start_to_close=300, heartbeat=30, max_attempts=3)


def warmup_verdict(
    *,
    ttft_before_s: float | None,
    ttft_after_s: float | None,
    failures: int,
    min_ttft_drop: float,
    warm_ttft_s: float,
) -> tuple[bool, str]:
    """Pass only with no failed request and a TTFT that dropped (or was already warm)."""
    if failures:
        return False, f"{failures} warm-up request(s) failed"
    if ttft_after_s is None or ttft_before_s is None:
        return False, "no TTFT measured"
    if ttft_after_s <= warm_ttft_s:
        return True, f"TTFT {ttft_after_s:.3f}s <= warm figure {warm_ttft_s:.3f}s"
    if ttft_after_s <= ttft_before_s * (1.0 - min_ttft_drop):
        return True, (
            f"TTFT dropped {ttft_before_s:.3f}s -> {ttft_after_s:.3f}s (>= {min_ttft_drop:.0%})"
        )
    return False, (
        f"TTFT {ttft_before_s:.3f}s -> {ttft_after_s:.3f}s: dropped less than "
        f"{min_ttft_drop:.0%} and above the warm figure {warm_ttft_s:.3f}s"
    )


def concurrent_service_rate(first_token_offsets_s: Sequence[float]) -> float | None:
    """Requests per second a replica started while serving a batch sent at once.

    `first_token_offsets_s` are the seconds from the batch's send to each request's first
    token. A FIFO replica starts them one after another, so n requests span n - 1 service
    gaps; the first token's own latency is in the span too, which errs low (a share sized
    from it is smaller, never larger). A replica that batches them all at once spans
    little and measures fast. None without two answers to measure between.
    """
    if len(first_token_offsets_s) < 2:
        return None
    span = max(first_token_offsets_s)
    if span <= 0:
        return None
    return (len(first_token_offsets_s) - 1) / span


def _label_safe(name: str) -> str:
    """The label-value form fleets use for a model name ("org/name" -> "org--name")."""
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "--" for ch in name)
    return cleaned.strip("-_.")[:63].rstrip("-_.")


class WarmupActivities:
    """Sends warm-up requests to a replica's own address, bypassing the router."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def _url(self, ref: PodRef) -> str:
        if not ref.metrics_url:
            raise PermanentError(f"warm up pod {ref.namespace}/{ref.name}: no address known")
        return ref.metrics_url.rstrip("/").removesuffix("/metrics") + "/v1/chat/completions"

    def _served_model(self, url: str, wanted: str, timeout: float) -> str:
        """The model id the replica itself serves (`/v1/models`).

        The pool's `model` label is a label-safe form of the name ("org--name" for
        "org/name"), so the id a request must carry is read from the replica, and checked
        against the label so a replica serving another model is never warmed as this one.
        """
        models_url = url.removesuffix("/chat/completions") + "/models"
        with http_errors("list served models", models_url):
            response = self.http.get(models_url, timeout=timeout)
            response.raise_for_status()
        ids = [str(m.get("id")) for m in response.json().get("data", []) if m.get("id")]
        if not ids:
            raise TemporaryError(f"list served models {models_url}: the replica serves none")
        if not wanted:
            return ids[0]
        for served in ids:
            if wanted in (served, _label_safe(served)):
                return served
        raise PermanentError(
            f"warm up {models_url}: the replica serves {ids}, not the pool's model {wanted!r}"
        )

    def _request(
        self, url: str, model: str, max_tokens: int, timeout: float, sent: float | None = None
    ) -> float:
        """One streamed completion; returns its time to first token in seconds, counted
        from `sent` when given (a batch's send: a thread that started late would otherwise
        hide the wait it did not see)."""
        body = {
            "model": model,
            "max_tokens": max_tokens,
            "stream": True,
            "messages": [{"role": "user", "content": "fleetmend warm-up"}],
        }
        started = time.monotonic() if sent is None else sent
        with (
            http_errors("warm-up request", url),
            self.http.stream("POST", url, json=body, timeout=timeout) as response,
        ):
            response.raise_for_status()
            first: float | None = None
            for line in response.iter_lines():
                if first is None and line.startswith("data:") and line.strip() != "data: [DONE]":
                    first = time.monotonic() - started
            if first is None:
                raise TemporaryError(f"warm-up request {url}: stream ended without a token")
            return first

    def _batch(
        self, url: str, model: str, tokens: int, count: int, timeout: float, parallel: bool
    ) -> tuple[list[float], int]:
        """Time to first token of each request that answered (parallel: seconds from the
        batch's send to each first token), and how many failed."""
        ttfts: list[float] = []
        failures = 0
        if parallel:
            sent = time.monotonic()
            with ThreadPoolExecutor(max_workers=max(1, count)) as pool:
                futures = [
                    pool.submit(self._request, url, model, tokens, timeout, sent)
                    for _ in range(count)
                ]
                for f in futures:
                    try:
                        ttfts.append(result_heartbeating(f))
                    except Exception:
                        failures += 1
            return ttfts, failures
        for _ in range(count):
            try:
                ttfts.append(heartbeating(lambda: self._request(url, model, tokens, timeout)))
            except Exception:
                failures += 1
        return ttfts, failures

    @activity.defn
    def warm_up_replica(self, input: WarmupInput) -> WarmupResult:
        """Short, medium and concurrent requests; pass if TTFT dropped."""
        url = self._url(input.replica)
        t = input.request_timeout_s
        model = self._served_model(url, input.model, t)
        before, f0 = self._batch(url, model, input.short_tokens, 1, t, parallel=False)
        _, f1 = self._batch(url, model, input.short_tokens, input.short_requests, t, parallel=False)
        _, f2 = self._batch(
            url, model, input.medium_tokens, input.medium_requests, t, parallel=False
        )
        heartbeat()
        concurrent, f3 = self._batch(
            url, model, input.short_tokens, input.concurrent_requests, t, parallel=True
        )
        heartbeat()
        after, f4 = self._batch(url, model, input.short_tokens, 1, t, parallel=False)
        failures = f0 + f1 + f2 + f3 + f4
        sent = 2 + input.short_requests + input.medium_requests + input.concurrent_requests
        ttft_before = before[0] if before else None
        ttft_after = after[0] if after else None
        passed, reason = warmup_verdict(
            ttft_before_s=ttft_before,
            ttft_after_s=ttft_after,
            failures=failures,
            min_ttft_drop=input.min_ttft_drop,
            warm_ttft_s=input.warm_ttft_s,
        )
        return WarmupResult(
            pod=input.replica.name,
            passed=passed,
            reason=reason,
            ttft_before_s=ttft_before,
            ttft_after_s=ttft_after,
            requests_sent=sent,
            failures=failures,
            shapes={
                "probe": 2,
                "short": input.short_requests,
                "medium": input.medium_requests,
                "concurrent": input.concurrent_requests,
            },
            served_per_s=concurrent_service_rate(concurrent),
        )
