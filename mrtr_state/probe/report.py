"""What a probe found: one result per check, the findings with their evidence, and what was
probed. :meth:`Report.to_dict` is the ``--json`` shape; the text and SARIF views are made from
the same object.
"""

from __future__ import annotations

from typing import Any

from .checks import CHECKS, SEVERITIES, check_named

__all__ = ["CheckResult", "Finding", "Report"]


class CheckResult:
    """``result`` is "pass", "fail" or "skipped" (never a pass for what was not tried); ``why``
    says what was seen, or why it was not tried."""

    __slots__ = ("id", "result", "why")

    def __init__(self, id: str, result: str, why: str) -> None:
        self.id, self.result, self.why = id, result, why

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "result": self.result, "why": self.why}


class Finding:
    """A check that failed: ``evidence`` says what was sent and what came back (shortened)."""

    __slots__ = ("evidence", "id", "severity")

    def __init__(self, id: str, severity: str, evidence: list[str]) -> None:
        self.id, self.severity, self.evidence = id, severity, evidence

    @property
    def title(self) -> str:
        return check_named(self.id).title

    @property
    def remedy(self) -> str:
        return check_named(self.id).remedy

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "remedy": self.remedy,
        }


class Report:
    """The probe's findings about one server and tool, filled in as the checks run."""

    def __init__(self, target: str, tool: str) -> None:
        self.target = target
        self.tool = tool
        self.server: dict[str, Any] | None = None
        self.format: str | None = None
        self.results: dict[str, CheckResult] = {}
        self._findings: list[Finding] = []
        self.requests = 0

    @property
    def findings(self) -> list[Finding]:
        """The findings in the table's order (not the order the checks ran in)."""
        order = {check.id: n for n, check in enumerate(CHECKS)}
        return sorted(self._findings, key=lambda finding: order[finding.id])

    def passed(self, check_id: str, why: str) -> None:
        self.results[check_id] = CheckResult(check_id, "pass", why)

    def skipped(self, check_id: str, why: str) -> None:
        self.results[check_id] = CheckResult(check_id, "skipped", why)

    def failed(self, check_id: str, why: str, evidence: list[str], severity: str = "") -> None:
        self.results[check_id] = CheckResult(check_id, "fail", why)
        chosen = severity or check_named(check_id).severity
        self._findings.append(Finding(check_id, chosen, evidence))

    @property
    def checks(self) -> list[CheckResult]:
        """A result for every check, in the table's order; one never reached is skipped."""
        return [
            self.results.get(check.id) or CheckResult(check.id, "skipped", "not reached")
            for check in CHECKS
        ]

    def at_or_above(self, severity: str) -> list[Finding]:
        """The findings at ``severity`` or more severe ("none": no finding counts)."""
        if severity == "none":
            return []
        ranks = SEVERITIES[: SEVERITIES.index(severity) + 1]
        return [finding for finding in self.findings if finding.severity in ranks]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "server": self.server,
            "format": self.format,
            "checks": [result.to_dict() for result in self.checks],
            "findings": [finding.to_dict() for finding in self.findings],
            "requests": self.requests,
        }
