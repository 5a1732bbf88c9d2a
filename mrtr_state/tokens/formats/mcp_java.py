"""``mcp-java``: the requestState tokens of the Java SDK (main, unreleased ``modern`` package,
``HmacRequestStateCodec``).

    b64url(payload JSON) + . + b64url(HMAC-SHA256(key, the payload segment's text))

The PHP SDK's wire to the byte: no prefix, no key id, the MAC over the first segment's *text*
(so re-padding or re-encoding the payload breaks it). Its tokens share the PHP SDK's shape, and
the key that opens one names which it is (:meth:`mrtr_state.tokens.registry.Shape.open`); with no
key id, each usable ``mcp-java-v1`` key is tried, primary first. Java's URL decoder takes ``=``
padding and ignores non-zero trailing bits, so the SDK accepts several spellings of one token;
mrtr-state keeps the canonical one and refuses the others as malformed. Signed, not encrypted:
the payload, the principal in it included, is readable by anyone holding the token.
"""

from __future__ import annotations

from .mcp_php import PhpWire

__all__ = ["JavaWire"]


class JavaWire(PhpWire):
    """The PHP SDK's wire under ``mcp-java-v1`` keys: see the module docstring. (The name and
    the key algorithm the table hands it are all that differ.)"""
