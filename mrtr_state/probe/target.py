"""What the probe is pointed at: a Streamable HTTP URL with the principals' headers, or a
command that serves MCP on stdio. Checked before anything is sent, so a mistake is a usage
error (exit 2), never a probe that fails half-way.
"""

from __future__ import annotations

import re
import shlex

from .http import HttpTransport, check_url
from .stdio import StdioTransport
from .transport import Transport

__all__ = ["Target", "parse_header"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 field names
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


#: Said instead of the text of a header the probe cannot read: a line that is not a header may
#: still be a credential (a token pasted without its name), so no part of it is ever printed.
_UNSHOWN = "(its text is not shown: it may hold a credential)"


def parse_header(text: str) -> tuple[str, str]:
    """``Name: value`` as (name, value), the value trimmed of spaces and tabs; ValueError when
    there is no colon, the name is not an HTTP field name, or the value holds a control. The
    message never quotes the text (header values are never printed, a broken one included):
    the caller says which header it was."""
    name, colon, value = text.partition(":")
    if not colon:
        raise ValueError(f"a header is written 'Name: value'; this one has no colon {_UNSHOWN}")
    name = name.strip()
    if not _TOKEN.fullmatch(name):
        raise ValueError(
            "the part before the colon is not an HTTP header name (no spaces, quotes or "
            f"brackets) {_UNSHOWN}"
        )
    value = value.strip(" \t")
    if _BAD_VALUE.search(value):
        raise ValueError(f"the value of header {name} holds a control character")
    return name, value


class Target:
    """An HTTP endpoint with principal A's headers (and B's, for the cross-principal check),
    or a stdio command."""

    def __init__(
        self,
        *,
        url: str | None = None,
        command: str | None = None,
        headers: list[tuple[str, str]] | None = None,
        other: list[tuple[str, str]] | None = None,
    ) -> None:
        if (url is None) == (command is None):
            raise ValueError("give the server's URL or --stdio 'COMMAND ...', one of the two")
        self.url = None if url is None else check_url(url)
        self.argv: list[str] | None = None
        if command is not None:
            if headers or other:
                raise ValueError("--header and --other are HTTP headers: a stdio server has none")
            try:
                self.argv = shlex.split(command)
            except ValueError as err:
                raise ValueError(f"--stdio: cannot split the command: {err}") from None
            if not self.argv:
                raise ValueError("--stdio needs a command to start the server")
        self.headers = list(headers or [])
        self.other = None if not other else list(other)

    @property
    def label(self) -> str:
        """What the report calls the target (the URL, or ``stdio:`` and the command)."""
        return self.url if self.url is not None else "stdio:" + shlex.join(self.argv or [])

    def transport(self) -> Transport:
        if self.url is not None:
            return HttpTransport(self.url, self.headers, self.other)
        return StdioTransport(list(self.argv or []))
