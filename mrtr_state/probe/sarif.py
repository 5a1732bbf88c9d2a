"""The report as SARIF 2.1.0 (OASIS), the format code-scanning dashboards take in.

One run of the tool ``mrtr-state``; its rules are every check (so a dashboard knows each id even
when it passed), each result one finding at the level its severity maps to (high: error, medium:
warning, low: note), located at the probed endpoint, with a fingerprint that stays the same for
the same finding on the same target, so a dashboard tracks it across runs instead of opening a new
alert each time. A run that could not judge the server says so in its invocation.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..about import package_version
from .checks import CHECKS
from .report import Report

__all__ = ["SARIF_SCHEMA", "sarif_log"]

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
_INFORMATION = "https://github.com/mrtr-state/mrtr-state/blob/main/docs/probe.md"
_LEVELS = {"high": "error", "medium": "warning", "low": "note"}
#: GitHub code scanning sorts security alerts by this property (CVSS-like, 0.1-10.0).
_SCORES = {"high": "8.1", "medium": "5.3", "low": "3.1"}


def _rule(index: int) -> dict[str, Any]:
    check = CHECKS[index]
    return {
        "id": check.id,
        "name": "".join(part.title() for part in check.id.split("-")),
        "shortDescription": {"text": check.title},
        "fullDescription": {"text": f"Tried: {check.tries}."},
        "help": {"text": f"Fix: {check.remedy}.", "markdown": f"**Fix:** {check.remedy}."},
        "helpUri": f"{_INFORMATION}#{check.id}",
        "defaultConfiguration": {"level": _LEVELS[check.severity]},
        "properties": {
            "tags": ["security", "mcp", "requestState"],
            "security-severity": _SCORES[check.severity],
            "precision": "high",
        },
    }


def sarif_log(report: Report, tool: str, failure: str | None = None) -> dict[str, Any]:
    """The SARIF log of ``report`` (``failure``: why the probe could not finish, if it did not)."""
    indexes = {check.id: n for n, check in enumerate(CHECKS)}
    results = []
    for finding in report.findings:
        where = f"{report.target} tool {tool}"
        fingerprint = hashlib.sha256(f"{finding.id}\0{report.target}\0{tool}".encode()).hexdigest()
        evidence = "\n".join(finding.evidence)
        results.append(
            {
                "ruleId": finding.id,
                "ruleIndex": indexes[finding.id],
                "level": _LEVELS[finding.severity],
                "message": {
                    "text": f"{finding.title} ({where}).\n{evidence}\nFix: {finding.remedy}."
                },
                "locations": [
                    {
                        "physicalLocation": {"artifactLocation": {"uri": report.target}},
                        "logicalLocations": [{"name": tool, "kind": "function"}],
                    }
                ],
                "partialFingerprints": {"mrtrStateProbe/v1": fingerprint},
                "properties": {"severity": finding.severity},
            }
        )
    invocation: dict[str, Any] = {"executionSuccessful": failure is None}
    if failure is not None:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": f"the server could not be probed: {failure}"}}
        ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "mrtr-state",
                        "version": package_version(),
                        "informationUri": _INFORMATION,
                        "rules": [_rule(n) for n in range(len(CHECKS))],
                    }
                },
                "invocations": [invocation],
                "results": results,
                "properties": {"target": report.target, "tool": tool, "requests": report.requests},
            }
        ],
    }
