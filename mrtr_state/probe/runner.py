"""The probe's run: the handshake, one honest round, then each check in turn, each with fresh
states where it needs them, every request counted against ``--max-requests``.

Nothing is judged before an honest round has completed: the tool must ask for input, and the
honest retry (the issued state, the same arguments, the answers) must be accepted. Only then
does a refusal of an attack mean the server refused the attack, rather than the probe's
answers or the tool's arguments. Checks that need another identity or other arguments first
check that those complete a round of their own, and are skipped (never passed) when they do not.
A reply the probe cannot read, a request that times out, or a tool that stops asking for input
ends the run with :class:`~mrtr_state.errors.ProbeFailed`, carrying the report so far.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from ..errors import ProbeFailed
from .answers import default_answers
from .leaks import leaks_in
from .recognise import format_of
from .report import Report
from .session import Budget, BudgetSpent, Session, describe
from .states import State, Variant, changed_value
from .target import Target
from .transport import Reply, shorten

__all__ = ["ProbeSettings", "plan", "run_probe"]

#: Over this, a state is a low finding; over the next, medium (SEP-2778's proposed cap).
OVERSIZED = (8 << 10, 64 << 10)
#: HTTP statuses that say "not now", not "no": the probe cannot judge through them.
_NOT_NOW = frozenset({408, 425, 429, 502, 503, 504})


class ProbeSettings:
    """What to call and how hard: the tool and its arguments, the answers (None: made from each
    input request), ``wait`` seconds for the expiry check (None: skipped), the request bound
    and each request's timeout in seconds."""

    def __init__(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        answer: dict[str, Any] | None = None,
        wait: float | None = None,
        max_requests: int = 40,
        timeout: float = 10.0,
    ) -> None:
        if not tool:
            raise ValueError("--tool must name the tool to call")
        if max_requests < 1 or timeout <= 0:
            raise ValueError("--max-requests and --timeout must be positive")
        self.tool = tool
        self.arguments = dict(arguments or {})
        self.answer = answer
        self.wait = wait
        self.max_requests = max_requests
        self.timeout = timeout


def plan(target: Target, settings: ProbeSettings) -> list[tuple[str, list[str]]]:
    """The requests each step would send, in order, without sending any: ("handshake", ...),
    ("baseline", ...), then one entry per check (those that send nothing say what they read)."""
    call = f"tools/call {settings.tool}"
    steps: list[tuple[str, list[str]]] = [
        (
            "handshake",
            [
                "server/discover (2026-07-28)",
                "if the server does not speak 2026-07-28: initialize, notifications/initialized",
            ],
        ),
        ("baseline", [f"{call} (first round)", f"{call} retry with the issued state"]),
        (
            "tamper-accepted",
            [f"{call} (first round)", f"{call} retry with a tampered state (up to 3)"],
        ),
        (
            "forged-accepted",
            [
                f"{call} (first round)",
                f"{call} retry with a random state",
                f"{call} retry with the readable part re-encoded (if the state is readable)",
            ],
        ),
        (
            "cross-request-accepted",
            [
                f"{call} with one argument changed (first round and retry: the control)",
                f"{call} (first round)",
                f"{call} retry with one argument changed",
            ],
        ),
    ]
    if target.other is not None:
        steps.append(
            (
                "cross-principal-accepted",
                [
                    f"{call} as B (first round and retry: the control)",
                    f"{call} as A (first round)",
                    f"{call} retry as B",
                ],
            )
        )
    else:
        steps.append(("cross-principal-accepted", ["skipped: no --other"]))
    steps.append(("replay-accepted", [f"{call} retry with the baseline's state, again"]))
    if settings.wait is not None:
        steps.append(
            (
                "state-long-lived",
                [f"{call} (first round)", f"{call} retry after {settings.wait:g}s"],
            )
        )
    else:
        steps.append(("state-long-lived", ["skipped: no --wait"]))
    steps += [
        ("state-readable", ["reads the baseline's state: no request"]),
        ("state-oversized", ["reads the baseline's state: no request"]),
        ("error-leaks", ["reads the refusals above: no request"]),
    ]
    return steps


def run_probe(
    target: Target, settings: ProbeSettings, *, sleep: Callable[[float], None] = time.sleep
) -> Report:
    """Probe ``target``: a :class:`Report`, or :class:`ProbeFailed` (its ``report`` the
    checks so far) when the server could not be judged."""
    report = Report(target.label, settings.tool)
    run = _Run(target, settings, report, sleep)
    try:
        run.all()
    except ProbeFailed as err:
        err.report = report
        raise
    finally:
        run.close()
    return report


class _Run:
    def __init__(
        self,
        target: Target,
        settings: ProbeSettings,
        report: Report,
        sleep: Callable[[float], None],
    ) -> None:
        self.target = target
        self.settings = settings
        self.report = report
        self.sleep = sleep
        self.budget = Budget(settings.max_requests)
        self.transport = target.transport()
        self.session = Session(self.transport, self.budget, settings.timeout)
        self.args = settings.arguments
        self.states: list[str] = []  # every state issued or sent, for the leak check
        self.refusals: list[tuple[str, Reply]] = []

    def close(self) -> None:
        with contextlib.suppress(BudgetSpent, ProbeFailed):
            self.session.close()
        self.report.requests = self.budget.sent

    # --- rounds ----------------------------------------------------------------------------

    def _first(
        self, arguments: dict[str, Any], *, other: bool = False, control: bool = False
    ) -> tuple[str, Any] | str:
        """A first round: (the issued state, the input requests); for a control round a
        failure is returned as text, for any other it ends the run."""
        reply = self.session.call(self.settings.tool, arguments, other=other)
        _unjudgeable(reply, "a first round")
        result = _result(reply)
        if result is not None and result.get("resultType") == "input_required":
            state = result.get("requestState")
            if isinstance(state, str) and state:
                self.states.append(state)
                return state, result.get("inputRequests")
            problem = "asked for input without a requestState: there is no state to probe"
        else:
            problem = f"did not ask for input ({describe(reply)})"
        if control:
            return problem
        raise ProbeFailed(f"tool {self.settings.tool} {problem}")

    def _retry(
        self, state: str, arguments: dict[str, Any], requests: Any, *, other: bool = False
    ) -> tuple[bool, Reply]:
        """A retry: (accepted, the reply). Accepted is a result that is neither input_required
        nor isError; an error, an isError result or a fresh input_required is a refusal."""
        self.states.append(state)
        answers = (
            self.settings.answer if self.settings.answer is not None else default_answers(requests)
        )
        reply = self.session.call(
            self.settings.tool, arguments, state=state, responses=answers, other=other
        )
        _unjudgeable(reply, "a retry")
        result = _result(reply)
        accepted = (
            result is not None
            and result.get("resultType") != "input_required"
            and result.get("isError") is not True
        )
        return accepted, reply

    def _attack(
        self,
        what: str,
        state: str,
        arguments: dict[str, Any],
        requests: Any,
        *,
        other: bool = False,
    ) -> tuple[bool, Reply]:
        accepted, reply = self._retry(state, arguments, requests, other=other)
        if not accepted:
            self.refusals.append((what, reply))
        return accepted, reply

    # --- the run ---------------------------------------------------------------------------

    def all(self) -> None:
        try:
            server = self.session.handshake()
            self.report.server = server.to_dict()
            state, requests = self._baseline()
        except BudgetSpent:
            raise ProbeFailed(
                f"--max-requests {self.settings.max_requests} is too few: the handshake and one "
                "honest round need up to 5"
            ) from None
        self._passive(State(state))
        steps: list[tuple[str, Callable[[], None]]] = [
            ("tamper-accepted", self._tamper),
            ("forged-accepted", self._forged),
            ("cross-request-accepted", self._cross_request),
            ("cross-principal-accepted", self._cross_principal),
            ("replay-accepted", lambda: self._replay(state, requests)),
            ("state-long-lived", self._long_lived),
        ]
        spent = False
        for check_id, step in steps:
            if spent:
                self.report.skipped(check_id, self._spent())
                continue
            try:
                step()
            except BudgetSpent:
                spent = True
                self.report.skipped(check_id, self._spent())
        self._leaks()

    def _spent(self) -> str:
        return f"not tried: --max-requests {self.settings.max_requests} reached"

    def _issued(self) -> tuple[str, Any]:
        """A first round with the probe's arguments: (the issued state, the input requests);
        a failure ends the run."""
        first = self._first(self.args)
        assert isinstance(first, tuple)  # (only a control round answers a failure as text)
        return first

    def _crossed(
        self, check_id: str, arguments: dict[str, Any], other: bool, unlike: str
    ) -> tuple[str, bool, Reply] | None:
        """A state issued to A for the probe's arguments, retried with ``arguments`` (as B
        when ``other``): (the state, whether it was accepted, the answer). Tried only once a
        control round shows that such a retry completes a round of its own; else the check is
        skipped (``unlike``: what differs, for the reason) and None returned."""
        control = self._control(arguments, other)
        if control is not None:
            self.report.skipped(check_id, f"{unlike} a round of its own: {control}")
            return None
        issued, requests = self._issued()
        accepted, reply = self._attack(check_id, issued, arguments, requests, other=other)
        return issued, accepted, reply

    def _baseline(self) -> tuple[str, Any]:
        state, requests = self._issued()
        self.report.format = format_of(state)
        accepted, reply = self._retry(state, self.args, requests)
        if not accepted:
            raise ProbeFailed(
                f"the honest retry (the issued state, the same arguments) was refused, so no "
                f"refusal can be judged: {describe(reply)}; give the answers the tool expects "
                "with --answer"
            )
        return state, requests

    def _try_variants(
        self, check_id: str, issued: str, requests: Any, variants: list[Variant]
    ) -> None:
        for variant in variants:
            accepted, reply = self._attack(
                f"{check_id}: {variant.how}", variant.text, self.args, requests
            )
            if accepted:
                self.report.failed(
                    check_id,
                    f"accepted ({variant.how})",
                    [
                        f"issued: {_state(issued)}",
                        f"sent:   {_state(variant.text)} ({variant.how})",
                        f"answer: {describe(reply)}",
                    ],
                )
                return
        self.report.passed(check_id, f"{len(variants)} refused")

    def _tamper(self) -> None:
        issued, requests = self._issued()
        variants = State(issued).tampered()
        if not variants:
            self.report.skipped(
                "tamper-accepted", "no part of the state decodes, so none can be changed"
            )
            return
        self._try_variants("tamper-accepted", issued, requests, variants)

    def _forged(self) -> None:
        issued, requests = self._issued()
        state = State(issued)
        variants = [state.forged_random()]
        readable = state.forged_readable()
        if readable is not None:
            variants.append(readable)
        self._try_variants("forged-accepted", issued, requests, variants)

    def _cross_request(self) -> None:
        changed = changed_value(self.args)
        if changed is None:
            self.report.skipped(
                "cross-request-accepted", "the arguments hold no value to change (give --arguments)"
            )
            return
        other_args, how = changed
        unlike = f"the changed arguments ({how}) do not complete"
        crossed = self._crossed("cross-request-accepted", other_args, False, unlike)
        if crossed is None:
            return
        _issued, accepted, reply = crossed
        self._judge(
            "cross-request-accepted",
            accepted,
            f"accepted a state issued for other arguments ({how})",
            [f"issued for: {_json(self.args)}", f"sent with:  {_json(other_args)} ({how})"],
            f"answer: {describe(reply)}",
            f"refused with {how}",
        )

    def _judge(
        self,
        check_id: str,
        accepted: bool,
        failed: str,
        evidence: list[str],
        answer: str,
        passed: str,
    ) -> None:
        """An attack's verdict: failed when the server accepted it (``failed``, with the
        evidence and the server's ``answer``), else passed (``passed``)."""
        if accepted:
            self.report.failed(check_id, failed, [*evidence, answer])
        else:
            self.report.passed(check_id, passed)

    def _control(self, arguments: dict[str, Any], other: bool) -> str | None:
        """None when a round with ``arguments`` (as B when ``other``) completes, else why not."""
        first = self._first(arguments, other=other, control=True)
        if isinstance(first, str):
            return first
        state, requests = first
        accepted, reply = self._retry(state, arguments, requests, other=other)
        return None if accepted else f"its honest retry was refused ({describe(reply)})"

    def _cross_principal(self) -> None:
        if self.target.argv is not None:
            self.report.skipped("cross-principal-accepted", "stdio carries no principal")
            return
        if self.target.other is None:
            self.report.skipped(
                "cross-principal-accepted",
                "not tried: give --other 'Name: value' (principal B's credentials)",
            )
            return
        unlike = "principal B (--other) does not complete"
        crossed = self._crossed("cross-principal-accepted", self.args, True, unlike)
        if crossed is None:
            return
        issued, accepted, reply = crossed
        self._judge(
            "cross-principal-accepted",
            accepted,
            "accepted from B a state issued to A",
            [
                f"issued to A (--header): {_state(issued)}",
                "sent by B (--other) with the same arguments",
            ],
            f"answer: {describe(reply)}",
            "B's retry with A's state refused",
        )

    def _replay(self, state: str, requests: Any) -> None:
        accepted, reply = self._attack("replay-accepted", state, self.args, requests)
        self._judge(
            "replay-accepted",
            accepted,
            "a state was accepted a second time",
            [f"sent twice: {_state(state)}", "first answer: accepted (the honest round)"],
            f"second answer: {describe(reply)}",
            "the second use was refused",
        )

    def _long_lived(self) -> None:
        wait = self.settings.wait
        if wait is None:
            self.report.skipped("state-long-lived", "not tried: give --wait DURATION")
            return
        issued, requests = self._issued()
        self.sleep(wait)
        accepted, reply = self._attack("state-long-lived", issued, self.args, requests)
        self._judge(
            "state-long-lived",
            accepted,
            f"accepted {wait:g}s after it was issued",
            [f"issued: {_state(issued)}", f"sent back after {wait:g}s"],
            f"answer: {describe(reply)}",
            f"refused after {wait:g}s",
        )

    # --- what needs no request -------------------------------------------------------------

    def _passive(self, state: State) -> None:
        readable = state.readable()
        if readable is not None:
            self.report.failed(
                "state-readable",
                "the state decodes to JSON",
                [f"state: {_state(state.text)}", f"reads as: {shorten(_json(readable), 200)}"],
            )
        else:
            self.report.passed("state-readable", "the state does not decode to JSON")
        size = state.size
        if size > OVERSIZED[1]:
            self.report.failed(
                "state-oversized",
                f"{size} bytes, over 64 KiB",
                [f"state: {size} bytes (over SEP-2778's proposed 64 KiB cap)"],
                severity="medium",
            )
        elif size > OVERSIZED[0]:
            self.report.failed(
                "state-oversized",
                f"{size} bytes, over 8 KiB",
                [f"state: {size} bytes (over 8 KiB)"],
            )
        else:
            self.report.passed("state-oversized", f"{size} bytes")

    def _leaks(self) -> None:
        if not self.refusals:
            self.report.skipped(
                "error-leaks", "no refusal to read: every attack was accepted or none was tried"
            )
            return
        for what, reply in self.refusals:
            found = leaks_in(_words(reply), self.states)
            if found:
                self.report.failed(
                    "error-leaks",
                    "a refusal names " + ", ".join(kind for kind, _ in found),
                    [
                        f"after: {what}",
                        *(f"found {kind}: {shorten(text, 120)}" for kind, text in found),
                        f"answer: {describe(reply)}",
                    ],
                )
                return
        self.report.passed("error-leaks", f"{len(self.refusals)} refusal(s) read, nothing found")


def _unjudgeable(reply: Reply, what: str) -> None:
    """A reply that says "not now" (overloaded, rate-limited, a gateway's timeout) is no
    verdict on the state: the run ends instead of counting it a refusal."""
    if reply.message is None and reply.status in _NOT_NOW:
        raise ProbeFailed(
            f"{what} was answered HTTP {reply.status} (not now), which says nothing about the "
            f"state: {shorten(reply.text.strip(), 120) or 'no body'}"
        )


def _result(reply: Reply) -> dict[str, Any] | None:
    message = reply.message
    if message is None or "error" in message:
        return None
    result = message.get("result")
    return result if isinstance(result, dict) else None


def _words(reply: Reply) -> str:
    """Everything a reply says: its text as received, and each string inside its JSON-RPC
    message as decoded (a traceback in an error message arrives with its newlines escaped)."""
    found = [reply.text]

    def walk(node: Any) -> None:
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(reply.message)
    return "\n".join(found)


def _state(text: str) -> str:
    return repr(shorten(text, 72))


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
