"""URLs as they may appear in errors, logs, the timeline and reports: without credentials.

A webhook or metrics URL can carry a secret in its userinfo (`https://user:pass@host`),
its query (`?token=...`) or, for Slack-style incoming webhooks, its whole path. Every
message that names such a URL goes through `redact_url` first.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str, *, keep_path: bool = True) -> str:
    """`url` without userinfo and query (and without its path unless `keep_path`)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparseable URL)"
    if not parts.scheme or not host:
        return url if "@" not in url and "?" not in url else "(unparseable URL)"
    if ":" in host:
        host = f"[{host}]"
    path = parts.path if keep_path else ("/..." if parts.path not in ("", "/") else "")
    return urlunsplit((parts.scheme, host + port, path, "", ""))
