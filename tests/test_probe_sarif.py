"""``mrtr-state probe --sarif FILE``: SARIF 2.1.0, validated against the published OASIS schema
(tests/vectors/published/sarif/, its provenance in that folder's README), so it uploads to
code-scanning dashboards: with findings, clean, and from a probe that could not finish."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import shared_vector
from .helpers import run
from .probe_servers import RawServer, hang
from .servers import NaiveServer, serving

jsonschema = pytest.importorskip("jsonschema", reason="pinned in requirements/dev.txt")

DEPLOY = ("--tool", "deploy", "--arguments", '{"env":"prod"}')


def validated(path: Path) -> dict[str, Any]:
    schema = json.loads(shared_vector("sarif", "sarif-schema-2.1.0.json").read_text())
    log: dict[str, Any] = json.loads(path.read_text())
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert problems == []
    return log


def test_the_schema_control_refuses_what_sarif_does_not_allow() -> None:
    """The validator is live: a level SARIF has no word for fails, as does a missing version."""
    schema = json.loads(shared_vector("sarif", "sarif-schema-2.1.0.json").read_text())
    validator = jsonschema.Draft4Validator(schema)
    good = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": []}]}
    assert list(validator.iter_errors(good)) == []
    bad_level = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "x"}},
                "results": [{"message": {"text": "m"}, "level": "high"}],
            }
        ],
    }
    assert list(validator.iter_errors(bad_level))
    assert list(validator.iter_errors({"runs": []}))


def test_findings_become_sarif_results_at_their_severity_levels(tmp_path: Path) -> None:
    sarif, again = tmp_path / "probe.sarif", tmp_path / "again.sarif"
    with serving(NaiveServer()) as url:
        report = json.loads(
            run("probe", url + "/mcp", *DEPLOY, "--json", "--sarif", str(sarif), code=1).stdout
        )
        run("probe", url + "/mcp", *DEPLOY, "--sarif", str(again), code=1)
    log = validated(sarif)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    (one_run,) = log["runs"]
    driver = one_run["tool"]["driver"]
    assert driver["name"] == "mrtr-state"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert rule_ids == [check["id"] for check in report["checks"]]  # every check, in order
    levels = {"high": "error", "medium": "warning", "low": "note"}
    assert [r["ruleId"] for r in one_run["results"]] == [f["id"] for f in report["findings"]]
    for result, finding in zip(one_run["results"], report["findings"], strict=True):
        assert result["level"] == levels[finding["severity"]]
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert finding["remedy"] in result["message"]["text"]
        assert (
            result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            == (report["target"])
        )
    assert one_run["invocations"] == [{"executionSuccessful": True}]
    # the same finding on the same target keeps its fingerprint from run to run; each differs
    first = [r["partialFingerprints"] for r in one_run["results"]]
    second = [r["partialFingerprints"] for r in json.loads(again.read_text())["runs"][0]["results"]]
    assert first == second
    assert len({json.dumps(f) for f in first}) == len(first)


def test_a_probe_that_could_not_finish_says_so_in_sarif(tmp_path: Path) -> None:
    sarif = tmp_path / "probe.sarif"
    with RawServer(hang) as server:
        run("probe", server.url, *DEPLOY, "--timeout", "1s", "--sarif", str(sarif), code=8)
    log = validated(sarif)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert "no answer to server/discover" in note["message"]["text"]
    assert log["runs"][0]["results"] == []
