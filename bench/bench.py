"""``make bench``: mrtr-state against the raw primitives and peer libraries, side by side.

Every row signs or encrypts the same ~200-byte claims payload in the same process. Each figure is
the best of several repeats, each repeat long enough (>= 0.2 s) to be stable. Ratios compare a
row with the raw limit of its kind: JSON + base64url + HMAC-SHA256 for signed rows, JSON +
base64url + AES-256-GCM with a random nonce for encrypted rows.

Writes bench/results.json and prints the table. Peer libraries are benchmark dependencies only.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import mrtr_state as ms
from mrtr_state.keys.keyset import OWN_ALGORITHMS

HERE = Path(__file__).resolve().parent
REPEATS = 5
#: The lifetime of every token the rows verify: the longest the default cap allows, since the
#: interleaved settle rounds take minutes and a token must not expire while it is timed
LIFETIME = 3600
STATE = {
    "step": 2,
    "tool": "deploy",
    "pending": ["confirm", "region"],
    "env": "prod",
    "draft": {"replicas": 3, "image": "registry.example/app:1.42.0"},
}
#: What an mcp-py token binds (as the Python SDK does): the request itself, audience, principal.
SDK_BINDING: dict[str, Any] = {
    "principal": "alice@example.com",
    "method": "tools/call",
    "target": "deploy",
    "arguments": {"env": "prod", "replicas": 3},
    "audience": "https://mcp.example.com",
}
BINDING: dict[str, Any] = {
    "principal": "alice@example.com",
    "request_id": "mcp1:Q2kZk3m0xw0yX1b9y3B6aA",
    "audience": "https://mcp.example.com",
}
#: What each SDK format binds, as its SDK does (Ruby: the request and audience; rmcp: the
#: associated data; PHP: nothing).
SDK_BINDINGS: dict[str, dict[str, Any]] = {
    "mcp-py": SDK_BINDING,
    "mcp-rb": {k: v for k, v in SDK_BINDING.items() if k != "principal"},
    "mcp-rs": {"bind": "alice@example.com|tools/call:deploy"},
    "mcp-php": {},
}


@dataclass
class Row:
    name: str
    kind: str  # "signed" or "encrypted"
    operation: str  # "mint" or "verify"
    micros: float
    token_bytes: int
    ratio: float = 0.0
    #: the median of every repeat, beside ``micros`` (the best)
    median: float = 0.0
    #: against the tight raw row: the same primitives with no per-call Python overhead
    tight_ratio: float = 0.0

    @property
    def ops_per_second(self) -> float:
        return 1e6 / self.micros


#: every repeat's time per call, by function: the medians beside the best-of figures
SAMPLES: dict[Callable[[], object], list[float]] = {}


def best_micros(func: Callable[[], object]) -> float:
    """Best time per call over REPEATS repeats of at least ~0.2 s each (all kept in SAMPLES)."""
    timer = timeit.Timer(func)
    number, elapsed = timer.autorange()
    number = max(number, int(number * 0.2 / max(elapsed, 1e-9)))
    times = [t / number * 1e6 for t in timer.repeat(repeat=REPEATS, number=number)]
    SAMPLES.setdefault(func, []).extend(times)
    return min(times)


class Timing(float):
    """A first measurement that remembers what it measured, so that it can be re-run."""

    func: Callable[[], object]


def timed(func: Callable[[], object]) -> Timing:
    timing = Timing(best_micros(func))
    timing.func = func
    return timing


def settle(rows: list[Row], rounds: int = 2) -> None:
    """Re-measure every row in further rounds, keeping each row's best.

    Rows measured minutes apart see different machine noise; interleaving the rounds gives every
    row, raw limits included, the same chances, so the ratios compare like with like.
    """
    funcs = [row.micros.func for row in rows if isinstance(row.micros, Timing)]
    assert len(funcs) == len(rows)
    for _ in range(rounds):
        for row, func in zip(rows, funcs, strict=True):
            row.micros = min(row.micros, best_micros(func))
    for row, func in zip(rows, funcs, strict=True):
        row.median = statistics.median(SAMPLES[func])


def claims_now() -> dict[str, Any]:
    now = int(time.time())
    return {
        "iat": now,
        "exp": now + LIFETIME,
        "jti": "bench-jti-0123456789ab",
        "sub": "alice@example.com",
        "aud": BINDING["audience"],
        "rid": BINDING["request_id"],
        "st": STATE,
    }


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def raw_rows(secret: bytes) -> list[Row]:
    """The limits: the least work any library doing this job could get away with."""
    claims = claims_now()
    cipher = AESGCM(secret)

    def hmac_mint() -> str:
        body = b64e(json.dumps(claims, separators=(",", ":")).encode())
        return body + "." + b64e(hmac.digest(secret, body.encode(), "sha256"))

    signed = hmac_mint()

    def hmac_verify() -> object:
        body, _, mac = signed.rpartition(".")
        if not hmac.compare_digest(hmac.digest(secret, body.encode(), "sha256"), b64d(mac)):
            raise ValueError
        return json.loads(b64d(body))

    def gcm_mint() -> str:
        nonce = os.urandom(12)
        data = json.dumps(claims, separators=(",", ":")).encode()
        return b64e(nonce + cipher.encrypt(nonce, data, None))

    sealed = gcm_mint()

    def gcm_verify() -> object:
        raw = b64d(sealed)
        return json.loads(cipher.decrypt(raw[:12], raw[12:], None))

    # The tight floor: the same primitives with no per-call Python overhead: binascii directly,
    # a cached encoder, the C scanner called directly (no hooks), the cipher built once.
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    encode = json.JSONEncoder(separators=(",", ":")).encode
    to_standard = bytes.maketrans(b"-_", b"+/")
    a2b = binascii.a2b_base64

    def tight_b64d(text: str) -> bytes:
        return a2b(text.encode().translate(to_standard) + b"=" * (-len(text) % 4))

    def tight_hmac_verify() -> object:
        at = signed.rfind(".")
        body = signed[:at]
        if not hmac.compare_digest(
            hmac.digest(secret, body.encode(), "sha256"), tight_b64d(signed[at + 1 :])
        ):
            raise ValueError
        return scan(tight_b64d(body).decode(), 0)[0]

    def tight_gcm_verify() -> object:
        raw = tight_b64d(sealed)
        return scan(cipher.decrypt(raw[:12], raw[12:], None).decode(), 0)[0]

    def tight_gcm_mint() -> str:
        nonce = os.urandom(12)
        sealed = cipher.encrypt(nonce, encode(claims).encode(), None)
        return binascii.b2a_base64(nonce + sealed, newline=False).decode()

    def tight_hmac_mint() -> str:
        body = binascii.b2a_base64(encode(claims).encode(), newline=False).decode()
        return (
            body
            + "."
            + binascii.b2a_base64(
                hmac.digest(secret, body.encode(), "sha256"), newline=False
            ).decode()
        )

    rows = [
        Row("tight raw HMAC-SHA256", "signed", "mint", timed(tight_hmac_mint), len(signed)),
        Row("tight raw HMAC-SHA256", "signed", "verify", timed(tight_hmac_verify), len(signed)),
        Row("tight raw AES-256-GCM", "encrypted", "mint", timed(tight_gcm_mint), len(sealed)),
        Row("tight raw AES-256-GCM", "encrypted", "verify", timed(tight_gcm_verify), len(sealed)),
        Row("raw HMAC-SHA256", "signed", "mint", timed(hmac_mint), len(signed)),
        Row("raw HMAC-SHA256", "signed", "verify", timed(hmac_verify), len(signed)),
        Row("raw AES-256-GCM", "encrypted", "mint", timed(gcm_mint), len(sealed)),
        Row("raw AES-256-GCM", "encrypted", "verify", timed(gcm_verify), len(sealed)),
    ]
    return rows


def our_rows(keyset: ms.Keyset) -> list[Row]:
    rows = []
    for fmt, kind in (
        ("jws", "signed"),
        ("aead", "encrypted"),
        ("jwe", "encrypted"),
        ("mcp-py", "encrypted"),
        ("mcp-rb", "encrypted"),
        ("mcp-rs", "signed"),
        ("mcp-php", "signed"),
    ):
        binding = SDK_BINDINGS.get(fmt, BINDING)
        state: Any = json.dumps(STATE) if fmt in ("mcp-py", "mcp-rb") else STATE
        token = ms.mint(keyset, state, format=fmt, ttl=LIFETIME, **binding)

        def mint(fmt: str = fmt, binding: dict[str, Any] = binding, state: Any = state) -> str:
            return ms.mint(keyset, state, format=fmt, **binding)

        def verify(token: str = token, binding: dict[str, Any] = binding) -> ms.Claims:
            return ms.verify(keyset, token, **binding)

        name = f"mrtr-state {fmt}"
        rows.append(Row(name, kind, "mint", timed(mint), len(token)))
        rows.append(Row(name, kind, "verify", timed(verify), len(token)))
    return rows


def peer_rows(secret: bytes) -> list[Row]:
    rows: list[Row] = []
    claims = claims_now()
    try:
        from itsdangerous import URLSafeTimedSerializer
    except ImportError:
        print("itsdangerous not installed: skipped", file=sys.stderr)
    else:
        serializer = URLSafeTimedSerializer(secret)
        its_token = serializer.dumps(claims)
        rows += [
            Row(
                "itsdangerous URLSafeTimedSerializer",
                "signed",
                "mint",
                timed(lambda: serializer.dumps(claims)),
                len(its_token),
            ),
            Row(
                "itsdangerous URLSafeTimedSerializer",
                "signed",
                "verify",
                timed(lambda: serializer.loads(its_token, max_age=LIFETIME)),
                len(its_token),
            ),
        ]
    try:
        import jwt
    except ImportError:
        print("PyJWT not installed: skipped", file=sys.stderr)
    else:
        jwt_token = jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "k1"})
        rows += [
            Row(
                "PyJWT HS256",
                "signed",
                "mint",
                timed(lambda: jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "k1"})),
                len(jwt_token),
            ),
            Row(
                "PyJWT HS256",
                "signed",
                "verify",
                timed(
                    lambda: jwt.decode(
                        jwt_token, secret, algorithms=["HS256"], audience=BINDING["audience"]
                    )
                ),
                len(jwt_token),
            ),
        ]
    from cryptography.fernet import Fernet

    fernet = Fernet(base64.urlsafe_b64encode(secret))
    data = json.dumps(claims, separators=(",", ":")).encode()
    token_bytes = fernet.encrypt(data)
    rows += [
        Row(
            "cryptography Fernet",
            "encrypted",
            "mint",
            timed(lambda: fernet.encrypt(json.dumps(claims, separators=(",", ":")).encode())),
            len(token_bytes),
        ),
        Row(
            "cryptography Fernet",
            "encrypted",
            "verify",
            timed(lambda: json.loads(fernet.decrypt(token_bytes, ttl=LIFETIME))),
            len(token_bytes),
        ),
    ]
    try:
        from joserfc import jwe
        from joserfc.jwk import OctKey
    except ImportError:
        print("joserfc not installed: skipped", file=sys.stderr)
    else:
        key = OctKey.import_key(secret)
        header = {"alg": "dir", "enc": "A256GCM", "kid": "k1"}
        jwe_token = jwe.encrypt_compact(header, data, key)
        rows += [
            Row(
                "joserfc JWE dir/A256GCM",
                "encrypted",
                "mint",
                timed(lambda: jwe.encrypt_compact(header, json.dumps(claims), key)),
                len(jwe_token),
            ),
            Row(
                "joserfc JWE dir/A256GCM",
                "encrypted",
                "verify",
                timed(lambda: json.loads(jwe.decrypt_compact(jwe_token, key).plaintext or b"")),
                len(jwe_token),
            ),
        ]
    rows += sdk_codec_rows(secret)
    return rows


def sdk_codec(secret: bytes, state: str) -> tuple[Callable[[], str], Callable[[], object]]:
    """The Python SDK's own requestState path for ``state``: its codec and its envelope code,
    as its RequestStateBoundary middleware runs them (digest, audience and principal
    included): (mint, verify of a token minted once)."""
    from mcp.server import request_state as sdk

    codec = sdk.AESGCMRequestStateCodec([secret])
    params = {"name": SDK_BINDING["target"], "arguments": SDK_BINDING["arguments"]}
    audience, principal = SDK_BINDING["audience"], SDK_BINDING["principal"]

    def mint() -> str:
        target, digest = sdk._request_identity("tools/call", params)
        now = time.time()
        claims = {
            "v": 1,
            "iat": now,
            "exp": now + LIFETIME,
            "m": "tools/call",
            "t": target,
            "a": digest,
            "s": state,
            "aud": audience,
            "p": sdk._principal_claim(principal),
        }
        return codec.seal(sdk.compact_json(claims).encode())

    token = mint()

    def verify() -> object:
        claims = json.loads(codec.unseal(token))
        now = time.time()
        if not (claims["iat"] <= now + 60 and now < claims["exp"]):
            raise ValueError
        target, digest = sdk._request_identity("tools/call", params)
        if (claims["m"], claims["t"], claims["a"]) != ("tools/call", target, digest):
            raise ValueError
        if claims.get("aud") != audience or not sdk._principal_matches(claims["p"], principal):
            raise ValueError
        return claims["s"]

    return mint, verify


def sdk_codec_rows(secret: bytes) -> list[Row]:
    """The Python SDK's own codec and envelope code on the bench state (see sdk_codec)."""
    try:
        import mcp.server.request_state  # noqa: F401
    except ImportError:
        print("mcp not installed: the SDK codec rows are skipped", file=sys.stderr)
        return []
    mint, verify = sdk_codec(secret, json.dumps(STATE))
    token = mint()
    name = "mcp SDK codec + envelope checks"
    return [
        Row(name, "encrypted", "mint", timed(mint), len(token)),
        Row(name, "encrypted", "verify", timed(verify), len(token)),
    ]


#: The bind value the mcp-ts rows state, as a server would (principal, method, target).
TS_BIND = "alice@example.com|tools/call|deploy"


def ts_codec(secret: bytes, state: Any) -> tuple[Callable[[], str], Callable[[], object]]:
    """The TypeScript SDK's codec logic (``createRequestStateCodec``) written plainly in
    Python, for ``state``: (mint, verify of a token minted once).

    What it does is what the SDK does per token: JSON of ``{p, exp, b}``, base64url, HMAC-SHA256
    under the raw secret over ``v1.`` + body, and on verify the MAC compared in constant time,
    the body decoded and parsed, ``exp`` and the bind tag checked. It keys HMAC per call, as the
    SDK's Node code does with ``createHmac``.
    """

    def bind_tag() -> str:
        return b64e(
            hmac.digest(secret, b"mcp.requestState.bind:" + TS_BIND.encode(), "sha256")[:16]
        )

    def mint() -> str:
        body = {"p": state, "exp": int(time.time()) + LIFETIME, "b": bind_tag()}
        signed = "v1." + b64e(json.dumps(body, separators=(",", ":")).encode())
        return signed + "." + b64e(hmac.digest(secret, signed.encode(), "sha256"))

    token = mint()

    def verify() -> object:
        prefix, body, mac = token.split(".")
        signed = f"{prefix}.{body}".encode()
        if prefix != "v1" or not hmac.compare_digest(
            hmac.digest(secret, signed, "sha256"), b64d(mac)
        ):
            raise ValueError
        claims = json.loads(b64d(body))
        if not time.time() < claims["exp"] or not hmac.compare_digest(claims["b"], bind_tag()):
            raise ValueError
        return claims["p"]

    return mint, verify


def mcp_ts_rows(secret: bytes) -> list[Row]:
    """mcp-ts, ours against the TypeScript SDK's codec logic written plainly in Python
    (ts_codec), on the bench state."""
    keyset = ms.Keyset([ms.Key.from_secret("mcp-ts-v1", secret, status="primary")], source="bench")
    state = json.dumps(STATE)
    naive_mint, naive_verify = ts_codec(secret, state)
    naive_token = naive_mint()
    token = ms.mint(keyset, state, format="mcp-ts", bind=TS_BIND, ttl=LIFETIME)
    naive = "TypeScript SDK codec logic, naive Python"
    ours = "mrtr-state mcp-ts"
    return [
        Row(
            ours,
            "signed",
            "mint",
            timed(lambda: ms.mint(keyset, state, format="mcp-ts", bind=TS_BIND)),
            len(token),
        ),
        Row(
            ours,
            "signed",
            "verify",
            timed(lambda: ms.verify(keyset, token, bind=TS_BIND)),
            len(token),
        ),
        Row(naive, "signed", "mint", timed(naive_mint), len(naive_token)),
        Row(naive, "signed", "verify", timed(naive_verify), len(naive_token)),
    ]


def reload_cost(keyset: ms.Keyset) -> dict[str, float]:
    """Verify through a keyset that follows its file (the default) against one that does not."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "keyset.json"
        keyset.save(path)
        followed = ms.Keyset.load(path)  # checks the file at most once a second
        fixed = ms.Keyset.load(path, reload_interval=None)
        token = ms.mint(fixed, STATE, **BINDING)
        static = best_micros(lambda: ms.verify(fixed, token, **BINDING))
        watching = best_micros(lambda: ms.verify(followed, token, **BINDING))
        static = min(static, best_micros(lambda: ms.verify(fixed, token, **BINDING)))
        watching = min(watching, best_micros(lambda: ms.verify(followed, token, **BINDING)))
    return {"fixed_us": static, "following_us": watching, "ratio": watching / static}


def keyset_size_ratio() -> dict[str, float]:
    small = ms.Keyset.generate()
    big_keys = list(small)
    taken = {key.kid for key in big_keys}
    while len(big_keys) < 10_000:
        kid = os.urandom(4).hex()
        if kid not in taken:
            taken.add(kid)
            big_keys.append(ms.Key.generate("A256GCM", kid=kid, status="active"))
    big = ms.Keyset(big_keys)
    token = ms.mint(small, STATE, **BINDING)
    ms.verify(big, token, **BINDING)  # routes and ciphers are built once per keyset version
    one = best_micros(lambda: ms.verify(small, token, **BINDING))
    many = best_micros(lambda: ms.verify(big, token, **BINDING))
    one = min(one, best_micros(lambda: ms.verify(small, token, **BINDING)))
    many = min(many, best_micros(lambda: ms.verify(big, token, **BINDING)))
    return {"verify_1_key_us": one, "verify_10000_keys_us": many, "ratio": many / one}


def replay_rates(keyset: ms.Keyset) -> dict[str, float]:
    """Single-use verification (verify + redeem) per second, per store."""
    from mrtr_state.state.replay import MemoryStore, SqliteStore

    rates: dict[str, float] = {}
    count = 5000
    with tempfile.TemporaryDirectory() as folder:
        stores: dict[str, Any] = {
            "memory": MemoryStore(),
            "sqlite": SqliteStore(Path(folder) / "replay.db"),
        }
        redis_server = _start_redis(folder)
        if redis_server is not None:
            from mrtr_state.state.replay import RedisStore

            stores["redis"] = RedisStore(redis_server[1])
        try:
            for _round in range(3):  # interleaved rounds, best of each: one pass is too noisy
                for name, store in stores.items():
                    tokens = [ms.mint(keyset, STATE, **BINDING) for _ in range(count)]
                    started = time.perf_counter()
                    for token in tokens:
                        ms.verify(keyset, token, once=store, **BINDING)
                    rate = count / (time.perf_counter() - started)
                    rates[name] = max(rates.get(name, 0.0), rate)
        finally:
            if redis_server is not None:
                redis_server[0].terminate()
                redis_server[0].wait(10)
    return rates


def _start_redis(folder: str) -> tuple[subprocess.Popen[bytes], str] | None:
    import shutil
    import socket

    binary = shutil.which("redis-server")
    if binary is None:
        print("no redis-server binary: the redis --once row is skipped", file=sys.stderr)
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    server.terminate()
    return None


def single_use_at_scale() -> dict[str, Any]:
    """bench/at_scale.py, on a Redis server of its own (skipped without redis-server)."""
    import at_scale

    with tempfile.TemporaryDirectory() as folder:
        redis_server = _start_redis(folder)
        try:
            return at_scale.main(None if redis_server is None else redis_server[1])
        finally:
            if redis_server is not None:
                redis_server[0].terminate()
                redis_server[0].wait(10)


def wall(
    command: list[str],
    runs: int = 15,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, input=stdin, check=True, stdout=subprocess.DEVNULL, env=env)
        best = min(best, time.perf_counter() - started)
    return best


def regular_install(folder: str) -> Path:
    """mrtr-state installed the ordinary way (files copied, byte-compiled) into ``folder``."""
    target = Path(folder) / "site"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--target", str(target), str(HERE.parent)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return target


def cli_rows(keyset: ms.Keyset, library_verify_us: float) -> dict[str, float]:
    # Byte-compile first: a fresh checkout (or PYTHONDONTWRITEBYTECODE) would otherwise time
    # the compiler, not the program.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(ms.__file__).parent)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "keyset.json"
        keyset.save(path)
        token = ms.mint(keyset, STATE)
        exe = str(Path(sys.executable).with_name("mrtr-state"))
        floor = [sys.executable, "-c", "import click, cryptography.hazmat.primitives.ciphers.aead"]
        regular = regular_install(folder)
        run_regular = [sys.executable, "-c", "from mrtr_state.cli import main; main()"]
        env_regular = {**os.environ, "PYTHONPATH": str(regular)}
        timings: dict[str, float] = {}
        commands = {
            "import_baseline_s": (floor, None),
            "cli_verify_one_s": ([exe, "--keyset", str(path), "verify", token], None),
            "cli_help_s": ([exe, "--help"], None),
            "regular_verify_one_s": (
                [*run_regular, "--keyset", str(path), "verify", token],
                env_regular,
            ),
            "regular_help_s": ([*run_regular, "--help"], env_regular),
        }
        for _ in range(3):  # interleaved rounds, as for the rows
            for name, (command, env) in commands.items():
                best = wall(command, runs=7, env=env)
                timings[name] = min(timings.get(name, best), best)
        count = 100_000
        lines = "\n".join(ms.mint(keyset, STATE) for _ in range(count)).encode() + b"\n"
        batch = wall([exe, "--keyset", str(path), "verify", "-"], runs=3, stdin=lines)
    batch_rate = count / batch
    library_rate = 1e6 / library_verify_us
    base = timings["import_baseline_s"]
    return {
        **timings,
        "startup_ratio": timings["cli_verify_one_s"] / base,
        "help_ratio": timings["cli_help_s"] / base,
        "regular_startup_ratio": timings["regular_verify_one_s"] / base,
        "regular_help_ratio": timings["regular_help_s"] / base,
        "batch_tokens": count,
        "batch_tokens_per_s": batch_rate,
        "library_verify_per_s": library_rate,
        "batch_vs_library": batch_rate / library_rate,
    }


#: What each larger-state figure compares, ours first: (name, our row, the row it is held to).
STATE_PAIRS = (
    ("aead verify", "aead_verify", "raw_gcm_verify"),
    ("aead mint", "aead_mint", "raw_gcm_mint"),
    ("jws verify", "jws_verify", "raw_hmac_verify"),
    ("mcp-py verify", "mcp_py_verify", "sdk_verify"),
    ("mcp-ts verify", "mcp_ts_verify", "ts_verify"),
)


def state_size_rows(keyset: ms.Keyset) -> list[dict[str, Any]]:
    """Larger states (many small objects) through aead and jws against the raw AES-GCM and
    HMAC rows doing the same work on the same claims, and through mcp-py and mcp-ts against
    their SDKs' own code carrying the same state (as a JSON string, as the SDKs carry theirs):
    the reader's cost grows with the objects. Each figure is the best and the median of its
    repeats over interleaved rounds."""
    return [
        state_size(keyset, label, count)
        for label, count in (("4 KB, ~100 objects", 100), ("64 KB, ~1,700 objects", 1700))
    ]


def state_size(keyset: ms.Keyset, label: str, count: int) -> dict[str, Any]:
    """The rows of :func:`state_size_rows` for a state of ``count`` small objects."""
    secret, sdk_secret = os.urandom(32), os.urandom(32)
    cipher = AESGCM(secret)
    ts_keyset = ms.Keyset([ms.Key.from_secret("mcp-ts-v1", sdk_secret)], source="bench")
    py_keyset = ms.Keyset([ms.Key.from_secret("mcp-py-v1", sdk_secret)], source="bench")
    state = [{"id": i, "name": f"item-{i:05d}", "ok": True} for i in range(count)]
    text_state = json.dumps(state)
    policy = ms.Policy(max_size=200_000)
    claims = {**claims_now(), "st": state}
    nonce = os.urandom(12)
    sealed = b64e(nonce + cipher.encrypt(nonce, json.dumps(claims).encode(), None))
    body = b64e(json.dumps(claims, separators=(",", ":")).encode())
    signed = body + "." + b64e(hmac.digest(secret, body.encode(), "sha256"))
    aead_token = ms.mint(keyset, state, **BINDING, policy=policy)
    jws_token = ms.mint(keyset, state, **BINDING, policy=policy, format="jws")
    py_token = ms.mint(
        py_keyset, text_state, format="mcp-py", ttl=LIFETIME, policy=policy, **SDK_BINDING
    )
    ts_token = ms.mint(
        ts_keyset, text_state, format="mcp-ts", ttl=LIFETIME, policy=policy, bind=TS_BIND
    )

    def raw_gcm_verify() -> object:
        raw = b64d(sealed)
        return json.loads(cipher.decrypt(raw[:12], raw[12:], None))

    def raw_gcm_mint() -> str:
        nonce = os.urandom(12)
        data = json.dumps(claims, separators=(",", ":")).encode()
        return b64e(nonce + cipher.encrypt(nonce, data, None))

    def raw_hmac_verify() -> object:
        body, _, mac = signed.rpartition(".")
        if not hmac.compare_digest(hmac.digest(secret, body.encode(), "sha256"), b64d(mac)):
            raise ValueError
        return json.loads(b64d(body))

    measured: dict[str, Callable[[], object]] = {
        "raw_gcm_verify": raw_gcm_verify,
        "aead_verify": lambda: ms.verify(keyset, aead_token, **BINDING, policy=policy),
        "raw_gcm_mint": raw_gcm_mint,
        "aead_mint": lambda: ms.mint(keyset, state, **BINDING, policy=policy),
        "raw_hmac_verify": raw_hmac_verify,
        "jws_verify": lambda: ms.verify(keyset, jws_token, **BINDING, policy=policy),
        "mcp_py_verify": lambda: ms.verify(py_keyset, py_token, policy=policy, **SDK_BINDING),
        "ts_verify": ts_codec(sdk_secret, text_state)[1],
        "mcp_ts_verify": lambda: ms.verify(ts_keyset, ts_token, policy=policy, bind=TS_BIND),
    }
    try:
        measured["sdk_verify"] = sdk_codec(sdk_secret, text_state)[1]
    except ImportError:
        print("mcp not installed: the SDK rows at larger states are skipped", file=sys.stderr)
    # interleaved rounds, every repeat kept: a burst of machine noise lands on every row alike
    # instead of on whichever was being timed
    times: dict[str, list[float]] = {name: [] for name in measured}
    for _round in range(5):
        for name, func in measured.items():
            best_micros(func)
            times[name] += SAMPLES.pop(func)
    best = {name: min(values) for name, values in times.items()}
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "state": label,
        "token_bytes": len(aead_token),
        "best_us": best,
        "median_us": median,
        "ratios": {
            name: {"best": best[ours] / best[held], "median": median[ours] / median[held]}
            for name, ours, held in STATE_PAIRS
            if ours in best and held in best
        },
    }


def markdown(rows: list[Row]) -> str:
    lines = [
        "| row | op | µs/op (best) | µs/op (median) | ops/s | token bytes | × raw limit "
        "| × tight floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = f"**{row.name}**" if row.name.startswith("mrtr-state") else row.name
        lines.append(
            f"| {name} | {row.operation} | {row.micros:.2f} | {row.median:.2f} "
            f"| {row.ops_per_second:,.0f} | {row.token_bytes} | {row.ratio:.2f} "
            f"| {row.tight_ratio:.2f} |"
        )
    return "\n".join(lines)


def render(rows: list[Row]) -> str:
    head = (
        f"{'row':<38} {'op':<7} {'best µs':>8} {'median':>8} {'ops/s':>9} {'bytes':>6} "
        f"{'× raw':>6} {'× tight':>7}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(
            f"{row.name:<38} {row.operation:<7} {row.micros:>8.2f} {row.median:>8.2f} "
            f"{row.ops_per_second:>9,.0f} {row.token_bytes:>6} {row.ratio:>6.2f} "
            f"{row.tight_ratio:>7.2f}"
        )
    return "\n".join(lines)


def _ratios(size: dict[str, Any]) -> str:
    return ", ".join(
        f"{name} {ratio['best']:.2f}× ({ratio['median']:.2f}×)"
        for name, ratio in size["ratios"].items()
    )


def main() -> None:
    secret = os.urandom(32)
    keyset = ms.Keyset.generate(
        (*OWN_ALGORITHMS, "mcp-py-v1", "mcp-rb-v1", "mcp-rs-v1", "mcp-php-v1")
    )
    rows = raw_rows(secret)
    rows += our_rows(keyset)
    rows += peer_rows(secret)
    rows += mcp_ts_rows(secret)
    settle(rows, rounds=4)
    limits = {f"{r.kind}/{r.operation}": r.micros for r in rows if r.name.startswith("raw ")}
    floors = {f"{r.kind}/{r.operation}": r.micros for r in rows if r.name.startswith("tight ")}
    for row in rows:
        row.ratio = row.micros / limits[f"{row.kind}/{row.operation}"]
        row.tight_ratio = row.micros / floors[f"{row.kind}/{row.operation}"]
    rows.sort(key=lambda r: (r.operation, r.kind, r.micros))
    sizes = keyset_size_ratio()
    reload = reload_cost(keyset)
    once = replay_rates(keyset)
    sized = state_size_rows(keyset)
    aead_verify = next(
        r.micros for r in rows if r.name == "mrtr-state aead" and r.operation == "verify"
    )
    cli = cli_rows(keyset, aead_verify)
    at_scale = single_use_at_scale()
    import kek_startup

    kek_start = kek_startup.main()
    machine = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "system": platform.platform(),
        "cryptography": __import__("cryptography").__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(render(rows))
    print(
        f"\nverify with 10,000 keys vs 1 key: {sizes['ratio']:.2f}× "
        f"({sizes['verify_10000_keys_us']:.2f} vs {sizes['verify_1_key_us']:.2f} µs)"
    )
    print(
        f"verify through a keyset following its file vs a fixed one: {reload['ratio']:.2f}× "
        f"({reload['following_us']:.2f} vs {reload['fixed_us']:.2f} µs)"
    )
    print(
        f"CLI verify of one token: {cli['cli_verify_one_s'] * 1000:.1f} ms, "
        f"{cli['startup_ratio']:.2f}× the import baseline "
        f"({cli['import_baseline_s'] * 1000:.1f} ms); --help {cli['help_ratio']:.2f}×; "
        f"regular install: verify {cli['regular_startup_ratio']:.2f}×, "
        f"--help {cli['regular_help_ratio']:.2f}×"
    )
    print(
        f"CLI batch verify: {cli['batch_tokens_per_s']:,.0f} tokens/s = "
        f"{cli['batch_vs_library']:.2f}× the library's {cli['library_verify_per_s']:,.0f}/s"
    )
    for size in sized:
        print(f"state of {size['state']} ({size['token_bytes']} aead bytes): " + _ratios(size))
    print("single-use verify: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in once.items()))
    print(f"machine: {machine}")
    result = {
        "machine": machine,
        "rows": [{**asdict(r), "ops_per_second": r.ops_per_second} for r in rows],
        "keyset_size": sizes,
        "keyset_reload": reload,
        "once_per_second": once,
        "cli": cli,
        "state_sizes": sized,
        "single_use_at_scale": at_scale,
        "encrypted_keyset_startup": kek_start,
    }
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    summary = (
        f"verify with 10,000 keys vs 1 key: {sizes['ratio']:.2f}×; verify through a keyset "
        f"following its file vs a fixed one: {reload['ratio']:.2f}×; "
        f"CLI verify of one token {cli['cli_verify_one_s'] * 1000:.0f} ms = "
        f"{cli['startup_ratio']:.2f}× `python -c 'import click, cryptography...aead'` "
        f"({cli['import_baseline_s'] * 1000:.0f} ms), `--help` {cli['help_ratio']:.2f}× "
        f"(regular install: verify {cli['regular_startup_ratio']:.2f}×, `--help` "
        f"{cli['regular_help_ratio']:.2f}×); `verify -` over {cli['batch_tokens']:,} "
        f"tokens: {cli['batch_tokens_per_s']:,.0f}/s = {cli['batch_vs_library']:.2f}× the "
        f"library's {cli['library_verify_per_s']:,.0f}/s. Single-use verification (verify "
        "--once, aead): " + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in once.items()) + "."
    )
    summary += (
        " Larger states (many small objects; aead and jws against the raw rows, mcp-py and "
        "mcp-ts against their SDKs' own code; best, median in brackets): "
        + "; ".join(f"{size['state']}: {_ratios(size)}" for size in sized)
        + "."
    )
    where = (
        f"Python {machine['python']}, cryptography {machine['cryptography']}, "
        f"{machine['cpus']} CPUs ({machine['machine']}), {machine['system']}, "
        f"{machine['date']}"
    )
    (HERE / "results.md").write_text(f"{markdown(rows)}\n\n{summary}\n\nMachine: {where}.\n")


if __name__ == "__main__":
    main()
