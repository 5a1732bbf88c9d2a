"""The checks, once: stable ids (scripts, SARIF and the docs use them), severities, what each
tries, what a finding means and how to fix it. The order is the report's order.
"""

from __future__ import annotations

__all__ = ["CHECKS", "SEVERITIES", "Check", "check_named"]

#: Severities from the most to the least severe; ``--fail-on`` names one of them (or none).
SEVERITIES = ("high", "medium", "low")


class Check:
    """One check: its id, severity, a finding's title, what it tries, and the remedy."""

    __slots__ = ("id", "remedy", "severity", "title", "tries")

    def __init__(self, id: str, severity: str, title: str, tries: str, remedy: str) -> None:
        self.id, self.severity, self.title, self.tries, self.remedy = (
            id,
            severity,
            title,
            tries,
            remedy,
        )

    def __repr__(self) -> str:
        return f"Check({self.id!r})"


_INTEGRITY = (
    "protect the state's integrity with a MAC or AEAD under a server-side key and refuse any "
    "state whose tag fails: mrtr-state proxy in front of the server, mrtr-state's KeysetCodec, "
    "or the SDK's own codec (RequestStateSecurity in Python, createRequestStateCodec in "
    "TypeScript)"
)

CHECKS = (
    Check(
        "tamper-accepted",
        "high",
        "A tampered requestState is accepted",
        "the issued state with one decoded byte changed (several positions; the encoding kept "
        "valid), sent back with the honest request",
        _INTEGRITY,
    ),
    Check(
        "forged-accepted",
        "high",
        "A forged requestState is accepted",
        "states never issued: random bytes of the issued state's length and encoding, and, when "
        "the state is readable, its readable part written again with one value changed",
        _INTEGRITY,
    ),
    Check(
        "cross-request-accepted",
        "high",
        "A requestState is accepted for another request",
        "a state issued for the given arguments, sent with one argument value changed (after "
        "checking that the changed arguments complete a round of their own)",
        "bind the originating request inside the protected state (the method, the tool name and "
        "a digest of the arguments, never the JSON-RPC id) and compare it on the retry: "
        "mrtr-state proxy and the Python SDK do; with the TypeScript SDK, put them in the bind "
        "value",
    ),
    Check(
        "cross-principal-accepted",
        "high",
        "A requestState issued to one principal is accepted from another",
        "a state issued to principal A (--header), sent back by principal B (--other), after "
        "checking that B completes a round of its own",
        "bind the principal: see mrtr-state proxy (--principal-header, --principal-from bearer) "
        "or the SDK's bind option (bind_principal in Python, bind in TypeScript)",
    ),
    Check(
        "replay-accepted",
        "low",
        "A requestState is accepted twice",
        "the state of a completed round, sent again",
        "where the tool has effects, make each state single use server-side: mrtr-state proxy "
        "--once --replay-store, KeysetCodec(once=...), or state handles (--state-store)",
    ),
    Check(
        "state-long-lived",
        "low",
        "A requestState is still accepted after --wait",
        "an issued state sent back after waiting --wait",
        "give states a short expiry inside the protected payload (minutes): the proxy's --ttl, "
        "ttl in RequestStateSecurity, ttlSeconds in createRequestStateCodec",
    ),
    Check(
        "state-readable",
        "low",
        "The requestState is readable by the client",
        "decoding the issued state (base64, base64url, hex, JSON): signed is not secret",
        "encrypt the state (AEAD, e.g. mrtr-state's aead format or the Python SDK's codec) if it "
        "holds anything the client should not read, or keep it server-side behind a handle",
    ),
    Check(
        "state-oversized",
        "low",
        "The requestState is oversized",
        "the issued state's size: over 8 KiB is low, over 64 KiB (SEP-2778's proposed cap) medium",
        "keep the state small: keep the bulk server-side and send a handle (mrtr-state proxy "
        "--state-store)",
    ),
    Check(
        "error-leaks",
        "low",
        "A refusal leaks internals",
        "every refusal the attacks drew, read for stack traces, exception names, file paths and "
        "key material",
        'answer every refused state with one uniform error (-32602 "Invalid or expired '
        "requestState\") and keep the reason in the server's log",
    ),
)

_BY_ID = {check.id: check for check in CHECKS}


def check_named(check_id: str) -> Check:
    return _BY_ID[check_id]
