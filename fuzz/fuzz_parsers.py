"""Coverage-guided fuzzing of every token parser with atheris (``make fuzz``).

    python fuzz/fuzz_parsers.py FORMAT -atheris_runs=1000000

Each input is handed to ``verify``, ``inspect`` (with and without the keyset) and ``unseal``.
The only acceptable outcomes are a result or one of our ``InvalidToken`` errors; anything else
(another exception, a crash, a hang) is a finding. Inputs start from real tokens of the format,
so the fuzzer reaches past the prefix checks into base64, the key routing, the tag checks and
the claim parsers; a keyset that holds every key makes authentic-looking paths reachable.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import atheris
from _harness import run

with atheris.instrument_imports():
    import mrtr_state as ms
    from mrtr_state.keys.keyset import Key

    # The library imports these lazily; load them here so that they are instrumented too.
    from mrtr_state.tokens.envelopes import mcp_java as _java_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import mcp_php as _php_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import mcp_py as _py_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import mcp_rb as _rb_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import mcp_rs as _rs_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import mcp_ts as _ts_envelope  # noqa: F401
    from mrtr_state.tokens.envelopes import own as _own_envelope  # noqa: F401
    from mrtr_state.tokens.formats import (  # noqa: F401
        aead,
        jwe,
        jws,
        mcp_java,
        mcp_php,
        mcp_py,
        mcp_rb,
        mcp_rs,
        mcp_rs2,
        mcp_ts,
    )

NOW = 1_800_000_000
REQUEST: dict[str, Any] = {"method": "tools/call", "target": "t", "arguments": {}}
FORMATS = (
    *("aead", "jws", "jwe", "mcp-py", "mcp-ts", "mcp-rb", "mcp-rs", "mcp-rs2", "mcp-php"),
    "mcp-java",
)
#: the binding each SDK format's seeds are minted with
BINDINGS: dict[str, dict[str, Any]] = {
    "mcp-py": REQUEST,
    "mcp-rb": REQUEST,
    "mcp-rs": {"bind": "ad"},
    "mcp-rs2": {"bind": "ad"},
    "mcp-java": {"method": "tools/call", "target": "t", "principal": "p"},
}


def keyset() -> ms.Keyset:
    own = list(ms.Keyset.generate(now=NOW))
    sdk = [
        Key.from_secret(alg, secret, sdk_kid="ring" if alg == "mcp-rs-v2" else None)
        for alg, secret in (
            ("mcp-py-v1", b"p" * 40),
            ("mcp-ts-v1", b"t" * 40),
            ("mcp-rb-v1", b"r" * 32),
            ("mcp-rs-v1", b"s" * 40),
            ("mcp-rs-v2", b"k" * 40),
            ("mcp-php-v1", b"h" * 40),
            ("mcp-java-v1", b"j" * 40),
        )
    ]
    return ms.Keyset([*own, *sdk])


def seeds(keys: ms.Keyset, fmt: str) -> list[str]:
    state = "s" if fmt in ("mcp-py", "mcp-rb", "mcp-java") else {"k": [1, 2.5, None, "é"]}
    tokens = [ms.mint(keys, state, format=fmt, now=NOW, **BINDINGS.get(fmt, {}))]
    if fmt in ("mcp-rs", "mcp-rs2"):
        tokens.append(ms.mint(keys, b"\x00raw", format=fmt, now=NOW))
    if fmt in ("aead", "jws", "jwe"):
        tokens.append(
            ms.mint(keys, state, format=fmt, now=NOW, principal="a", audience="b", request_id="c")
        )
        tokens.append(ms.seal(keys, b"payload", format=fmt))
    return tokens


def main() -> None:
    fmt = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "aead"
    if fmt not in FORMATS:
        raise SystemExit(f"usage: fuzz_parsers.py {{{'|'.join(FORMATS)}}} [atheris options]")
    keys = keyset()
    corpus = [t.encode() for t in seeds(keys, fmt)]

    def one_input(data: bytes) -> None:
        provider = atheris.FuzzedDataProvider(data)
        choice = provider.ConsumeIntInRange(0, 3)
        if choice == 0:  # a real token with bytes spliced in
            base = corpus[provider.ConsumeIntInRange(0, len(corpus) - 1)]
            at = provider.ConsumeIntInRange(0, len(base))
            token: bytes | str = base[:at] + provider.ConsumeBytes(8) + base[at + 8 :]
        elif choice == 1:
            token = provider.ConsumeBytes(provider.remaining_bytes())
        else:
            token = provider.ConsumeUnicodeNoSurrogates(provider.remaining_bytes())
        for call in (
            lambda: ms.verify(keys, token, now=NOW, **BINDINGS.get(fmt, REQUEST)),
            lambda: ms.inspect(token, keyset=keys, now=NOW),
            lambda: ms.inspect(token),
            lambda: ms.unseal(keys, token),
        ):
            with contextlib.suppress(ms.InvalidToken):
                call()

    run(fmt, one_input)


if __name__ == "__main__":
    main()
