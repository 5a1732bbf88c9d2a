"""The Keyset (mrtr_state/keyset.py): one validated version of its keys at a time, routed by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mrtr_state as ms

from .test_keyset_store import jwk, write_keyset


def test_routing_refuses_unknown_retired_and_other_algorithm_keys(tmp_path: Path) -> None:
    path = write_keyset(
        tmp_path / "k.json",
        {
            "keys": [
                jwk("00000001"),
                jwk("00000002", status="retired"),
                jwk("00000003", alg="HS256"),
            ]
        },
    )
    keyset = ms.Keyset.load(path)

    def naming(kid: str) -> str:
        """An aead token whose key id is ``kid`` (minted under a keyset of that key alone)."""
        return ms.mint(ms.Keyset.from_json(json.dumps({"keys": [jwk(kid)]})), "s")

    assert ms.verify(keyset, naming("00000001")).kid == "00000001"
    with pytest.raises(ms.UnknownKey, match="unknown key id 00000009"):
        ms.verify(keyset, naming("00000009"))
    with pytest.raises(ms.KeyRetired, match="retired"):
        ms.verify(keyset, naming("00000002"))
    with pytest.raises(ms.WrongFormat, match="HS256"):
        ms.verify(keyset, naming("00000003"))
