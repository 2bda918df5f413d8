"""`python -m fleetsim serve` for kubectl and hand-started workers, and the control API
that keeps the fleet running whatever it is sent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from fleetsim.__main__ import main
from fleetsim.clock import ScaledClock
from fleetsim.control import control_app
from fleetsim.fleet import Fleet
from tests.fleetsim.conftest import SMALL, small, until

ROOT = Path(__file__).resolve().parents[2]


async def test_control_api_refuses_bad_input_by_field_and_the_fleet_keeps_serving() -> None:
    scenario = small(traffic=[{"namespace": "serving", "pool": "llm", "rate": 2}])
    async with Fleet(scenario, clock=ScaledClock(10)) as fleet:
        transport = httpx.ASGITransport(app=control_app(fleet))
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as ctl:
            bad_kind = await ctl.post("/faults", json={"kind": "meteor"})
            assert bad_kind.status_code == 422
            assert bad_kind.json()["errors"][0].startswith("kind: Input should be")

            bad_field = await ctl.post(
                "/faults",
                content="kind: fake-alive\ntarget: {namespace: serving, pool: llm, replca: 1}\n",
            )
            assert bad_field.status_code == 422
            assert "target.replca: Extra inputs are not permitted" in bad_field.json()["errors"]

            no_pool = await ctl.post(
                "/faults",
                json={"kind": "fake-alive", "target": {"namespace": "serving", "pool": "x"}},
            )
            assert no_pool.status_code == 422 and "target.pool" in no_pool.json()["errors"][0]

            broken = dict(SMALL, rates={"warm_rate": -1})
            scen = await ctl.post("/scenarios/validate", content=yaml.safe_dump(broken))
            assert scen.status_code == 422
            assert any(e.startswith("rates.warm_rate:") for e in scen.json()["errors"])

            served = fleet.counters.served
            await until(lambda: fleet.counters.served > served + 3, what="still serving")

            ok = await ctl.post(
                "/faults",
                json={"kind": "pod-oom-killed", "target": {"namespace": "serving", "pool": "llm"}},
            )
            assert ok.status_code == 200
            assert ok.json()["alerts"][0]["labels"]["alertname"] == "FleetmendPodOOMKilled"
            alerts = (await ctl.get("/alerts")).json()
            assert alerts[0]["labels"]["fault"] == "pod-oom-killed" and "startsAt" in alerts[0]
            counters = (await ctl.get("/counters")).json()
            assert (
                counters["router"]["served"] > 0
                and counters["faults"][0]["kind"] == "pod-oom-killed"
            )


def test_validate_names_the_bad_field_and_exits_2(tmp_path: Path, capsys) -> None:
    bad = dict(SMALL)
    bad["namespaces"] = [{"name": "serving", "pools": [{"name": "llm", "model": "m"}]}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 2
    assert "namespaces.0.pools.0.replicas: Field required" in capsys.readouterr().err
    assert main(["validate", "replica-lost"]) == 0


def test_serve_runs_the_fleet_for_kubectl_and_stops_cleanly(tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetsim", "serve", str(scenario), "--kubeconfig-out",
         str(kubeconfig), "--speed", "10", "--port", "0", "--no-traffic"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["scenario"] == "small" and kubeconfig.exists()
        assert (
            yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
            == (info["kube_url"])
        )
        kubectl = shutil.which("kubectl")
        assert kubectl is not None, "kubectl is part of the image"
        out = subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), "-n", "serving", "get", "pods",
             "-l", "app=llm,serving=true", "-o", "name"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()  # fmt: skip
        assert len(out) == 2
        with httpx.Client(timeout=5) as http:
            assert http.get(info["control_url"] + "/counters").json()["router"]["offered"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert '"final"' in stdout
    assert "Traceback" not in stderr
