"""`python -m worker.intake_probe [PATH]`: the intake's readiness probe, sent with its token.

Run by the kubelet as the intake's exec readiness probe (`deploy/intake.yaml`): every
intake path but `/healthz` needs the credentials, and an httpGet probe cannot take a header
from a Secret. Reads the same FLEETMEND_* variables as the intake it probes, asks
`PATH` (default `/readyz`) on the local port, and exits 0 on 200, 1 otherwise, printing
one line that never contains the token.
"""

from __future__ import annotations

import sys

import httpx

from worker.settings import Settings, SettingsError, load_settings


def probe(settings: Settings, path: str = "/readyz", *, timeout_s: float = 5.0) -> tuple[bool, str]:
    """(ready, one line saying why) for the intake these settings describe."""
    host = "127.0.0.1" if settings.intake_host in ("0.0.0.0", "") else settings.intake_host
    url = f"http://{host}:{settings.intake_port}{path}"
    auth: httpx.Auth | None = None
    headers = {}
    if settings.intake_token is not None:
        headers["Authorization"] = f"Bearer {settings.intake_token.get_secret_value()}"
    elif settings.intake_basic_user and settings.intake_basic_password:
        auth = httpx.BasicAuth(
            settings.intake_basic_user, settings.intake_basic_password.get_secret_value()
        )
    try:
        resp = httpx.get(url, headers=headers, auth=auth, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return False, f"{url}: {type(exc).__name__}"
    return resp.status_code == 200, f"{url}: HTTP {resp.status_code}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"intake probe: {exc}", file=sys.stderr)
        return 1
    ready, why = probe(settings, args[0] if args else "/readyz")
    print(f"intake probe: {why}")
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
