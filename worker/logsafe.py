"""Log lines that text from outside cannot forge: control characters are escaped.

Alert labels, alert names and Alertmanager's group keys are attacker-controlled text that
reaches the intake's and the worker's log messages. A newline in one would start a line
that looks like fleetmend's own; `EscapingFormatter` writes every control character of the
message (newline, carriage return, escape, the bidi overrides...) as a `\\x..`/`\\u....`
escape, so one record stays one line. Tracebacks keep their lines: they come from the code.
"""

from __future__ import annotations

import logging
import unicodedata

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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


class EscapingFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def configure_logging(level: str) -> None:
    """The root handler of a fleetmend process, with escaped messages."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
