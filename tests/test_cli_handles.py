"""``inspect --state-store`` and ``verify --state-store`` (issue 39's command line): a state handle
checked through the real CLI, against a real Redis (MRTR_STATE_TEST_REDIS_URL, or a private
server) holding records filed as the proxy files them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mrtr_state.state import records as handles
from mrtr_state.state.handle_store import open_handle_store
from mrtr_state.tokens.binding import Binding

from .helpers import run

BOUND: dict[str, Any] = {
    "principal": "alice",
    "audience": "/mcp",
    "method": "tools/call",
    "target": "deploy",
    "arguments": {"env": "prod"},
}
#: The same bindings as verify's flags.
FLAGS = (
    "-p", "alice", "--audience", "/mcp", "--method", "tools/call", "--target", "deploy",
    "--arguments", '{"env":"prod"}',
)  # fmt: skip


def filed(url: str, state: str = "step=1", *, ttl: float = 300, now: float | None = None) -> str:
    """A handle whose record is in the store at ``url``, filed as the proxy files one."""
    store = open_handle_store(url)
    try:
        now = time.time() if now is None else now
        ident = handles.new_handle()
        handle = ident.text
        value = handles.encode_record(ident, state, Binding(**BOUND), now=now, ttl=ttl)
        store.put(ident.key, value, now + ttl + 300)
    finally:
        store.close()
    return handle


def test_verify_reads_the_record_and_once_takes_it(redis_url: str) -> None:
    handle = filed(redis_url)
    k = ("verify", "--state-store", redis_url, *FLAGS)
    assert run(*k, handle).stdout == '"step=1"\n'
    assert run(*k, handle).stdout == '"step=1"\n'  # only read: still there
    answer = json.loads(run(*k, "--json", "--once", handle).stdout)
    assert answer["valid"] is True and answer["taken"] is True
    assert answer["claims"]["st"] == "step=1" and answer["claims"]["aud"] == "/mcp"
    gone = run(*k, "--once", handle, code=1)  # single use: the retry took it
    assert "unknown handle: never issued, already used, or expired" in gone.stderr
    refused = json.loads(run(*k, "--json", handle, code=1).stdout)
    assert refused["error"]["code"] == "unknown_handle" and refused["error"]["exit_code"] == 1


@pytest.mark.parametrize(
    ("change", "code", "reason"),
    [
        (("-p", "bob"), 4, "principal_mismatch"),
        (("--audience", "/other"), 4, "audience_mismatch"),
        (("--arguments", '{"env":"dev"}'), 4, "request_mismatch"),
    ],
)
def test_verify_refuses_another_retry_with_its_exit_code_and_leaves_the_record(
    redis_url: str, change: tuple[str, str], code: int, reason: str
) -> None:
    handle = filed(redis_url)
    k = ("verify", "--state-store", redis_url, *FLAGS, *change)
    for once in ((), ("--once",)):
        answer = json.loads(run(*k, *once, "--json", handle, code=code).stdout)
        assert answer["valid"] is False and answer["error"]["code"] == reason
    # still there for its rightful retry
    run("verify", "--state-store", redis_url, *FLAGS, "--once", handle)


def test_verify_refuses_an_expired_record_garbage_and_options_for_tokens(redis_url: str) -> None:
    expired = filed(redis_url, ttl=60, now=time.time() - 120)
    k = ("verify", "--state-store", redis_url, *FLAGS)
    assert "the state expired" in run(*k, expired, code=3).stderr
    garbage = json.loads(run(*k, "--json", "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAA", code=1).stdout)
    assert garbage["error"]["code"] == "malformed"
    for extra in (("--bind", "x"), ("--format", "aead"), ("--replay-store", "memory:")):
        said = run(*k, *extra, filed(redis_url), code=2).stderr
        assert "cannot be used with --state-store" in said
    run(*k, "", code=2)  # no handle at all


def test_inspect_shows_the_record_and_the_state_only_when_asked(redis_url: str) -> None:
    handle = filed(redis_url, "secret state")
    shown = run("inspect", "--state-store", redis_url, handle).stdout
    assert "a digest of the principal" in shown and "/mcp" in shown and "NOT VERIFIED" in shown
    assert "secret state" not in shown and "alice" not in shown
    report = json.loads(run("inspect", "--state-store", redis_url, "--json", handle).stdout)
    assert report["found"] is True and report["aud"] == "/mcp" and "state" not in report
    with_state = run("inspect", "--state-store", redis_url, "--show-state", "--json", handle)
    assert json.loads(with_state.stdout)["state"] == "secret state"
    # inspect takes nothing: the retry still finds the record
    run("verify", "--state-store", redis_url, *FLAGS, "--once", handle)
    missing = run("inspect", "--state-store", redis_url, "--json", handle, code=1)
    assert json.loads(missing.stdout)["error"]["code"] == "unknown_handle"
    run("inspect", "--show-state", handle, code=2)  # --show-state is for handles only


def test_the_memory_store_holds_nothing_across_runs() -> None:
    """memory: is one process's store: a command line finds no record in it, ever."""
    handle = handles.new_handle().text
    run("verify", "--state-store", "memory:", *FLAGS, handle, code=1)
    run("inspect", "--state-store", "memory:", handle, code=1)


def test_an_unreachable_store_is_exit_6() -> None:
    from .servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    handle = handles.new_handle().text
    refused = run("verify", "--state-store", url, *FLAGS, "--json", handle, code=6)
    assert json.loads(refused.stdout)["error"]["code"] == "state_store_error"
    run("inspect", "--state-store", url, handle, code=6)
