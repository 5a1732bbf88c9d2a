"""``mrtr-state probe`` as a script meets it: usage errors (exit 2), servers that cannot be judged
(exit 8, never a traceback, never a pass), the request bound, the timeout, --dry-run (nothing
sent), the text and --json views, --fail-on."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import run
from .probe_servers import (
    RawServer,
    answer_garbage,
    answer_not_json,
    close_mid_body,
    close_mid_stream,
    hang,
)
from .servers import NaiveServer, free_port, serving

DEPLOY = ("--tool", "deploy", "--arguments", '{"env":"prod"}')


# --- usage: exit 2, before anything is sent ---------------------------------------------------

USAGE = {
    "url-without-scheme": (
        ["127.0.0.1:8000/mcp", *DEPLOY],
        "the server URL needs its scheme: http://127.0.0.1:8000/mcp or https://",
    ),
    "other-scheme": (["ftp://host/mcp", *DEPLOY], "the server URL must be http:// or https://"),
    "credentials-in-url": (
        ["http://alice:s3cret@127.0.0.1:1/mcp", *DEPLOY],
        "the server URL must not carry a user name or password",
    ),
    "arguments-not-json": (
        ["http://127.0.0.1:1/mcp", "--tool", "deploy", "--arguments", "{env: prod}"],
        "--arguments is not valid JSON",
    ),
    "arguments-not-object": (
        ["http://127.0.0.1:1/mcp", "--tool", "deploy", "--arguments", "[1]"],
        "--arguments must be a JSON object",
    ),
    "answer-not-json": (
        ["http://127.0.0.1:1/mcp", *DEPLOY, "--answer", "yes"],
        "--answer is not valid JSON",
    ),
    "header-without-colon": (
        ["http://127.0.0.1:1/mcp", *DEPLOY, "--header", "Authorization Bearer x"],
        "--header (the 1st given): a header is written 'Name: value'; this one has no colon",
    ),
    "other-bad-name": (
        ["http://127.0.0.1:1/mcp", *DEPLOY, "--other", "Bad Name: x"],
        "--other (the 1st given): the part before the colon is not an HTTP header name",
    ),
    "header-control": (
        ["http://127.0.0.1:1/mcp", *DEPLOY, "--header", "X-A: a\x01b"],
        "the value of header X-A holds a control character",
    ),
    "no-tool": (["http://127.0.0.1:1/mcp"], "Missing option '--tool'"),
    "no-target": (list(DEPLOY), "give the server's URL or --stdio 'COMMAND ...', one of the two"),
    "both-targets": (
        ["http://127.0.0.1:1/mcp", "--stdio", "true", *DEPLOY],
        "give the server's URL or --stdio",
    ),
    "headers-on-stdio": (
        ["--stdio", "true", *DEPLOY, "--header", "X-A: 1"],
        "--header and --other are HTTP headers: a stdio server has none",
    ),
    "empty-stdio": (["--stdio", "  ", *DEPLOY], "--stdio needs a command to start the server"),
    "wait-zero": (["http://127.0.0.1:1/mcp", *DEPLOY, "--wait", "0"], "must be at least 1s"),
    "bad-timeout": (["http://127.0.0.1:1/mcp", *DEPLOY, "--timeout", "soon"], "is not a duration"),
    "max-requests-zero": (["http://127.0.0.1:1/mcp", *DEPLOY, "--max-requests", "0"], "0"),
    "sarif-no-folder": (
        ["http://127.0.0.1:1/mcp", *DEPLOY, "--sarif", "/nonexistent/folder/x.sarif"],
        "--sarif: no folder /nonexistent/folder",
    ),
}


@pytest.mark.parametrize("case", sorted(USAGE))
def test_a_usage_mistake_is_exit_2_with_a_clear_message(case: str) -> None:
    args, message = USAGE[case]
    done = run("probe", *args, code=2)
    assert message in " ".join(done.stderr.split()), done.stderr
    assert done.stderr.rstrip("\n").splitlines()[-1].startswith("error: ")
    answer = json.loads(run("probe", *args, "--json", code=2).stdout)
    assert answer["error"]["exit_code"] == 2


def test_headers_from_a_file_keep_credentials_off_the_command_line(tmp_path: Path) -> None:
    alice = tmp_path / "alice.headers"
    alice.write_text("Authorization: Bearer s3cr3t-alice\nX-Tenant: one\n")
    with serving(NaiveServer()) as url:
        done = run("probe", url + "/mcp", *DEPLOY, "--header", f"@{alice}", code=1)
        plan = run("probe", url + "/mcp", *DEPLOY, "--header", f"@{alice}", "--dry-run")
    for output in (done.stdout + done.stderr, plan.stdout):
        assert "s3cr3t-alice" not in output  # header values are never printed
    assert "headers as A: Authorization, X-Tenant (values not shown)" in plan.stdout
    missing = run("probe", "http://127.0.0.1:1/mcp", *DEPLOY, "--header", "@/nonexistent", code=2)
    assert "cannot read --header file /nonexistent" in missing.stderr


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("X-Api-Key sk-s3cr3t-key", "this one has no colon"),
        ("Authorization Bearer sk-s3cr3t-key: x", "is not an HTTP header name"),
    ],
)
def test_a_header_that_cannot_be_read_is_named_by_place_never_printed(
    tmp_path: Path, line: str, why: str
) -> None:
    """A line that is not a header may still be a credential: the refusal says where it was
    (the file and line, or which --header/--other value) and never any part of its text."""
    headers = tmp_path / "b.headers"
    headers.write_text(f"X-Tenant: one\n\n{line}\n")
    url = "http://127.0.0.1:1/mcp"
    for args, where in (
        (["--header", f"@{headers}"], f"--header ({headers}, line 3)"),
        (["--header", "X-A: 1", "--header", line], "--header (the 2nd given)"),
        (["--other", line], "--other (the 1st given)"),
    ):
        for extra in ([], ["--json"], ["--dry-run"]):
            done = run("probe", url, *DEPLOY, *args, *extra, code=2)
            said = " ".join((done.stdout + done.stderr).split())
            assert "s3cr3t" not in said
            assert where in said and why in said, said
            assert "its text is not shown" in said


# --- servers that cannot be judged: exit 8 ------------------------------------------------------

UNJUDGEABLE = {
    "garbage": (answer_garbage, "was cut off or unreadable"),
    "not-json": (answer_not_json, "is not a JSON-RPC response to it: <html>surprise</html>"),
    "hang": (hang, "no answer to server/discover at"),
    "closed-mid-body": (close_mid_body, "was cut off or unreadable"),
    "closed-mid-stream": (close_mid_stream, "ended before the answer"),
}


@pytest.mark.parametrize("case", sorted(UNJUDGEABLE))
def test_a_server_that_answers_garbage_hangs_or_hangs_up_is_exit_8(case: str) -> None:
    handler, message = UNJUDGEABLE[case]
    with RawServer(handler) as server:
        started = time.monotonic()
        done = run("probe", server.url, *DEPLOY, "--timeout", "1s", "--json", code=8)
        took = time.monotonic() - started
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: the server could not be probed: ")
    assert message in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["error"] == {
        "code": "probe_failed",
        "message": report["error"]["message"],
        "exit_code": 8,
    }
    assert message in report["error"]["message"]
    assert "pass" not in {check["result"] for check in report["checks"]}  # never a false pass
    assert took < 8, took  # the timeout is the whole request's, not each read's


def test_an_unreachable_server_is_exit_8() -> None:
    done = run("probe", f"http://127.0.0.1:{free_port()}/mcp", *DEPLOY, code=8)
    assert "connection refused" in done.stderr


def test_a_host_name_that_does_not_resolve_is_named_as_such() -> None:
    """.invalid never resolves (RFC 6761): reported as the reason, not as a cut-off answer."""
    done = run("probe", "http://no-such-host.invalid/mcp", *DEPLOY, "--timeout", "5s", code=8)
    said = " ".join(done.stderr.split())
    assert "cannot reach http://no-such-host.invalid/mcp: the host name does not resolve" in said
    assert "cut off" not in said


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no trust store holds."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_a_certificate_the_probe_cannot_trust_is_named_as_such(tmp_path: Path) -> None:
    import contextlib
    import socket
    import ssl
    import threading

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*_self_signed(tmp_path))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            # the probe hangs up on our certificate, as it should
            with conn, contextlib.suppress(ssl.SSLError, OSError):
                context.wrap_socket(conn, server_side=True).close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    done = run("probe", f"https://127.0.0.1:{port}/mcp", *DEPLOY, "--json", code=8)
    server.join(10)
    message = json.loads(done.stdout)["error"]["message"]
    assert f"cannot reach https://127.0.0.1:{port}/mcp: its TLS certificate was refused" in message
    assert "self-signed" in message or "self signed" in message


def test_a_tool_that_never_asks_for_input_is_exit_8() -> None:
    with serving(NaiveServer()) as url:
        done = run("probe", url + "/mcp", "--tool", "other", "--json", code=8)
    assert "tool other did not ask for input (error -32601: no method tools/call)" in done.stderr
    report = json.loads(done.stdout)
    assert report["server"]["name"] == "naive"  # what was established before it stopped
    assert {check["result"] for check in report["checks"]} == {"skipped"}


def test_an_honest_retry_refused_is_exit_8_not_a_pass() -> None:
    """An answer the tool rejects would make every attack look refused: the probe stops."""

    class Picky(NaiveServer):
        def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
            params = message.get("params") or {}
            if "requestState" in params and params.get("inputResponses") != {"confirm": "yes"}:
                return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602,
                        "message": "bad answer"}}  # fmt: skip
            return super().answer(message)

    with serving(Picky()) as url:
        refused = run("probe", url + "/mcp", *DEPLOY, code=8)
        assert "the honest retry (the issued state, the same arguments) was refused" in (
            refused.stderr
        )
        assert "give the answers the tool expects with --answer" in refused.stderr
        run("probe", url + "/mcp", *DEPLOY, "--answer", '{"confirm":"yes"}', code=1)


def test_a_server_that_says_not_now_is_exit_8() -> None:
    def busy(conn: Any) -> None:
        from .probe_servers import read_request

        read_request(conn)
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
        conn.close()

    with RawServer(busy) as server:
        done = run("probe", server.url, *DEPLOY, code=8)
    assert "the handshake failed" in done.stderr  # 503 to discover and initialize alike


STDIO = {
    "missing-command": ("/nonexistent/server --stdio", "cannot start the stdio server"),
    "exits-at-once": (f"{sys.executable} -c pass", "closed its stdout (exit 0)"),
    "writes-garbage": (
        f"{sys.executable} -c \"import sys; sys.stdin.readline(); print('hello')\"",
        "wrote a line that is not JSON-RPC: hello",
    ),
    "hangs": (f'{sys.executable} -c "import time; time.sleep(30)"', "within 1s (--timeout)"),
}


@pytest.mark.parametrize("case", sorted(STDIO))
def test_a_stdio_server_that_cannot_be_probed_is_exit_8(case: str) -> None:
    command, message = STDIO[case]
    started = time.monotonic()
    done = run("probe", "--stdio", command, *DEPLOY, "--timeout", "1s", code=8)
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 10


# --- the request bound, --dry-run ----------------------------------------------------------------


def test_at_most_max_requests_are_sent_and_the_rest_is_skipped() -> None:
    server = NaiveServer()
    with serving(server) as url:
        report = json.loads(
            run("probe", url + "/mcp", *DEPLOY, "--max-requests", "7", "--json", code=1).stdout
        )
        too_few = run("probe", url + "/mcp", *DEPLOY, "--max-requests", "4", code=8)
    # discover, initialize, initialized, the honest round (2), tamper's first round and one try
    assert report["requests"] == 7
    assert len(server.received) == 7 + 4  # and the second run's four
    checks = {check["id"]: check for check in report["checks"]}
    assert checks["tamper-accepted"]["result"] == "fail"
    for later in ("forged-accepted", "cross-request-accepted", "replay-accepted"):
        assert checks[later]["result"] == "skipped"
        assert checks[later]["why"] == "not tried: --max-requests 7 reached"
    assert "--max-requests 4 is too few" in too_few.stderr


def test_dry_run_prints_the_plan_and_sends_nothing(tmp_path: Path) -> None:
    with RawServer(hang) as server:
        text = run("probe", server.url, *DEPLOY, "--other", "X-User: b", "--dry-run").stdout
        plan = json.loads(run("probe", server.url, *DEPLOY, "--dry-run", "--json").stdout)
        time.sleep(0.3)  # a connection would have been accepted by now
        assert server.accepted == 0
    assert "(--dry-run: nothing is sent)" in text
    assert "tools/call deploy retry as B" in text
    assert plan["dry_run"] is True and plan["requests"] == 0 and plan["findings"] == []
    assert [c["result"] for c in plan["checks"]] == ["planned"] * 9
    assert plan["plan"][0]["step"] == "handshake"
    assert {"step": "cross-principal-accepted", "requests": ["skipped: no --other"]} in (
        plan["plan"]
    )
    marker = tmp_path / "started"
    command = f"{sys.executable} -c \"open('{marker}', 'w')\""
    run("probe", "--stdio", command, *DEPLOY, "--dry-run")
    assert not marker.exists()  # the stdio server was never started


# --- what it prints ------------------------------------------------------------------------------


def test_the_text_report_shows_each_check_and_each_findings_evidence_and_fix() -> None:
    with serving(NaiveServer()) as url:
        done = run("probe", url + "/mcp", *DEPLOY, code=1)
        quiet = run("probe", url + "/mcp", *DEPLOY, "--fail-on", "none")
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"probe    {url}/mcp, tool deploy")
    assert lines[1] == "server   naive 0.0.1 (MCP 2025-11-25)"
    assert lines[2] == "format   not one mrtr-state recognises"
    assert any(line.split()[:3] == ["FAIL", "tamper-accepted", "high"] for line in lines)
    assert any(line.split()[:3] == ["skip", "state-long-lived", "low"] for line in lines)
    assert any(line.split()[:3] == ["pass", "state-oversized", "low"] for line in lines)
    assert "tamper-accepted (high): A tampered requestState is accepted" in done.stdout
    assert "    answer: result" in done.stdout
    assert "  fix: protect the state's integrity with a MAC or AEAD" in done.stdout
    # no --other: three high findings, cross-principal-accepted skipped (never passed)
    assert lines[-1].endswith("5 finding(s), 3 at or above --fail-on high")
    assert any(line.split()[:2] == ["skip", "cross-principal-accepted"] for line in lines)
    assert quiet.stdout.splitlines()[-1].endswith("--fail-on none")


def test_exit_8_is_in_the_help_and_the_docs_exit_code_tables() -> None:
    from .helpers import ROOT

    shown = " ".join(run("--help").stdout.split())
    assert "7 proxy cannot listen, 8 probe could not probe the server, 75 not yet" in shown
    own = " ".join(run("probe", "--help").stdout.split())
    assert "8 the server could not be probed" in own and "Examples:" in own
    assert "| 8 | `probe`: the server could not be probed" in (ROOT / "docs" / "cli.md").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "7 proxy cannot listen, 8 `probe` could not probe the server, 75 not yet" in readme
    assert "| 8 | the server could not be probed" in (ROOT / "docs" / "probe.md").read_text()
