"""A worker process with the sample workflow and activity, for the SIGTERM drain test.

Run as a script by tests/cli/test_worker_process.py: `run_worker` with its own signal
handlers, exactly as `fleetmend worker` runs it, minus Kubernetes and the ledger.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cli.sample_incident import SampleSlowWorkflow, sample_slow_step
from worker.main import run_worker
from worker.settings import load_settings

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(
        run_worker(
            load_settings(),
            workflows=[SampleSlowWorkflow],
            activities=[sample_slow_step],
        )
    )
