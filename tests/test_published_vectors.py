"""The published vectors in tests/vectors/ hold, and the generator still produces them exactly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode

from .conftest import VECTOR_REPORT

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("aead", "jws", "jwe")


#: Vectors as an earlier version minted them (its random bytes were drawn in another order):
#: kept so that tokens already out there are proven to keep verifying.
EARLIER = "minted-by-0.1.0"


def published(fmt: str, folder: str = "") -> dict[str, Any]:
    path = ROOT / "tests" / "vectors" / folder / f"{fmt}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _outcome(keyset: ms.Keyset, fmt: str, case: dict[str, Any]) -> tuple[str, Any]:
    try:
        claims = ms.verify(keyset, case["token"], now=case["now"], format=fmt, **case["bindings"])
    except ms.InvalidToken as err:
        return err.code, None
    return "ok", claims.to_dict()


@pytest.mark.parametrize("folder", ["", EARLIER])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_published_vector_gives_its_expected_result(fmt: str, folder: str) -> None:
    cases = published(fmt, folder)["cases"]
    for case in cases:
        key = case["key"]
        keyset = ms.Keyset([ms.Key(kid=key["kid"], alg=key["alg"], secret=b64url_decode(key["k"]))])
        outcome, claims = _outcome(keyset, fmt, case)
        assert outcome == case["expected"], case["name"]
        assert (outcome != "ok") == case["expect_fail"], case["name"]
        if outcome == "ok":
            assert claims == case["claims"], case["name"]
    failing = sum(case["expect_fail"] for case in cases)
    VECTOR_REPORT.append(
        f"published {fmt} vectors{' (' + folder + ')' if folder else ''}: {len(cases)} cases, "
        f"{len(cases) - failing} "
        f"valid accepted, {failing} must-fail refused with their code"
    )


def test_the_generator_reproduces_the_published_files() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_vectors", ROOT / "scripts" / "make_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    built = generator.build()
    for fmt in FORMATS:
        assert built[fmt] == published(fmt), f"tests/vectors/{fmt}.json is stale: regenerate it"


def test_outside_the_generator_randomness_comes_from_the_os(keyset: ms.Keyset) -> None:
    from mrtr_state._entropy import deterministic

    with deterministic(b"seed"):
        first = ms.mint(keyset, 1, now=1_800_000_000)
    with deterministic(b"seed"):
        again = ms.mint(keyset, 1, now=1_800_000_000)
    assert first == again
    assert ms.mint(keyset, 1, now=1_800_000_000) != ms.mint(keyset, 1, now=1_800_000_000)
