"""Settings precedence: flag beats environment beats file beats default."""

from __future__ import annotations

from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state.config import DEFAULT_KEYSET, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_any_source(tmp_path: Path) -> None:
    settings = load_settings(env={}, cwd=tmp_path)
    assert settings.keyset_path == DEFAULT_KEYSET
    assert settings.keyset_is_default
    assert (settings.format, settings.audience, settings.config_path) == ("aead", None, None)
    assert settings.policy == ms.DEFAULT_POLICY


def test_flag_beats_env_beats_file_beats_default(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.toml",
        'keyset = "from-file.json"\nttl = 100\naudience = "file"\nmax_size = 4096\nttl_cap = 600\n',
    )
    env = {"MRTR_STATE_TTL": "200", "MRTR_STATE_AUDIENCE": "env"}
    settings = load_settings({"audience": "flag"}, config=config, env=env, cwd=tmp_path)
    assert settings.audience == "flag"
    assert settings.policy.ttl == 200
    assert settings.policy.max_size == 4096
    assert settings.policy.ttl_cap == 600
    assert settings.keyset_path == tmp_path / "from-file.json"  # relative to the file
    assert not settings.keyset_is_default
    env_keyset = load_settings(config=config, env={"MRTR_STATE_KEYSET": "/k.json"}, cwd=tmp_path)
    assert env_keyset.keyset_path == Path("/k.json")
    flagged = load_settings(
        {"keyset": "flag.json"}, config=config, env={"MRTR_STATE_KEYSET": "/k.json"}, cwd=tmp_path
    )
    assert flagged.keyset_path == Path("flag.json")


def test_config_file_is_found_by_env_then_working_folder(tmp_path: Path) -> None:
    local = write(tmp_path / "mrtr-state.toml", "ttl = 11\n")
    assert load_settings(env={}, cwd=tmp_path).config_path == local
    other = write(tmp_path / "other.toml", "ttl = 22\n")
    chosen = load_settings(env={"MRTR_STATE_CONFIG": str(other)}, cwd=tmp_path)
    assert chosen.config_path == other
    assert chosen.policy.ttl == 22


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tll = 30\n", "unknown setting tll"),
        ("ttl = 'thirty'\n", "setting ttl .from config file .*: 'thirty' is not a duration"),
        ("ttl = true\n", "must be a duration"),
        ("ttl = 7200\n", "exceeds the ttl cap"),
        ("format = 'zip'\n", "unknown format"),
        ("keyset = ''\n", "non-empty string"),
        ("ttl = \n", "not valid TOML"),
        ("max_size = 10\n", "too small"),
    ],
)
def test_bad_config_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "c.toml", text)
    with pytest.raises(ms.ConfigError, match=message) as caught:
        load_settings(config=config, env={}, cwd=tmp_path)
    assert caught.value.exit_code == 6


def test_bad_environment_and_missing_config_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ms.ConfigError, match=r"from MRTR_STATE_TTL\): 'soon' is not a duration"):
        load_settings(env={"MRTR_STATE_TTL": "soon"}, cwd=tmp_path)
    with pytest.raises(ms.ConfigError, match="does not exist"):
        load_settings(config=tmp_path / "absent.toml", env={}, cwd=tmp_path)


def test_lifetimes_are_durations_and_each_setting_knows_its_source(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", 'ttl = "2m"\nttl_cap = "2h"\nretention = 7300\n')
    settings = load_settings(config=config, env={"MRTR_STATE_PROPAGATION": "90s"}, cwd=tmp_path)
    assert (settings.policy.ttl, settings.policy.ttl_cap) == (120, 7200)
    assert (settings.propagation, settings.retention) == (90, 7300)
    assert settings.source_of("ttl_cap") == f"config file {config}"
    assert settings.source_of("propagation") == "MRTR_STATE_PROPAGATION"
    assert settings.source_of("max_size") == "the default"
    flagged = load_settings({"ttl": 30}, config=config, env={}, cwd=tmp_path)
    assert flagged.policy.ttl == 30 and flagged.source_of("ttl") == "--ttl"


def test_a_config_beside_a_named_keyset_is_found_from_any_folder(tmp_path: Path) -> None:
    home = tmp_path / "etc-mcp"
    home.mkdir()
    beside = write(home / "mrtr-state.toml", 'audience = "beside"\n')
    elsewhere = tmp_path / "cron-cwd"
    elsewhere.mkdir()
    flagged = load_settings({"keyset": str(home / "keyset.json")}, env={}, cwd=elsewhere)
    assert flagged.config_path == beside and flagged.audience == "beside"
    from_env = load_settings(env={"MRTR_STATE_KEYSET": str(home / "k.json")}, cwd=elsewhere)
    assert from_env.config_path == beside
    pinned = write(tmp_path / "pinned.toml", 'audience = "pinned"\n')
    env = {"MRTR_STATE_KEYSET": str(home / "k.json"), "MRTR_STATE_CONFIG": str(pinned)}
    assert load_settings(env=env, cwd=elsewhere).audience == "pinned"
    write(elsewhere / "mrtr-state.toml", 'audience = "cwd"\n')
    assert load_settings(env={}, cwd=elsewhere).audience == "cwd"  # no keyset named: the cwd's


def test_a_config_others_could_write_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "mrtr-state.toml", 'ttl_cap = "30d"\n')
    config.chmod(0o666)
    with pytest.raises(ms.ConfigError, match=r"writable by group or others \(mode 0666\)"):
        load_settings(env={}, cwd=tmp_path)
    config.chmod(0o644)
    assert load_settings(env={}, cwd=tmp_path).policy.ttl_cap == 30 * 86400


def test_a_config_owned_by_another_user_is_refused(open_dir: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    config = write(open_dir / "mrtr-state.toml", 'keyset = "/tmp/evil.json"\n')
    os.chown(config, 4242, 4242)
    with pytest.raises(ms.ConfigError, match="belongs to uid 4242"):
        load_settings(env={}, cwd=open_dir)
