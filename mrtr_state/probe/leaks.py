"""What a refusal must not say: how the server is built, or its secrets.

A refusal is for the client, who may be the attacker: a stack trace, an exception's class, a
file path or key material in it tells them which check failed and where to push next (the SDKs
answer every refused state with one uniform -32602 "Invalid or expired requestState" and keep
the reason in their logs). Each pattern here names what it found; the states the probe sent and
was issued are taken out of the text first, so a server that echoes a state is not accused of
leaking it.
"""

from __future__ import annotations

import re

__all__ = ["leaks_in"]

_PATTERNS = (
    ("a Python stack trace", re.compile(r"Traceback \(most recent call last\)")),
    ("a Python stack frame", re.compile(r"File \"[^\"\n]+\", line \d+")),
    (
        "a JavaScript stack frame",
        re.compile(r"\bat (?:[\w$.<>\[\] ]+ \()?[^\s()]*(?:\.[cm]?[jt]s|node:[\w/]+):\d+:\d+"),
    ),
    ("a Java stack frame", re.compile(r"\bat [\w$.]+\([\w$]+\.java:\d+\)")),
    (
        "an exception class name",
        re.compile(r"\b(?:[a-z_][\w]*\.)*[A-Z][A-Za-z0-9]+(?:Error|Exception)\b"),
    ),
    (
        "a file path",
        re.compile(
            r"(?:(?<![\w/])/(?:[\w.@-]+/)+[\w.@-]+\.(?:py|pyc|js|mjs|cjs|ts|rb|php|java|go|rs)\b)"
            r"|(?:\b[A-Za-z]:\\(?:[\w.-]+\\)+[\w.-]+)"
            r"|(?:(?<![\w/])/(?:home|usr|opt|srv|var|app|root|etc)/[\w.@/-]+)"
        ),
    ),
    ("a PEM private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a JSON Web Key", re.compile(r"\"kty\"\s*:|\"k\"\s*:\s*\"[A-Za-z0-9_-]{32,}")),
    (
        "a named secret",
        re.compile(
            r"(?i)\b(?:secret|api[_-]?key|password|private[_-]?key|hmac[_-]?key)\b"
            r"[\"']?\s*[=:]\s*[\"']?[^\s\"',}]{8,}"
        ),
    ),
    ("a long hex string (key material?)", re.compile(r"\b[0-9a-fA-F]{64,}\b")),
)


def leaks_in(text: str, known: list[str]) -> list[tuple[str, str]]:
    """(what, the text found) for each kind of leak in ``text``, once per kind; ``known``
    (states the probe sent or was issued) are removed first."""
    for state in sorted(known, key=len, reverse=True):
        if state:
            text = text.replace(state, "<state>")
    found = []
    for what, pattern in _PATTERNS:
        match = pattern.search(text)
        if match is not None:
            found.append((what, match.group(0)))
    return found
