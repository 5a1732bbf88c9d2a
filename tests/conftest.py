"""Shared fixtures: each test's own working folder and environment, keysets made fresh for each
test, a fixed clock, the shared vectors folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import mrtr_state as ms

# CI runs the property tests on a fixed seed, so a run that lands is a run that can be repeated;
# everywhere else each run draws new examples (and so, over time, finds what a fixed seed cannot).
settings.register_profile("ci", derandomize=True)
if os.environ.get("MRTR_STATE_TEST_PROFILE") == "ci":
    settings.load_profile("ci")

NOW = 1_800_000_000  # a fixed "now" (2027-01-15) so that times in tests are exact
#: Published vectors, copied into the repository (sources and licences in their README).
VECTORS = Path(__file__).resolve().parent / "vectors" / "published"


#: The prefix of the knobs the tests themselves read (a Redis URL, an SDK's folder, the fuzzer's
#: seed): the one part of the caller's ``MRTR_STATE_*`` environment a test may see.
TEST_KNOBS = "MRTR_STATE_TEST_"


def _isolate(patch: pytest.MonkeyPatch, folder: Path) -> None:
    for name in list(os.environ):
        if name.startswith("MRTR_STATE_") and not name.startswith(TEST_KNOBS):
            patch.delenv(name)
    patch.chdir(folder)


@pytest.fixture(autouse=True, scope="session")
def isolated_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What :func:`isolated` gives a test, given first to the whole run, so that a fixture
    that outlives a test (module or session scope: a proxy started once for a file) starts
    in an empty folder without the caller's settings too."""
    with pytest.MonkeyPatch.context() as patch:
        _isolate(patch, tmp_path_factory.mktemp("session-cwd"))
        yield


@pytest.fixture(autouse=True)
def isolated(
    isolated_session: None,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """Every test runs in an empty folder of its own, with none of the caller's ``MRTR_STATE_*``
    settings: the README's order (``make demo``, which writes ``keys/keyset.json`` in the
    checkout, then ``make test``) and an operator's shell must not change what a test sees.
    Nothing reaches the checkout's ``keys/``, a ``mrtr-state.toml`` in the caller's folder or a
    ``MRTR_STATE_KEYSET`` left exported; paths into the repository are made from the tests'
    own location (``ROOT``), never from the working folder. A separate folder from
    ``tmp_path``, so a test's ``tmp_path/keys/keyset.json`` is not the default keyset."""
    folder = tmp_path_factory.mktemp("cwd")
    _isolate(monkeypatch, folder)
    return folder


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A real Redis: the one ``.ci/run`` started (``MRTR_STATE_TEST_REDIS_URL``), else one
    started here for the test file, else a skip naming the package (``redis-server``)."""
    given = os.environ.get("MRTR_STATE_TEST_REDIS_URL")
    if given:
        yield given
        return
    from .helpers import private_redis

    with private_redis() as (_server, url):
        yield url


@pytest.fixture
def keyset() -> ms.Keyset:
    return ms.Keyset.generate(now=NOW - 3600)


@pytest.fixture
def ks(tmp_path: Path) -> Path:
    """A keyset file made by ``mrtr-state keys init``, as a new user makes one."""
    from .helpers import run

    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    return path


@pytest.fixture
def keyset_path(tmp_path: Path, keyset: ms.Keyset) -> Path:
    path = tmp_path / "keys" / "keyset.json"
    keyset.save(path)
    return path


@pytest.fixture
def keyset_file(tmp_path: Path) -> Path:
    """A keyset file holding one primary aead key, as a proxy or SDK server would load."""
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    return path


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder other users can traverse (pytest's tmp_path sits under a 0700 folder of root)."""
    folder = Path(tempfile.mkdtemp(prefix="mrtr-mounts-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def shared_vector(*parts: str) -> Path:
    """A published vector file from tests/vectors/published (it is part of every clone)."""
    path = VECTORS.joinpath(*parts)
    assert path.exists(), f"published test vector missing: {path}"
    return path


#: Lines that vector-driven tests report, printed in the terminal summary of every run.
VECTOR_REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if VECTOR_REPORT:
        terminalreporter.section("test vectors run")
        for line in VECTOR_REPORT:
            terminalreporter.write_line(line)


#: The tests marked ``slow`` (each a few seconds to half a minute: real processes, sockets,
#: SIGKILLs, peers in other languages, wheels built), by file or ``file::test``, named here in
#: one place. ``pytest -m "not slow"`` leaves them out while you work; ``make test`` and CI run
#: everything. A name here that no longer matches a test fails the run, so the list cannot rot.
SLOW = (
    "test_conformance.py",
    "test_install.py",
    "test_sdk_peers.py",
    "test_audit.py::test_memory_follows_open_exchanges_not_capture_length",
    "test_audit.py::test_large_captures_stream",
    "test_deploy_recipes.py::test_the_rotate_cronjob_ships_until_a_ship_succeeds",
    "test_examples.py::test_the_github_login_example_completes_its_round_trip",
    "test_examples.py::test_make_demo_uses_its_own_keyset_whatever_the_environment_says",
    "test_examples.py::test_make_demo_runs_the_main_job_on_a_fresh_keyset",
    "test_kek_cli.py::test_sigkill_during_rewrap_leaves_the_old_or_the_new_file",
    "test_kek_cli.py::test_sigkill_during_rotate_leaves_the_old_or_the_new_file",
    "test_keyfile_safety.py::test_sigkill_at_random_moments_never_tears_or_loses_the_keyset",
    "test_keyfile_safety.py::test_four_processes_adding_fifty_keys_each_lose_none",
    "test_keyset_watch.py::test_replicas_verifying_while_the_kubelet_swaps_the_secret_see_no_"
    "false_rejection",
    "test_lifecycle.py::TestRotationMachine",
    "test_probe.py::test_a_state_still_accepted_after_wait_is_found",
    "test_proxy_http.py::test_concurrent_clients_get_their_own_answers",
    "test_proxy_jsonrpc.py::test_what_the_proxy_forwards_reads_the_same_to_a_javascript_server",
    "test_proxy_jsonrpc.py::test_what_the_proxy_forwards_reads_the_same_to_the_upstream",
    "test_proxy_ops.py::test_the_proxy_runs_on_an_encrypted_keyset_and_reports_a_kek_it_lost",
    "test_proxy_ops.py::test_a_stream_longer_than_the_drain_is_closed_and_the_proxy_exits_0",
    "test_proxy_ops.py::test_a_keyset_that_fails_to_load_is_never_silent",
    "test_proxy_ops.py::test_the_log_and_the_metrics_name_each_event_alike",
    "test_replay.py::test_sixteen_processes_racing_on_sqlite_redeem_exactly_once",
    "test_replay_skew.py::test_the_replay_store_on_a_cluster_spreads_its_entries_and_redeems_each_"
    "once",
    "test_replay_skew.py::test_the_replay_store_behind_sentinel_follows_a_failover_failing_closed_"
    "meanwhile",
    "test_proxy_boundary.py::test_hundreds_of_dripping_connections_neither_exhaust_files_nor_stall_"
    "a_client",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    matched = dict.fromkeys(SLOW, False)
    for item in items:
        name = item.nodeid.split("/")[-1]
        for slow in SLOW:
            if name == slow or name.startswith((slow + "::", slow + "[")):
                item.add_marker(pytest.mark.slow)
                matched[slow] = True
    # only a run that collected a file can say one of its names went stale
    collected = {item.nodeid.split("/")[-1].split("::")[0] for item in items}
    stale = [name for name, hit in matched.items() if not hit and name.split("::")[0] in collected]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW names no test: {stale}")
