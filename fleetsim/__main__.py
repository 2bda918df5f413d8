"""`python -m fleetsim serve SCENARIO --kubeconfig-out PATH [--speed X]`: the fleet alone.

Runs the API server, the replicas, the controllers, the traffic and the fault script
of one scenario (a bundled name such as `replica-lost`, or a path), writes a kubeconfig
for kubectl and for a worker started by hand, and prints one JSON line describing the
fleet (API server, control URL, pods). Stops on Ctrl-C / SIGTERM, or after the
scenario's `duration_s` with `--stop-after-duration`. `python -m fleetsim scenarios`
lists the bundled scenarios; `python -m fleetsim validate FILE` checks one.

A scenario that does not validate is reported field by field (exit status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from fleetsim.clock import ScaledClock
from fleetsim.control import control_app
from fleetsim.fleet import SERVING_PORT, Fleet
from fleetsim.netserve import AddressHost
from fleetsim.scenario import ScenarioError, bundled_scenarios, load_scenario


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fleetsim", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a scenario's fleet until stopped")
    serve.add_argument("scenario", help="bundled scenario name or path to a YAML file")
    serve.add_argument("--kubeconfig-out", required=True, type=Path)
    serve.add_argument("--speed", type=float, default=1.0, help="simulated seconds per second")
    serve.add_argument("--port", type=int, default=SERVING_PORT, help="replicas' serving port")
    serve.add_argument("--kube-port", type=int, default=0, help="API server port (0: any)")
    serve.add_argument("--control-port", type=int, default=0, help="control API port (0: any)")
    serve.add_argument("--token", default=None, help="bearer token the API server requires")
    serve.add_argument("--no-traffic", action="store_true", help="build the fleet, send nothing")
    serve.add_argument("--no-faults", action="store_true", help="do not run the fault script")
    serve.add_argument("--stop-after-duration", action="store_true")
    serve.add_argument("--log-level", default="WARNING")
    sub.add_parser("scenarios", help="list bundled scenarios")
    validate = sub.add_parser("validate", help="validate a scenario file")
    validate.add_argument("scenario")
    return p


async def _serve(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    fleet = Fleet(
        scenario,
        clock=ScaledClock(args.speed),
        port=args.port,
        kube_port=args.kube_port,
        kube_token=args.token,
        traffic=not args.no_traffic,
    )
    control = AddressHost()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await fleet.start()
    try:
        kubeconfig = fleet.write_kubeconfig(args.kubeconfig_out)
        ip, port = await control.serve("127.0.0.1", args.control_port, control_app(fleet))
        if not args.no_faults:
            fleet.start_script()
        print(
            json.dumps(
                {
                    "scenario": scenario.name,
                    "kube_url": fleet.kube_url,
                    "kubeconfig": str(kubeconfig),
                    "control_url": f"http://{ip}:{port}",
                    "speed": args.speed,
                    "serving_port": fleet.port,
                    "pods": sorted(
                        f"{p['metadata']['namespace']}/{p['metadata']['name']} "
                        f"{p['status'].get('podIP', '')}"
                        for p in fleet.store.list("pods")
                    ),
                }
            ),
            flush=True,
        )
        if args.stop_after_duration:
            waiter = asyncio.ensure_future(stop.wait())
            timer = asyncio.ensure_future(fleet.clock.sleep(scenario.duration_s))
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            timer.cancel()
        else:
            await stop.wait()
        print(json.dumps({"final": fleet.snapshot()}), flush=True)
    finally:
        await control.close_all()
        await fleet.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "scenarios":
        for name in bundled_scenarios():
            print(f"{name}: {load_scenario(name).description.strip()}")
        return 0
    try:
        if args.command == "validate":
            s = load_scenario(args.scenario)
            print(f"{s.name}: ok ({len(s.faults)} faults)")
            return 0
        logging.basicConfig(level=args.log_level.upper())
        return asyncio.run(_serve(args))
    except ScenarioError as err:
        print(str(err), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
