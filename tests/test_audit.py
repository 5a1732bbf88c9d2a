"""`mrtr-state audit` on a real capture from the Python SDK, and on variants with one violation."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.audit.capture import audit_capture
from mrtr_state.keys.keyset import Key

from .conftest import NOW, shared_vector
from .helpers import keys_import, run, synthetic_capture


def capture() -> list[dict[str, Any]]:
    text = shared_vector("mcp-sdk", "capture-clean.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def meta() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        shared_vector("mcp-sdk", "capture-clean.meta.json").read_text()
    )
    return data


def server_keyset() -> ms.Keyset:
    secret = meta()["server_secret"].encode()
    return ms.Keyset([Key.from_secret("mcp-py-v1", secret)])


def lines_of(entries: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(entry) for entry in entries]


#: The capture's tokens were minted with a TTL of years; the auditor raises its cap to match.
CAPTURE = ms.Policy(ttl_cap=400_000_000)
CAPTURE_ENV = {"MRTR_STATE_TTL_CAP": "400000000"}


def audit(entries: list[dict[str, Any]], **extra: Any) -> ms.audit.AuditReport:
    extra.setdefault("policy", CAPTURE)
    return audit_capture(lines_of(entries), keyset=server_keyset(), audience="fleet", **extra)


def test_the_real_capture_is_clean() -> None:
    report = audit(capture())
    assert (report.messages, report.exchanges, report.passed, report.findings) == (12, 2, 2, [])


def test_bare_messages_and_rfc3339_times_are_understood() -> None:
    wrapped = capture()
    rfc3339 = [
        {**entry, "ts": datetime.fromtimestamp(entry["ts"], UTC).isoformat()} for entry in wrapped
    ]
    assert audit(rfc3339).clean
    bare = [entry["msg"] for entry in wrapped]
    assert audit(bare).clean  # no times: judged now (these tokens live until 2036)
    assert audit(bare, now=2_100_000_000).by_kind() == {"state_expired": 2}


def _variant(edit: Any, keep: int = 12) -> list[dict[str, Any]]:
    entries = copy.deepcopy(capture())[:keep]
    edit(entries)
    return entries


def _params(entries: list[dict[str, Any]], line: int) -> dict[str, Any]:
    params: dict[str, Any] = entries[line - 1]["msg"]["params"]
    return params


def _result(entries: list[dict[str, Any]], line: int) -> dict[str, Any]:
    result: dict[str, Any] = entries[line - 1]["msg"]["result"]
    return result


def _flip_state(entries: list[dict[str, Any]]) -> None:
    state = _params(entries, 5)["requestState"]
    _params(entries, 5)["requestState"] = state[:-2] + ("AA" if state[-2:] != "AA" else "BB")


def _mint_for_paris(entries: list[dict[str, Any]]) -> None:
    """The server minted the state for another request (Paris) and answered for New York."""
    token = ms.mint(
        server_keyset(),
        "{}",
        format="mcp-py",
        method="tools/call",
        target="get_weather",
        arguments={"location": "Paris"},
        audience="fleet",
        now=entries[3]["ts"],
    )
    _result(entries, 4)["requestState"] = token
    _params(entries, 5)["requestState"] = token


VARIANTS: list[tuple[str, Any, int, tuple[int, ...]]] = [
    ("state_not_echoed", _flip_state, 12, (4, 5)),
    ("reused_request_id", lambda e: e[4]["msg"].update(id=2), 12, (3, 5)),
    (
        "responses_mismatch",
        lambda e: _params(e, 5).update(inputResponses={"other": {"action": "accept"}}),
        12,
        (4, 5),
    ),
    ("state_expired", lambda e: e[4].update(ts=2_100_000_000), 12, (4, 5)),
    (
        "state_binding_mismatch",
        _mint_for_paris,
        12,
        (4, 5),
    ),
    (
        "state_reused_on_other_request",
        lambda e: _params(e, 11).update(requestState=_params(e, 5)["requestState"]),
        12,
        (4, 11),
    ),
    (
        "undeclared_input_request",
        lambda e: _params(e, 3)["_meta"]["io.modelcontextprotocol/clientCapabilities"].clear(),
        12,
        (3, 4),
    ),
    (
        "input_required_not_allowed",
        lambda e: _result(e, 8).update(resultType="input_required"),
        12,
        (7, 8),
    ),
    (
        "empty_input_required",
        lambda e: [_result(e, 10).pop("inputRequests"), _result(e, 10).pop("requestState")],
        10,
        (9, 10),
    ),
]


@pytest.mark.parametrize(("kind", "edit", "keep", "lines"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_each_violation_is_found_exactly_once_with_its_lines(
    kind: str, edit: Any, keep: int, lines: tuple[int, ...]
) -> None:
    report = audit(_variant(edit, keep))
    assert [(f.kind, f.lines) for f in report.findings] == [(kind, lines)], report.findings


def test_an_unparseable_line_is_a_finding() -> None:
    lines = lines_of(capture())
    lines.insert(2, "{not json")
    report = audit_capture(lines, keyset=server_keyset(), audience="fleet", policy=CAPTURE)
    assert [(f.kind, f.lines) for f in report.findings] == [("unparseable_line", (3,))]


def test_large_captures_stream() -> None:
    def many() -> Any:
        entries = capture()
        for copy_number in range(2000):
            for entry in entries:
                shifted = copy.deepcopy(entry)
                if "id" in shifted["msg"]:
                    shifted["msg"]["id"] = f"{copy_number}-{shifted['msg']['id']}"
                yield json.dumps(shifted)

    report = audit_capture(many(), keyset=server_keyset(), audience="fleet", policy=CAPTURE)
    assert (report.exchanges, report.passed, report.clean) == (4000, 4000, True)


def test_audit_through_the_cli(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    keys_import(keyset, "mcp-py-v1", meta()["server_secret"])
    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join(lines_of(capture())) + "\n")
    over_cap = run("--keyset", str(keyset), "audit", "--audience", "fleet", str(clean), code=1)
    assert "exceeds this verifier's ttl_cap" in over_cap.stdout  # the default cap refuses them
    text = run(
        "--keyset", str(keyset), "audit", "--audience", "fleet", str(clean), env=CAPTURE_ENV
    ).stdout
    assert text.startswith(
        "12 messages, 2 input_required exchange(s), 2 passed, 0 never retried: clean"
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines_of(_variant(_flip_state))) + "\n")
    result = run(
        *("--keyset", str(keyset), "audit", "--json", "--audience", "fleet", str(broken)),
        code=1,
        env=CAPTURE_ENV,
    )
    report = json.loads(result.stdout)
    assert report["findings_by_kind"] == {"state_not_echoed": 1}
    assert report["findings"][0]["lines"] == [4, 5] and report["tokens_verified"] is True
    piped = run(
        "--keyset",
        str(keyset),
        "audit",
        "--audience",
        "fleet",
        "-",
        input=broken.read_text(),
        code=1,
        env=CAPTURE_ENV,
    )
    assert "line 4, 5: state_not_echoed" in piped.stdout
    no_keyset = run("--keyset", str(tmp_path / "none.json"), "audit", str(clean), code=6)
    assert "keys init" in no_keyset.stderr


# --- issue 16.5: a hostile capture gets findings, never a Python error ----------------------


DECLARED: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}


def _exchange(n: int, ts: float, meta: Any = DECLARED, mode: Any = "form") -> list[str]:
    """One input_required round trip of a synthetic capture, as JSON lines."""
    params: dict[str, Any] = {"name": "deploy", "arguments": {"n": n}, "_meta": meta}
    ask = {"method": "elicitation/create", "params": {"mode": mode, "message": "?"}}
    state = f"state-{n}-" + "x" * 200
    retry = {**params, "inputResponses": {"ask": {}}, "requestState": state}
    return [
        json.dumps(
            {
                "ts": ts,
                "msg": {"jsonrpc": "2.0", "id": f"a{n}", "method": "tools/call", "params": params},
            }
        ),
        json.dumps(
            {
                "ts": ts,
                "msg": {
                    "jsonrpc": "2.0",
                    "id": f"a{n}",
                    "result": {
                        "resultType": "input_required",
                        "inputRequests": {"ask": ask},
                        "requestState": state,
                    },
                },
            }
        ),
        json.dumps(
            {
                "ts": ts + 1,
                "msg": {"jsonrpc": "2.0", "id": f"b{n}", "method": "tools/call", "params": retry},
            }
        ),
        json.dumps({"ts": ts + 1, "msg": {"jsonrpc": "2.0", "id": f"b{n}", "result": {}}}),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
        '{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
        '{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
        '{"ts":1,"msg":' + "{" * 40 + "}" * 40 + "}",
        "\x00 not json",
    ],
    ids=["deep-100k", "duplicate-id", "nan", "huge-number", "deep-msg", "garbage"],
)
def test_a_malformed_line_is_a_finding(line: str) -> None:
    report = audit_capture([line], keyset=None)
    assert report.by_kind() == {"unparseable_line": 1}


@pytest.mark.parametrize(
    ("meta", "mode"),
    [
        (["list"], "form"),
        ({"io.modelcontextprotocol/clientCapabilities": "text"}, "form"),
        ({"io.modelcontextprotocol/clientCapabilities": {"elicitation": ["form"]}}, "form"),
        ({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}, ["form"]),
        ({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}, {"x": 1}),
        (7, None),
    ],
    ids=["meta-list", "caps-text", "elicitation-list", "mode-list", "mode-object", "meta-number"],
)
def test_odd_shapes_in_a_capture_are_findings(meta: Any, mode: Any) -> None:
    report = audit_capture(_exchange(1, 1000.0, meta=meta, mode=mode), keyset=None)
    assert report.exchanges == 1
    assert set(report.by_kind()) <= {"undeclared_input_request"}


def test_odd_retries_are_findings_with_a_keyset() -> None:
    lines = _exchange(1, 1000.0)
    retry = json.loads(lines[2])
    retry["msg"]["params"]["arguments"] = [1, 2]  # arguments of the wrong type
    retry["msg"]["params"].pop("name")
    lines[2] = json.dumps(retry)
    report = audit_capture(lines, keyset=server_keyset(), policy=CAPTURE)
    assert report.exchanges == 1  # no crash; the retry matches no open exchange


def test_memory_follows_open_exchanges_not_capture_length() -> None:
    import tracemalloc

    def peak(count: int) -> int:
        def lines() -> Iterator[str]:
            for n in range(count):
                yield from _exchange(n, 1_000_000.0 + n * 10)

        tracemalloc.start()
        report = audit_capture(lines(), keyset=None)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.exchanges == count and report.passed == count and report.clean
        return top

    small, large = peak(2_000), peak(16_000)
    assert large < small * 2, (small, large)  # 8x the capture, nowhere near 8x the memory


def test_an_oversized_capture_line_is_a_finding_through_the_cli(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("w") as out:
        out.write('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"')
        out.write("x" * (17 << 20))
        out.write('"}}\n')
        out.write('{"jsonrpc":"2.0","id":1,"result":{}}\n')
    result = run("audit", "--json", str(big), code=1)  # no keyset: structure only
    assert json.loads(result.stdout)["findings_by_kind"] == {"unparseable_line": 1}


# --- long captures: memory bounded by the ttl window ------------------------------------------

WINDOW = ms.DEFAULT_POLICY.lifetime_cap + ms.DEFAULT_POLICY.skew


def _memory_high_water(lines: Iterator[str] | list[str], **extra: Any) -> tuple[Any, int]:
    """Audit, and the most exchanges and issued states held at once (read as it runs)."""
    import mrtr_state.audit.capture as audit_module

    high = 0
    original = audit_module._Memory.forget

    def watched(self: Any, ts: float | None) -> None:
        nonlocal high
        original(self, ts)
        high = max(high, len(self.pending), len(self.issued))

    audit_module._Memory.forget = watched  # type: ignore[method-assign]
    try:
        report = audit_capture(lines, **extra)
    finally:
        audit_module._Memory.forget = original  # type: ignore[method-assign]
    return report, high


def test_a_long_timestamped_capture_holds_only_the_ttl_window() -> None:
    keyset = ms.Keyset.generate(now=NOW - 3600)
    step = 10.0  # 4 messages per exchange: 40 s each, so the window holds ~92 exchanges
    lines = synthetic_capture(keyset, 1000, start=NOW, step=step, retry=False)
    report, high = _memory_high_water(lines, keyset=keyset)
    assert report.exchanges == 1000 and report.unanswered == 1000
    assert high <= WINDOW / (2 * step) + 2  # never answered: only the window's worth is held


def test_a_bare_capture_holds_at_most_max_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    import mrtr_state.audit.capture as audit_module

    monkeypatch.setattr(audit_module, "MAX_REMEMBERED", 50)
    keyset = ms.Keyset.generate(now=NOW - 3600)
    bare = [
        json.dumps(json.loads(line)["msg"])
        for line in synthetic_capture(keyset, 400, start=NOW, step=0.01, retry=False)
    ]
    report, high = _memory_high_water(bare, keyset=keyset, now=NOW)
    assert report.unanswered == 400 and high <= 51


def test_a_retry_after_its_exchange_was_forgotten_is_still_verified() -> None:
    keyset = ms.Keyset.generate(now=NOW - 3600)
    first = list(synthetic_capture(keyset, 1, start=NOW, step=1.0))
    late = [json.loads(line) for line in first]
    late[2]["ts"] = late[3]["ts"] = NOW + WINDOW + 100  # the retry two hours later
    filler = list(synthetic_capture(keyset, 1, start=NOW + WINDOW + 50, step=1.0))
    lines = [*first[:2], filler[0], *[json.dumps(e) for e in late[2:]]]
    report = audit_capture(lines, keyset=keyset)
    assert report.by_kind() == {"state_expired": 1}
    assert report.findings[0].lines == (4,)  # the retry's line: its first round is forgotten
    assert report.unanswered == 1  # the forgotten exchange (the filler is a request only)


def test_a_retry_whose_first_round_precedes_the_capture_has_its_token_verified() -> None:
    keyset = ms.Keyset.generate(now=NOW - 3600)
    lines = list(synthetic_capture(keyset, 1, start=NOW, step=1.0))
    assert audit_capture(lines[2:], keyset=keyset).clean  # a sound token: nothing to say
    other = ms.Keyset.generate(now=NOW - 3600)
    assert audit_capture(lines[2:], keyset=other).by_kind() == {"state_invalid": 1}


def test_the_documented_example_runs_as_docs_audit_md_shows_it(tmp_path: Path) -> None:
    """docs/audit.md's session, command for command, in a copy of the repository's
    examples/audit: each command's output is what the page shows. The shipped files are the
    published capture and its secret, and the tampered copy differs in one state only."""
    import os
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    shipped = root / "examples" / "audit"
    assert (shipped / "capture.jsonl").read_bytes() == (
        shared_vector("mcp-sdk", "capture-clean.jsonl").read_bytes()
    )
    assert (shipped / "server-secret.txt").read_text() == meta()["server_secret"]
    clean = (shipped / "capture.jsonl").read_text().splitlines()
    tampered = (shipped / "tampered.jsonl").read_text().splitlines()
    assert [n for n, (a, b) in enumerate(zip(clean, tampered, strict=True), 1) if a != b] == [5]

    page = (root / "docs" / "audit.md").read_text()
    block = re.search(r"\n((?:    \$ cd examples/audit\n)(?:    .*\n)+)", page)
    assert block is not None
    lines = [line.removeprefix("    ") for line in block.group(1).splitlines()]
    commands = [line.removeprefix("$ ") for line in lines if line.startswith("$ ")]
    shown = [line for line in lines if not line.startswith("$ ")]
    assert len(commands) == 4 and shown[-1] == "exit 1"
    shutil.copytree(shipped, tmp_path / "examples" / "audit")
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-c", "\n".join(commands)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.splitlines() == shown, done.stderr
