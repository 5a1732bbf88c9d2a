"""Audit a captured MCP session: was every multi round-trip exchange in it sound?

Input is JSON Lines, one JSON-RPC message per line, bare or wrapped as
``{"ts": <unix seconds or RFC 3339>, "dir": "c2s"|"s2c", "msg": {...}}``. The audit pairs each
``input_required`` result with its retry (same method, target and arguments) and checks the
client's rules and the server's, each failure a named :class:`Finding` with the lines involved.

It streams, and its memory is bounded by the ttl window, not by the length of the capture:
requests awaiting their response (at most ``MAX_OUTSTANDING``), exchanges awaiting their retry
and issued states (16-byte digests) are kept for ``ttl_cap + skew`` of capture time, no token of
theirs being valid after that, and at most ``MAX_REMEMBERED`` of each when lines carry no time.
Each is forgotten in the order it came, at a constant cost per message. An exchange whose retry
never came within the window counts as unanswered; a retry that comes later (or whose first
round precedes the capture) still has its token verified.

A capture is hostile input: lines are parsed with the strict JSON reader (nesting, duplicate
members, NaN and huge numbers refused) and every shape of message gets a finding or passes, never
a Python error.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._encoding import EncodingError, json_loads
from .._printable import printable
from ..errors import BindingMismatch, InvalidToken, TimeWindowError
from ..keys.keyset import Keyset
from ..sdk.mcp import (
    INPUT_REQUIRED_METHODS,
    CapabilityMissing,
    check_capabilities,
    request_target,
    retry_target,
)
from ..tokens.binding import binding_of
from ..tokens.claims import arguments_digest
from ..tokens.facade import verify
from ..tokens.policy import DEFAULT_POLICY, Policy

__all__ = ["FINDING_KINDS", "AuditReport", "Finding", "audit_capture"]

FINDING_KINDS = {
    "empty_capture": "the capture holds no message at all (no line, or blank lines only)",
    "unparseable_line": "a line that is not a JSON-RPC message (or not strict JSON)",
    "input_required_not_allowed": "InputRequiredResult on a method other than tools/call, "
    "prompts/get, resources/read",
    "empty_input_required": "InputRequiredResult with neither inputRequests nor requestState",
    "undeclared_input_request": "an input request of a kind the client did not declare",
    "state_not_echoed": "the retry did not echo requestState byte for byte",
    "reused_request_id": "the retry reused the JSON-RPC id of the original request",
    "responses_mismatch": "the inputResponses keys do not answer the inputRequests keys",
    "state_invalid": "the requestState does not verify under the keyset",
    "state_expired": "the requestState had expired (or was not yet valid) at the retry",
    "state_binding_mismatch": "the requestState is bound to another request, audience or principal",
    "state_reused_on_other_request": "a requestState presented on a request other than the "
    "one it was issued for",
}


@dataclass(frozen=True)
class Finding:
    kind: str
    lines: tuple[int, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "lines": list(self.lines), "message": self.message}


@dataclass
class AuditReport:
    lines: int = 0
    messages: int = 0
    exchanges: int = 0
    passed: int = 0
    unanswered: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for finding in self.findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "messages": self.messages,
            "exchanges": self.exchanges,
            "passed": self.passed,
            "unanswered": self.unanswered,
            "clean": self.clean,
            "findings_by_kind": self.by_kind(),
            "findings": [finding.to_dict() for finding in self.findings],
        }


@dataclass
class _Request:
    line: int
    method: str
    params: dict[str, Any]
    ts: float | None


#: How deeply a captured message may nest (tool arguments nest more than our claims).
MAX_CAPTURE_DEPTH = 64
#: Requests awaiting their response that are remembered; the oldest are forgotten past this.
MAX_OUTSTANDING = 100_000
#: Exchanges awaiting their retry, and issued states, remembered when lines carry no time.
MAX_REMEMBERED = 200_000


def _id_key(value: Any) -> Any:
    """A JSON-RPC id as a dict key: 1, 1.0, "1" and true stay distinct, as JSON tells them."""
    kind = type(value)
    if kind is str or kind is int or value is None:
        return (kind, value)
    return json.dumps(value, sort_keys=True)  # a float, or an id no client should send


def _digest(state: str) -> bytes:
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).digest()[:16]


@dataclass
class _Exchange:
    request_line: int
    request_id: Any
    result_line: int
    input_keys: frozenset[str]
    state: bytes | None  # digest of the state the result sent
    ts: float | None


def _timestamp(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _messages(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any] | None, float | None]]:
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            document = json_loads(text, max_depth=MAX_CAPTURE_DEPTH)
        except EncodingError:
            yield number, None, None
            continue
        if isinstance(document, dict) and "msg" in document and isinstance(document["msg"], dict):
            yield number, document["msg"], _timestamp(document.get("ts"))
        elif isinstance(document, dict) and document.get("jsonrpc") == "2.0":
            yield number, document, None
        else:
            yield number, None, None


def _identity(method: str, params: dict[str, Any]) -> tuple[str, str, str]:
    target, arguments = request_target(method, params)
    return method, target, arguments_digest(arguments)


def audit_capture(
    lines: Iterable[str],
    *,
    keyset: Keyset | None,
    audience: str | None = None,
    principal: str | None = None,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> AuditReport:
    """Audit a capture; see the module docstring. Without a keyset the tokens are not verified."""
    report = AuditReport()
    requests: dict[Any, _Request] = {}
    memory = _Memory(policy.lifetime_cap + policy.skew)

    def find(kind: str, lines_involved: tuple[int, ...], message: str) -> None:
        # messages quote the capture (methods, names, keys): never let it drive a terminal
        report.findings.append(Finding(kind, lines_involved, printable(message)))

    for number, message, ts in _messages(lines):
        report.lines = number
        if message is None:
            find("unparseable_line", (number,), "not a JSON-RPC message")
            continue
        report.messages += 1
        memory.forget(ts)
        method = message.get("method")
        key = _id_key(message.get("id"))
        if isinstance(method, str) and "id" in message:
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            request = _Request(number, method, params or {}, ts)
            requests[key] = request
            if len(requests) > MAX_OUTSTANDING:
                del requests[next(iter(requests))]
            if method in INPUT_REQUIRED_METHODS and (
                "requestState" in request.params or "inputResponses" in request.params
            ):
                _check_retry(
                    request,
                    message.get("id"),
                    memory,
                    find,
                    report,
                    keyset=keyset,
                    audience=audience,
                    principal=principal,
                    now=now,
                    policy=policy,
                )
            continue
        if "id" not in message or ("result" not in message and "error" not in message):
            continue  # a notification
        answered = requests.pop(key, None)
        result = message.get("result")
        if answered is None or not isinstance(result, dict):
            continue
        if result.get("resultType") != "input_required":
            continue
        _check_input_required(answered, message.get("id"), number, result, ts, memory, find, report)
    report.unanswered = len(memory.pending) + memory.lapsed
    if not report.messages and not report.findings:
        # nothing audited is not a clean audit: a capture that came out empty (a wrong path, a
        # capture that never ran) must not pass a gate that checks the exit code
        find("empty_capture", (), "the capture holds no message at all")
    return report


_Identity = tuple[str, str, str]


class _Memory:
    """What the audit remembers between lines, each kind forgotten oldest first.

    ``pending``: exchanges awaiting their retry, by request identity; ``issued``: digest of each
    issued state -> (identity, result line). An entry goes when no token of its time can still
    be valid (``window`` seconds of capture time) or, for lines without a time, when more than
    ``MAX_REMEMBERED`` of its kind are held. The queues hold entries in arrival order, so each
    message pops only what has lapsed since the one before.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self.pending: dict[_Identity, _Exchange] = {}
        self.issued: dict[bytes, tuple[_Identity, int]] = {}
        self.lapsed = 0  # exchanges forgotten with no retry: unanswered
        self._pending_order: deque[tuple[float | None, _Identity, int]] = deque()
        self._issued_order: deque[tuple[float | None, bytes, int]] = deque()

    def remember(self, identity: _Identity, exchange: _Exchange) -> None:
        self.pending[identity] = exchange
        self._pending_order.append((exchange.ts, identity, exchange.result_line))
        if exchange.state is not None:
            self.issued[exchange.state] = (identity, exchange.result_line)
            self._issued_order.append((exchange.ts, exchange.state, exchange.result_line))

    def forget(self, ts: float | None) -> None:
        before = None if ts is None else ts - self.window
        order = self._pending_order
        while order and (len(order) > MAX_REMEMBERED or _older(order[0][0], before)):
            _at, identity, line = order.popleft()
            exchange = self.pending.get(identity)
            if exchange is not None and exchange.result_line == line:
                del self.pending[identity]
                self.lapsed += 1
        issued = self._issued_order
        while issued and (len(issued) > MAX_REMEMBERED or _older(issued[0][0], before)):
            _at, digest, line = issued.popleft()
            entry = self.issued.get(digest)
            if entry is not None and entry[1] == line:
                del self.issued[digest]


def _older(at: float | None, before: float | None) -> bool:
    return at is not None and before is not None and at < before


def _check_input_required(
    request: _Request,
    request_id: Any,
    line: int,
    result: dict[str, Any],
    ts: float | None,
    memory: _Memory,
    find: Any,
    report: AuditReport,
) -> None:
    report.exchanges += 1
    lines = (request.line, line)
    if request.method not in INPUT_REQUIRED_METHODS:
        find(
            "input_required_not_allowed",
            lines,
            f"{request.method} answered input_required; only "
            f"{', '.join(INPUT_REQUIRED_METHODS)} may",
        )
        return
    input_requests = result.get("inputRequests")
    state = result.get("requestState")
    if not input_requests and state is None:
        find("empty_input_required", lines, "neither inputRequests nor requestState")
    if isinstance(input_requests, dict) and input_requests:
        try:
            check_capabilities(request.params.get("_meta"), input_requests)
        except CapabilityMissing as err:
            find("undeclared_input_request", lines, str(err))
        except ValueError as err:
            find("undeclared_input_request", lines, str(err))
    identity = _identity(request.method, request.params)
    exchange = _Exchange(
        request.line,
        request_id,
        line,
        frozenset(input_requests) if isinstance(input_requests, dict) else frozenset(),
        _digest(state) if isinstance(state, str) else None,
        ts,
    )
    memory.remember(identity, exchange)


def _check_retry(
    retry: _Request,
    retry_id: Any,
    memory: _Memory,
    find: Any,
    report: AuditReport,
    *,
    keyset: Keyset | None,
    audience: str | None,
    principal: str | None,
    now: float | None,
    policy: Policy,
) -> None:
    identity = _identity(retry.method, retry.params)
    state = retry.params.get("requestState")
    digest = _digest(state) if isinstance(state, str) else None
    exchange = memory.pending.pop(identity, None)
    first = memory.issued.get(digest) if digest is not None else None
    if first is not None and first[0] != identity:
        find(
            "state_reused_on_other_request",
            (first[1], retry.line),
            f"the requestState issued on line {first[1]} was presented on another "
            f"request ({retry.method} {identity[1]})",
        )
        return
    moment = retry.ts if retry.ts is not None else now
    if exchange is None:
        # a retry whose first round is not in the capture, or came too long ago to remember:
        # only its token can be judged (a late one is found expired)
        if keyset is not None and isinstance(state, str):
            _verify_retry(
                retry, state, (retry.line,), find, moment, keyset, audience, principal, policy
            )
        return
    before = len(report.findings)
    lines = (exchange.result_line, retry.line)
    if digest != exchange.state:
        find(
            "state_not_echoed",
            lines,
            "the retry carries a requestState the result did not send"
            if exchange.state is None
            else "the retry did not echo requestState byte for byte",
        )
    if _id_key(retry_id) == _id_key(exchange.request_id):
        find(
            "reused_request_id",
            (exchange.request_line, retry.line),
            f"the retry reused JSON-RPC id {retry_id!r}",
        )
    responses = retry.params.get("inputResponses")
    answered = frozenset(responses) if isinstance(responses, dict) else frozenset()
    if answered != exchange.input_keys:
        find(
            "responses_mismatch",
            lines,
            f"inputResponses {sorted(answered)} do not answer inputRequests "
            f"{sorted(exchange.input_keys)}",
        )
    if keyset is not None and isinstance(state, str) and digest == exchange.state:
        _verify_retry(retry, state, lines, find, moment, keyset, audience, principal, policy)
    if len(report.findings) == before:
        report.passed += 1


def _verify_retry(
    retry: _Request,
    state: str,
    lines: tuple[int, ...],
    find: Any,
    moment: float | None,
    keyset: Keyset,
    audience: str | None,
    principal: str | None,
    policy: Policy,
) -> None:
    """Verify a retry's token for the retry's own request at the retry's time; a finding if not."""
    try:
        target, arguments = retry_target(retry.method, retry.params)
        binding = binding_of(principal, None, audience, retry.method, target, arguments, None)
        verify(keyset, state, expect=binding, now=moment, policy=policy)
    except TimeWindowError as err:
        find("state_expired", lines, str(err))
    except BindingMismatch as err:
        find("state_binding_mismatch", lines, str(err))
    except InvalidToken as err:
        find("state_invalid", lines, str(err))
    except ValueError as err:  # arguments no request could carry, and the like
        find("state_binding_mismatch", lines, str(err))
