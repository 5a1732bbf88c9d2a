"""``mrtr-state probe``: how a live MCP server guards its requestState, tried from outside.

Point it at a Streamable HTTP endpoint or a stdio command and a tool that answers
``input_required``; it completes one honest round, then sends back tampered, forged, misbound
(other arguments, another principal), replayed and aged states and reports which were accepted,
plus what the issued state shows (readable, oversized) and what refusals leak. One small module
per job: the transports (:mod:`.http`, :mod:`.stdio`), the session and handshake
(:mod:`.session`), the answers (:mod:`.answers`), the states the attacks send (:mod:`.states`),
the checks and their order (:mod:`.checks`, :mod:`.runner`), the report and its SARIF view
(:mod:`.report`, :mod:`.sarif`).

    from mrtr_state.probe import ProbeSettings, Target, run_probe
    target = Target(url="http://127.0.0.1:8000/mcp", headers=[("Authorization", "Bearer ...")])
    report = run_probe(target, ProbeSettings("deploy", {"env": "prod"}))
    [finding.id for finding in report.findings]
"""

from __future__ import annotations

from .checks import CHECKS, SEVERITIES, Check
from .report import CheckResult, Finding, Report
from .runner import ProbeSettings, plan, run_probe
from .sarif import SARIF_SCHEMA, sarif_log
from .target import Target, parse_header

__all__ = [
    "CHECKS",
    "SARIF_SCHEMA",
    "SEVERITIES",
    "Check",
    "CheckResult",
    "Finding",
    "ProbeSettings",
    "Report",
    "Target",
    "parse_header",
    "plan",
    "run_probe",
    "sarif_log",
]
