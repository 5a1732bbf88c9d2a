"""The proxy's log lines as JSON (``--json-log``): one object per line, the same keys first.

Kept apart from the server (and free of uvicorn), so that the CLI can say why the proxy cannot
start, as JSON too, before the proxy's extra has been imported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["json_lines"]

#: The level of a line that states none, by its event.
_LEVELS = {"refused": "warning", "error": "error", "warning": "warning"}


def json_lines(
    stream: TextIO, clock: Callable[[], float] = time.time
) -> Callable[[dict[str, Any]], None]:
    """A log sink writing one JSON object per line to ``stream``, each beginning with ``ts``
    (RFC 3339, UTC, milliseconds), ``level`` (``info``, ``warning`` or ``error``: the line's own,
    else the one its ``event`` implies) and ``event``, so a log shipper parses every line the
    same way."""

    def write(line: dict[str, Any]) -> None:
        event = line.get("event", "log")
        level = line.get("level") or _LEVELS.get(event, "info")
        moment = clock()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment))
        millis = int(moment * 1000) % 1000
        record = {"ts": f"{stamp}.{millis:03d}Z", "level": level, "event": event}
        record.update((k, v) for k, v in line.items() if k not in record)
        stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        stream.flush()

    return write
