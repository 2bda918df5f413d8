"""A tiny workflow for the fixture tests (workflows must live in an importable module)."""

from __future__ import annotations

import asyncio

from temporalio import workflow


@workflow.defn
class SleepThenAnswer:
    @workflow.run
    async def run(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds:.0f}s"
