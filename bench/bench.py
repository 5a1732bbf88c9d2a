"""``make bench``: mrtr-state against the raw primitives and peer libraries, side by side.

Every row signs or encrypts the same ~200-byte claims payload in the same process. Each figure is
the best of several repeats, each repeat long enough (>= 0.2 s) to be stable. Ratios compare a
row with the raw limit of its kind: JSON + base64url + HMAC-SHA256 for signed rows, JSON +
base64url + AES-256-GCM with a random nonce for encrypted rows.

Writes bench/results.json and prints the table. Peer libraries are benchmark dependencies only.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import platform
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

HERE = Path(__file__).resolve().parent
REPEATS = 5
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


@dataclass
class Row:
    name: str
    kind: str  # "signed" or "encrypted"
    operation: str  # "mint" or "verify"
    micros: float
    token_bytes: int
    ratio: float = 0.0

    @property
    def ops_per_second(self) -> float:
        return 1e6 / self.micros


def best_micros(func: Callable[[], object]) -> float:
    """Best time per call over REPEATS repeats of at least ~0.2 s each."""
    timer = timeit.Timer(func)
    number, elapsed = timer.autorange()
    number = max(number, int(number * 0.2 / max(elapsed, 1e-9)))
    return min(timer.repeat(repeat=REPEATS, number=number)) / number * 1e6


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


def claims_now() -> dict[str, Any]:
    now = int(time.time())
    return {
        "iat": now,
        "exp": now + 300,
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

    rows = [
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
    ):
        binding = SDK_BINDING if fmt == "mcp-py" else BINDING
        state: Any = json.dumps(STATE) if fmt == "mcp-py" else STATE
        token = ms.mint(keyset, state, format=fmt, **binding)

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
                timed(lambda: serializer.loads(its_token, max_age=300)),
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
            timed(lambda: json.loads(fernet.decrypt(token_bytes, ttl=300))),
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


def sdk_codec_rows(secret: bytes) -> list[Row]:
    """The Python SDK's own requestState path: its codec and its envelope code, as its
    RequestStateBoundary middleware runs them (digest, audience and principal included)."""
    try:
        from mcp.server import request_state as sdk
    except ImportError:
        print("mcp not installed: the SDK codec rows are skipped", file=sys.stderr)
        return []
    codec = sdk.AESGCMRequestStateCodec([secret])
    params = {"name": SDK_BINDING["target"], "arguments": SDK_BINDING["arguments"]}
    audience, principal = SDK_BINDING["audience"], SDK_BINDING["principal"]
    state = json.dumps(STATE)

    def mint() -> str:
        target, digest = sdk._request_identity("tools/call", params)
        now = time.time()
        claims = {
            "v": 1,
            "iat": now,
            "exp": now + 300,
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

    name = "mcp SDK codec + envelope checks"
    return [
        Row(name, "encrypted", "mint", timed(mint), len(token)),
        Row(name, "encrypted", "verify", timed(verify), len(token)),
    ]


def keyset_size_ratio() -> dict[str, float]:
    small = ms.Keyset.generate()
    big_keys = list(small)
    while len(big_keys) < 1000:
        big_keys.append(ms.Key.generate("A256GCM", kid=os.urandom(4).hex(), status="active"))
    big = ms.Keyset(big_keys)
    token = ms.mint(small, STATE, **BINDING)
    one = best_micros(lambda: ms.verify(small, token, **BINDING))
    thousand = best_micros(lambda: ms.verify(big, token, **BINDING))
    return {"verify_1_key_us": one, "verify_1000_keys_us": thousand, "ratio": thousand / one}


def replay_rates(keyset: ms.Keyset) -> dict[str, float]:
    """Single-use verification (verify + redeem) per second, per store."""
    from mrtr_state.replay import MemoryStore, SqliteStore

    rates: dict[str, float] = {}
    count = 5000
    with tempfile.TemporaryDirectory() as folder:
        stores: dict[str, Any] = {
            "memory": MemoryStore(),
            "sqlite": SqliteStore(Path(folder) / "replay.db"),
        }
        redis_server = _start_redis(folder)
        if redis_server is not None:
            from mrtr_state.replay import RedisStore

            stores["redis"] = RedisStore(redis_server[1])
        try:
            for name, store in stores.items():
                tokens = [ms.mint(keyset, STATE, **BINDING) for _ in range(count)]
                started = time.perf_counter()
                for token in tokens:
                    ms.verify(keyset, token, once=store, **BINDING)
                rates[name] = count / (time.perf_counter() - started)
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


def wall(command: list[str], runs: int = 15, stdin: bytes | None = None) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, input=stdin, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


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
        baseline = wall(
            [sys.executable, "-c", "import click, cryptography.hazmat.primitives.ciphers.aead"]
        )
        verify_one = wall([exe, "--keyset", str(path), "verify", token])
        count = 100_000
        lines = "\n".join(ms.mint(keyset, STATE) for _ in range(count)).encode() + b"\n"
        batch = wall([exe, "--keyset", str(path), "verify", "-"], runs=3, stdin=lines)
    batch_rate = count / batch
    library_rate = 1e6 / library_verify_us
    return {
        "import_baseline_s": baseline,
        "cli_verify_one_s": verify_one,
        "startup_ratio": verify_one / baseline,
        "batch_tokens": count,
        "batch_tokens_per_s": batch_rate,
        "library_verify_per_s": library_rate,
        "batch_vs_library": batch_rate / library_rate,
    }


def markdown(rows: list[Row]) -> str:
    lines = [
        "| row | op | µs/op | ops/s | token bytes | × raw limit |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = f"**{row.name}**" if row.name.startswith("mrtr-state") else row.name
        lines.append(
            f"| {name} | {row.operation} | {row.micros:.2f} | {row.ops_per_second:,.0f} "
            f"| {row.token_bytes} | {row.ratio:.2f} |"
        )
    return "\n".join(lines)


def render(rows: list[Row]) -> str:
    head = f"{'row':<38} {'op':<7} {'µs/op':>8} {'ops/s':>9} {'bytes':>6} {'× raw':>6}"
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(
            f"{row.name:<38} {row.operation:<7} {row.micros:>8.2f} "
            f"{row.ops_per_second:>9,.0f} {row.token_bytes:>6} {row.ratio:>6.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    secret = os.urandom(32)
    keyset = ms.Keyset.generate((*ms.keyset.OWN_ALGORITHMS, "mcp-py-v1"))
    rows = raw_rows(secret)
    rows += our_rows(keyset)
    rows += peer_rows(secret)
    settle(rows)
    limits = {f"{r.kind}/{r.operation}": r.micros for r in rows if r.name.startswith("raw ")}
    for row in rows:
        row.ratio = row.micros / limits[f"{row.kind}/{row.operation}"]
    rows.sort(key=lambda r: (r.operation, r.kind, r.micros))
    sizes = keyset_size_ratio()
    once = replay_rates(keyset)
    aead_verify = next(
        r.micros for r in rows if r.name == "mrtr-state aead" and r.operation == "verify"
    )
    cli = cli_rows(keyset, aead_verify)
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
        f"\nverify with 1,000 keys vs 1 key: {sizes['ratio']:.2f}× "
        f"({sizes['verify_1000_keys_us']:.2f} vs {sizes['verify_1_key_us']:.2f} µs)"
    )
    print(
        f"CLI verify of one token: {cli['cli_verify_one_s'] * 1000:.1f} ms, "
        f"{cli['startup_ratio']:.2f}× the import baseline "
        f"({cli['import_baseline_s'] * 1000:.1f} ms)"
    )
    print(
        f"CLI batch verify: {cli['batch_tokens_per_s']:,.0f} tokens/s = "
        f"{cli['batch_vs_library']:.2f}× the library's {cli['library_verify_per_s']:,.0f}/s"
    )
    print("single-use verify: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in once.items()))
    print(f"machine: {machine}")
    result = {
        "machine": machine,
        "rows": [{**asdict(r), "ops_per_second": r.ops_per_second} for r in rows],
        "keyset_size": sizes,
        "once_per_second": once,
        "cli": cli,
    }
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    summary = (
        f"verify with 1,000 keys vs 1 key: {sizes['ratio']:.2f}×; "
        f"CLI verify of one token {cli['cli_verify_one_s'] * 1000:.0f} ms = "
        f"{cli['startup_ratio']:.2f}× `python -c 'import click, cryptography...aead'` "
        f"({cli['import_baseline_s'] * 1000:.0f} ms); `verify -` over {cli['batch_tokens']:,} "
        f"tokens: {cli['batch_tokens_per_s']:,.0f}/s = {cli['batch_vs_library']:.2f}× the "
        f"library's {cli['library_verify_per_s']:,.0f}/s. Single-use verification (verify "
        "--once, aead): " + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in once.items()) + "."
    )
    where = (
        f"Python {machine['python']}, cryptography {machine['cryptography']}, "
        f"{machine['cpus']} CPUs ({machine['machine']}), {machine['system']}, "
        f"{machine['date']}"
    )
    (HERE / "results.md").write_text(f"{markdown(rows)}\n\n{summary}\n\nMachine: {where}.\n")


if __name__ == "__main__":
    main()
