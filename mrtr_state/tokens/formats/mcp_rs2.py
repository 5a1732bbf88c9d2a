"""``mcp-rs2``: rmcp's keyring tokens (rmcp 3.2.0, "add request-state key rotation", #1128).

    rs2. + b64url(kid) + . + b64url(body) + . + b64url(HMAC-SHA256(key, DOMAIN ‖ u64be(len kid)
    ‖ kid ‖ u64be(len ad) ‖ ad ‖ body))

with DOMAIN ``rmcp/mrtr/request-state/v2``: ``rs1`` (:mod:`.mcp_rs`) plus the key's id, 1-255
bytes of UTF-8 chosen by the operator, which the keyset keeps as the key's ``sdk_kid`` and
routes by. The id is inside the tag, so a token cannot be moved to another id, even one that
names the same key bytes.
"""

from __future__ import annotations

from .mcp_rs import RmcpWire

__all__ = ["KeyringWire"]


class KeyringWire(RmcpWire):
    version = "rs2"
