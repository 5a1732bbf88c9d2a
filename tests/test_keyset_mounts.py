"""Keysets where fleets keep their secrets: owner files, Kubernetes Secret mounts (the ``..data``
symlink swap, ``fsGroup``), Docker secrets; the permission rule, refused writes, live reload."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import mrtr_state as ms
from mrtr_state.cli import cli
from mrtr_state.keys import lifecycle
from mrtr_state.keys.file import permission_problem

from .mounts import KubeletVolume, as_user, needs_root

USER, FS_GROUP, STRANGER = 4242, 4343, 5151
CLEAN_ENV = {name: None for name in os.environ if name.startswith("MRTR_STATE_")}


@pytest.fixture
def keyset() -> ms.Keyset:
    return ms.Keyset.generate(("A256GCM",))


def place(path: Path, keyset: ms.Keyset, mode: int, uid: int = -1, gid: int = -1) -> Path:
    path.write_text(keyset.to_json())
    if uid != -1 or gid != -1:
        os.chown(path, uid, gid)
    path.chmod(mode)
    return path


# --- the rule itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "owner", "accepted"),
    [
        pytest.param(0o600, USER, True, id="own-0600"),
        pytest.param(0o400, USER, True, id="own-0400"),
        pytest.param(0o700, USER, True, id="own-0700"),
        pytest.param(0o640, USER, False, id="own-0640-group-read"),
        pytest.param(0o440, USER, False, id="own-0440-group-read"),
        pytest.param(0o604, USER, False, id="own-0604-world-read"),
        pytest.param(0o620, USER, False, id="own-0620-group-write"),
        pytest.param(0o602, USER, False, id="own-0602-world-write"),
        pytest.param(0o644, USER, False, id="own-0644"),
        pytest.param(0o444, USER, False, id="own-0444"),
        pytest.param(0o640, 0, True, id="root-0640-fsgroup"),
        pytest.param(0o440, 0, True, id="root-0440-fsgroup"),
        pytest.param(0o600, 0, True, id="root-0600"),
        pytest.param(0o400, 0, True, id="root-0400"),
        pytest.param(0o444, 0, False, id="root-0444-docker-default"),
        pytest.param(0o644, 0, False, id="root-0644-kubernetes-default"),
        pytest.param(0o660, 0, False, id="root-0660-group-write"),
        pytest.param(0o460, 0, False, id="root-0460-group-write"),
        pytest.param(0o650, 0, False, id="root-0650-group-execute"),
        pytest.param(0o604, 0, False, id="root-0604-world-read"),
        pytest.param(0o600, STRANGER, False, id="stranger-0600"),
        pytest.param(0o400, STRANGER, False, id="stranger-0400"),
    ],
)
def test_the_permission_rule(mode: int, owner: int, accepted: bool) -> None:
    problem = permission_problem(0o100000 | mode, owner, USER)
    assert (problem is None) == accepted, problem
    if problem is not None and owner != STRANGER:
        assert f"mode {mode:04o}" in problem
        assert ("0640 or 0440" if owner == 0 else "0600 or 0400") in problem
    if owner == STRANGER:
        assert problem is not None and f"belongs to uid {STRANGER}" in problem


# --- the rule on real files -----------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_users_own_keyset_reads(open_dir: Path, keyset: ms.Keyset, mode: int) -> None:
    path = place(open_dir / "keyset.json", keyset, mode, USER, USER)
    kids = as_user(USER, (USER,), lambda: [k.kid for k in ms.Keyset.load(path)])
    assert kids == [k.kid for k in keyset]


@needs_root
@pytest.mark.parametrize("mode", [0o640, 0o644, 0o444, 0o660, 0o620, 0o606])
def test_a_users_loose_keyset_is_refused_with_the_mode_found_and_wanted(
    open_dir: Path, keyset: ms.Keyset, mode: int
) -> None:
    path = place(open_dir / "keyset.json", keyset, mode, USER, USER)
    with pytest.raises(ms.KeysetPermissions) as caught:
        as_user(USER, (USER,), lambda: ms.Keyset.load(path))
    message = str(caught.value)
    assert f"has mode {mode:04o} (owner uid {USER})" in message
    assert "must be 0600 or 0400" in message
    assert message.endswith(f"fix it with: chmod 600 {path}")


@needs_root
@pytest.mark.parametrize("mode", [0o440, 0o640])
def test_a_root_owned_fsgroup_keyset_reads_as_a_non_root_pod(
    open_dir: Path, keyset: ms.Keyset, mode: int
) -> None:
    path = place(open_dir / "keyset.json", keyset, mode, 0, FS_GROUP)
    kids = as_user(USER, (USER, FS_GROUP), lambda: [k.kid for k in ms.Keyset.load(path)])
    assert kids == [k.kid for k in keyset]


@needs_root
@pytest.mark.parametrize(
    ("mode", "loose"),
    [
        (0o644, "others may read it"),
        (0o444, "others may read it"),
        (0o660, "group may write it"),
        (0o460, "group may write it"),
        (0o646, "others may read/write it"),
    ],
)
def test_a_root_owned_keyset_open_to_others_or_group_writable_is_refused(
    open_dir: Path, keyset: ms.Keyset, mode: int, loose: str
) -> None:
    path = place(open_dir / "keyset.json", keyset, mode, 0, FS_GROUP)
    with pytest.raises(ms.KeysetPermissions) as caught:
        as_user(USER, (USER, FS_GROUP), lambda: ms.Keyset.load(path))
    message = str(caught.value)
    assert f"has mode {mode:04o} (owner root), {loose}" in message
    assert "may be at most group-readable: 0640 or 0440" in message
    assert "set its mode to 0400, or 0440 with fsGroup" in message


@needs_root
def test_a_root_owned_0400_keyset_cannot_be_read_by_a_non_root_pod(
    open_dir: Path, keyset: ms.Keyset
) -> None:
    path = place(open_dir / "keyset.json", keyset, 0o400, 0, FS_GROUP)
    with pytest.raises(ms.KeysetPermissions, match=r"cannot read keyset .*Permission denied"):
        as_user(USER, (USER, FS_GROUP), lambda: ms.Keyset.load(path))


@needs_root
def test_another_users_keyset_is_refused(open_dir: Path, keyset: ms.Keyset) -> None:
    path = place(open_dir / "keyset.json", keyset, 0o644, STRANGER, STRANGER)
    with pytest.raises(ms.KeysetPermissions, match=f"belongs to uid {STRANGER}") as caught:
        as_user(USER, (USER,), lambda: ms.Keyset.load(path))
    assert "fix it with: chown" in str(caught.value)


def test_a_symlink_is_followed_and_the_file_it_reaches_is_judged(
    tmp_path: Path, keyset: ms.Keyset
) -> None:
    good = place(tmp_path / "good.json", keyset, 0o600)
    loose = place(tmp_path / "loose.json", keyset, 0o644)
    to_good, to_loose = tmp_path / "to-good.json", tmp_path / "to-loose.json"
    to_good.symlink_to(good)
    to_loose.symlink_to(loose)
    assert [k.kid for k in ms.Keyset.load(to_good)] == [k.kid for k in keyset]
    with pytest.raises(ms.KeysetPermissions) as caught:
        ms.Keyset.load(to_loose)
    assert str(caught.value).startswith(f"keyset {to_loose} (-> {loose}) has mode 0644")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(ms.KeysetNotFound):
        ms.Keyset.load(dangling)


def test_a_fifo_behind_a_symlink_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    link = tmp_path / "keyset.json"
    link.symlink_to(fifo)
    with pytest.raises(ms.KeysetPermissions, match="not a regular file"):
        ms.Keyset.load(link)


# --- Kubernetes and Docker layouts ----------------------------------------------------------


def run(*args: str, code: int = 0, input: str | None = None) -> tuple[str, str]:
    result = CliRunner().invoke(cli, list(args), input=input, env=CLEAN_ENV)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout, result.stderr


def test_a_kubernetes_secret_mount_verifies_and_refuses_every_write(
    tmp_path: Path, keyset: ms.Keyset
) -> None:
    volume = KubeletVolume(tmp_path / "secret", mode=0o400)
    volume.project({"keyset.json": keyset.to_json().encode()})
    mounted = volume.path("keyset.json")
    assert mounted.is_symlink() and os.readlink(mounted) == "..data/keyset.json"
    token, _ = run("mint", "--keyset", str(mounted), "--state", '"hello"')
    assert run("verify", "--keyset", str(mounted), token.strip())[0] == '"hello"\n'
    for command in (
        ["keys", "add"],
        ["rotate"],
        ["keys", "retire", next(iter(keyset)).kid],
        ["keys", "init", "--force"],
    ):
        _, err = run(*command, "--keyset", str(mounted), code=6)
        assert f"keyset {mounted} is a symlink (to ..data/keyset.json)" in err, command
        assert "keep the writable source of truth in a regular file" in err
    assert ms.Keyset.load(mounted).to_json() == keyset.to_json()  # nothing was written


def test_a_read_only_keyset_file_is_refused_for_writing(tmp_path: Path, keyset: ms.Keyset) -> None:
    path = place(tmp_path / "keyset.json", keyset, 0o400)
    ms.Keyset.load(path)  # reads
    _, err = run("keys", "add", "--keyset", str(path), code=6)
    assert f"keyset {path} is read-only (mode 0400)" in err
    assert f"If this file is the source of truth: chmod 600 {path}" in err


@needs_root
def test_a_docker_secret_is_refused_at_0444_and_read_at_0400(
    open_dir: Path, keyset: ms.Keyset
) -> None:
    secrets = open_dir / "run" / "secrets"
    secrets.mkdir(parents=True)
    secrets.chmod(0o755)
    path = place(secrets / "mrtr_keyset", keyset, 0o444, 0, 0)  # the swarm default
    with pytest.raises(ms.KeysetPermissions, match=r"owner root.*others may read it"):
        as_user(USER, (USER,), lambda: ms.Keyset.load(path))
    place(path, keyset, 0o400, USER, USER)  # compose: the host file's owner and mode apply
    assert as_user(USER, (USER,), lambda: len(ms.Keyset.load(path))) == 1


@needs_root
def test_an_fsgroup_secret_mount_reads_as_the_pods_user(open_dir: Path, keyset: ms.Keyset) -> None:
    volume = KubeletVolume(open_dir / "secret", mode=0o440, gid=FS_GROUP)
    volume.project({"keyset.json": keyset.to_json().encode()})
    mounted = volume.path("keyset.json")
    loaded = as_user(USER, (USER, FS_GROUP), lambda: [k.kid for k in ms.Keyset.load(mounted)])
    assert loaded == [k.kid for k in keyset]


def test_a_mounted_keyset_follows_each_swap(tmp_path: Path) -> None:
    first = ms.Keyset.generate(("A256GCM",))
    volume = KubeletVolume(tmp_path / "secret")
    volume.project({"keyset.json": first.to_json().encode()})
    loaded = ms.Keyset.load(volume.path("keyset.json"), reload_interval=0)
    old_token = ms.mint(loaded, "old")
    with_pending, pending = first.with_new_key("A256GCM")
    volume.project({"keyset.json": with_pending.to_json().encode()})
    assert loaded.get(pending.kid) is not None  # rolled out: verifies everywhere
    promoted = lifecycle.promote(with_pending, pending.kid, now=0)[0]
    volume.project({"keyset.json": promoted.to_json().encode()})
    assert loaded.primary("A256GCM").kid == pending.kid
    assert ms.verify(loaded, old_token).state == "old"  # the old primary verifies, active
    retired = lifecycle.retire(promoted, next(iter(first)).kid, now=0, retention=0)[0]
    volume.project({"keyset.json": retired.to_json().encode()})
    with pytest.raises(ms.KeyRetired):
        ms.verify(loaded, old_token)
    assert json.loads(volume.path("keyset.json").read_text()) == json.loads(retired.to_json())
