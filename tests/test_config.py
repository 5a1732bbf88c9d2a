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
        ("ttl = 'thirty'\n", "whole number"),
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
    with pytest.raises(ms.ConfigError, match="MRTR_STATE_TTL='soon'"):
        load_settings(env={"MRTR_STATE_TTL": "soon"}, cwd=tmp_path)
    with pytest.raises(ms.ConfigError, match="does not exist"):
        load_settings(config=tmp_path / "absent.toml", env={}, cwd=tmp_path)
