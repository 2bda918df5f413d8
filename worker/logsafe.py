"""Log lines that text from outside cannot forge: control characters are escaped.

Alert labels, alert names and Alertmanager's group keys are attacker-controlled text that
reaches the intake's and the worker's log messages. A newline in one would start a line
that looks like fleetmend's own; `EscapingFormatter` writes every control character of the
message (newline, carriage return, escape, the bidi overrides...) as a `\\x..`/`\\u....`
escape, so one record stays one line. Tracebacks keep their lines: they come from the code.
A URL's `user:password@` is removed from every message too.
"""

from __future__ import annotations

import logging
import re
import unicodedata

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# httpx logs every request's full URL at INFO, the incident channel's secret path and any
# userinfo included; its warnings and errors still show.
QUIET_LOGGERS = ("httpx", "httpcore")
_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)


def escape_controls(text: str) -> str:
    """`text` with every control or format character (Unicode Cc/Cf) escaped, `\\` too."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in ("Cc", "Cf"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def redact_userinfo(text: str) -> str:
    """Every `scheme://user:password@` in `text` as `scheme://`."""
    return _USERINFO.sub(r"\1", text)


class EscapingFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = redact_userinfo(escape_controls(record.message))
        return super().formatMessage(record)


def configure_logging(level: str) -> None:
    """The root handler of a fleetmend process, with escaped messages."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
