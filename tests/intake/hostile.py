"""Hostile strings an alert label can carry, shared by the tests that follow them around."""

from __future__ import annotations

HOSTILE: dict[str, str] = {
    "very long": "a" * 70_000,
    "long but a name": "p" * 64,
    "unicode": "ünïcødé-池-🔥",
    "bidi override": "llm\u202egnp.exe",
    "newline": "llm-0\n2026-11-29 03:00:00 ERROR fleetmend.worker: forged line",
    "carriage return": "llm-0\rforged",
    "escape sequence": "llm-0\x1b[2J\x1b[31mred",
    "nul": "llm\x00-0",
    "path traversal": "../../etc/passwd",
    "dot dot": "..",
    "quotes": "llm'\"`-0",
    "script": "<script>alert('x')</script>",
    "markdown": "**bold** | cell | [link](http://evil.example) ![img](x)",
    "shell": "$(rm -rf /); `reboot` && echo pwned | sh",
    "sql": "llm'; DROP TABLE operations; --",
    "json": '{"namespace": "kube-system"}',
    "label selector": "llm,app!=x",
}
