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
import hashlib
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
STATE = {"step": 2, "tool": "deploy", "pending": ["confirm", "region"], "env": "prod",
         "draft": {"replicas": 3, "image": "registry.example/app:1.42.0"}}
BINDING = {"principal": "alice@example.com", "request_id": "mcp1:Q2kZk3m0xw0yX1b9y3B6aA",
           "audience": "https://mcp.example.com"}


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
    timer = timeit.Timer(func)
    number, _elapsed = timer.autorange()
    number = max(number, int(number * 0.2 / max(_elapsed, 1e-9)))  # at least ~0.2 s a repeat
    return min(timer.repeat(repeat=REPEATS, number=number)) / number * 1e6


def claims_now() -> dict[str, Any]:
    now = int(time.time())
    return {"iat": now, "exp": now + 300, "jti": "bench-jti-0123456789ab", "sub": "alice@example.com",
            "aud": BINDING["audience"], "rid": BINDING["request_id"], "st": STATE}


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def raw_rows(secret: bytes) -> tuple[list[Row], dict[str, float]]:
    """The limits: the least work any library doing this job could get away with."""
    claims = claims_now()
    cipher = AESGCM(secret)

    def hmac_mint() -> str:
        body = b64e(json.dumps(claims, separators=(",", ":")).encode())
        return body + "." + b64e(hmac.digest(secret, body.encode(), hashlib.sha256))

    signed = hmac_mint()

    def hmac_verify() -> object:
        body, _, mac = signed.rpartition(".")
        if not hmac.compare_digest(hmac.digest(secret, body.encode(), hashlib.sha256), b64d(mac)):
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

    rows = [Row("raw HMAC-SHA256", "signed", "mint", best_micros(hmac_mint), len(signed)),
            Row("raw HMAC-SHA256", "signed", "verify", best_micros(hmac_verify), len(signed)),
            Row("raw AES-256-GCM", "encrypted", "mint", best_micros(gcm_mint), len(sealed)),
            Row("raw AES-256-GCM", "encrypted", "verify", best_micros(gcm_verify), len(sealed))]
    limits = {(r.kind + "/" + r.operation): r.micros for r in rows}
    return rows, limits


def our_rows(keyset: ms.Keyset) -> list[Row]:
    rows = []
    for fmt, kind in (("jws", "signed"), ("aead", "encrypted"), ("jwe", "encrypted")):
        token = ms.mint(keyset, STATE, format=fmt, **BINDING)
        rows.append(Row(f"mrtr-state {fmt}", kind, "mint",
                        best_micros(lambda f=fmt: ms.mint(keyset, STATE, format=f, **BINDING)),
                        len(token)))
        rows.append(Row(f"mrtr-state {fmt}", kind, "verify",
                        best_micros(lambda t=token: ms.verify(keyset, t, **BINDING)), len(token)))
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
        token = serializer.dumps(claims)
        rows += [Row("itsdangerous URLSafeTimedSerializer", "signed", "mint",
                     best_micros(lambda: serializer.dumps(claims)), len(token)),
                 Row("itsdangerous URLSafeTimedSerializer", "signed", "verify",
                     best_micros(lambda: serializer.loads(token, max_age=300)), len(token))]
    try:
        import jwt
    except ImportError:
        print("PyJWT not installed: skipped", file=sys.stderr)
    else:
        token = jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "k1"})
        rows += [Row("PyJWT HS256", "signed", "mint",
                     best_micros(lambda: jwt.encode(claims, secret, algorithm="HS256",
                                                    headers={"kid": "k1"})), len(token)),
                 Row("PyJWT HS256", "signed", "verify",
                     best_micros(lambda: jwt.decode(token, secret, algorithms=["HS256"],
                                                    audience=BINDING["audience"])), len(token))]
    from cryptography.fernet import Fernet

    fernet = Fernet(base64.urlsafe_b64encode(secret))
    data = json.dumps(claims, separators=(",", ":")).encode()
    token_bytes = fernet.encrypt(data)
    rows += [Row("cryptography Fernet", "encrypted", "mint",
                 best_micros(lambda: fernet.encrypt(json.dumps(claims, separators=(",", ":"))
                                                    .encode())), len(token_bytes)),
             Row("cryptography Fernet", "encrypted", "verify",
                 best_micros(lambda: json.loads(fernet.decrypt(token_bytes, ttl=300))),
                 len(token_bytes))]
    try:
        from joserfc import jwe
        from joserfc.jwk import OctKey
    except ImportError:
        print("joserfc not installed: skipped", file=sys.stderr)
    else:
        key = OctKey.import_key(secret)
        header = {"alg": "dir", "enc": "A256GCM", "kid": "k1"}
        token = jwe.encrypt_compact(header, data, key)
        rows += [Row("joserfc JWE dir/A256GCM", "encrypted", "mint",
                     best_micros(lambda: jwe.encrypt_compact(header, json.dumps(claims), key)),
                     len(token)),
                 Row("joserfc JWE dir/A256GCM", "encrypted", "verify",
                     best_micros(lambda: json.loads(jwe.decrypt_compact(token, key).plaintext
                                                    or b"")), len(token))]
    return rows


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


def wall(command: list[str], runs: int = 15, stdin: bytes | None = None) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, input=stdin, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


def cli_rows(keyset: ms.Keyset, library_verify_us: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "keyset.json"
        keyset.save(path)
        token = ms.mint(keyset, STATE)
        exe = str(Path(sys.executable).with_name("mrtr-state"))
        baseline = wall([sys.executable, "-c",
                         "import click, cryptography.hazmat.primitives.ciphers.aead"])
        verify_one = wall([exe, "--keyset", str(path), "verify", token])
        count = 100_000
        lines = "\n".join(ms.mint(keyset, STATE) for _ in range(count)).encode() + b"\n"
        batch = wall([exe, "--keyset", str(path), "verify", "-"], runs=3, stdin=lines)
    batch_rate = count / batch
    library_rate = 1e6 / library_verify_us
    return {"import_baseline_s": baseline, "cli_verify_one_s": verify_one,
            "startup_ratio": verify_one / baseline, "batch_tokens": count,
            "batch_tokens_per_s": batch_rate, "library_verify_per_s": library_rate,
            "batch_vs_library": batch_rate / library_rate}


def render(rows: list[Row]) -> str:
    head = f"{'row':<38} {'op':<7} {'µs/op':>8} {'ops/s':>9} {'bytes':>6} {'× raw':>6}"
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(f"{row.name:<38} {row.operation:<7} {row.micros:>8.2f} "
                     f"{row.ops_per_second:>9,.0f} {row.token_bytes:>6} {row.ratio:>6.2f}")
    return "\n".join(lines)


def main() -> None:
    secret = os.urandom(32)
    keyset = ms.Keyset.generate()
    rows, limits = raw_rows(secret)
    rows += our_rows(keyset)
    rows += peer_rows(secret)
    for row in rows:
        row.ratio = row.micros / limits[f"{row.kind}/{row.operation}"]
    rows.sort(key=lambda r: (r.operation, r.kind, r.micros))
    sizes = keyset_size_ratio()
    aead_verify = next(r.micros for r in rows if r.name == "mrtr-state aead" and
                       r.operation == "verify")
    cli = cli_rows(keyset, aead_verify)
    machine = {"python": platform.python_version(), "machine": platform.machine(),
               "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "system": platform.platform(), "cryptography": __import__("cryptography").__version__,
               "date": time.strftime("%Y-%m-%d")}
    print(render(rows))
    print(f"\nverify with 1,000 keys vs 1 key: {sizes['ratio']:.2f}× "
          f"({sizes['verify_1000_keys_us']:.2f} vs {sizes['verify_1_key_us']:.2f} µs)")
    print(f"CLI verify of one token: {cli['cli_verify_one_s'] * 1000:.1f} ms, "
          f"{cli['startup_ratio']:.2f}× the import baseline ({cli['import_baseline_s'] * 1000:.1f} ms)")
    print(f"CLI batch verify: {cli['batch_tokens_per_s']:,.0f} tokens/s = "
          f"{cli['batch_vs_library']:.2f}× the library's {cli['library_verify_per_s']:,.0f}/s")
    print(f"machine: {machine}")
    result = {"machine": machine, "rows": [{**asdict(r), "ops_per_second": r.ops_per_second}
                                           for r in rows],
              "keyset_size": sizes, "cli": cli}
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "results.txt").write_text(render(rows) + "\n")


if __name__ == "__main__":
    _ = binascii  # the raw rows use base64, which is binascii underneath
    main()
