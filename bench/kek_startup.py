"""The "encrypted keyset start-up" section of ``make bench``: what each KEK provider adds to a
``mrtr-state verify`` process, beside the same command on a plain keyset.

Each variant is the CLI verifying one token in a fresh process (as a shell script or a CronJob
does), timed in interleaved rounds so that a burst of noise lands on every variant alike; medians
beside best-of. A second table verifies 1,000 tokens on stdin in one process: the data key is
unwrapped once per process, so a batch pays the KEK once. The pkcs11 row runs on SoftHSM2 when
it is installed (a hardware HSM answers slower or faster: measure yours).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mrtr_state as ms
from mrtr_state.keys.kek import kek_from_uri

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HELPER = ROOT / "tests" / "kek_helper.py"
SOFTHSM = "/usr/lib/softhsm/libsofthsm2.so"
ROUNDS = 15
BATCH = 1000


def _softhsm(folder: Path, env: dict[str, str]) -> str | None:
    """A SoftHSM2 token with an AES KEK, and its URI; None without SoftHSM2."""
    util = shutil.which("softhsm2-util")
    if util is None or not os.path.isfile(SOFTHSM):
        return None
    try:
        import pkcs11
    except ImportError:
        return None
    (folder / "tokens").mkdir()
    conf = folder / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {folder}/tokens\nobjectstore.backend = file\n")
    env["SOFTHSM2_CONF"] = os.environ["SOFTHSM2_CONF"] = str(conf)
    subprocess.run(
        [
            util,
            "--init-token",
            "--free",
            "--label",
            "bench",
            "--pin",
            "1234",
            "--so-pin",
            "12345678",
        ],
        check=True,
        capture_output=True,
    )
    pin = folder / "pin"
    pin.write_text("1234")
    pin.chmod(0o600)
    token = pkcs11.lib(SOFTHSM).get_token(token_label="bench")  # noqa: S106 - a throwaway token
    with token.open(user_pin="1234", rw=True) as s:
        s.generate_key(pkcs11.KeyType.AES, 256, label="kek", store=True)
    return f"pkcs11:token=bench;object=kek?module-path={SOFTHSM}&pin-source=file:{pin}"


def variants(folder: Path, env: dict[str, str]) -> dict[str, str | None]:
    """Name -> the KEK URI of a keyset file made for it (None: the plain keyset)."""
    helper_key = folder / "helper.key"
    helper_key.write_bytes(os.urandom(32))
    helper_key.chmod(0o600)
    found: dict[str, str | None] = {
        "plain keyset": None,
        "passphrase, scrypt 2^15 (default)": "passphrase:env:BENCH_PASSPHRASE",
        "passphrase, scrypt 2^10": "passphrase:env:BENCH_PASSPHRASE",
        "exec: helper (a Python program)": f"exec:{sys.executable} {HELPER} {helper_key}",
    }
    hsm = _softhsm(folder, env)
    if hsm is not None:
        found["pkcs11: SoftHSM2"] = hsm
    return found


def _run(command: list[str], env: dict[str, str], stdin: bytes | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")}
    env["BENCH_PASSPHRASE"] = os.environ["BENCH_PASSPHRASE"] = "a bench passphrase, long enough"
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        keyset = ms.Keyset.generate(("A256GCM",))
        token = ms.mint(keyset, {"step": 1}, request_id="r", ttl=3600)
        commands: dict[str, tuple[list[str], list[str]]] = {}
        for n, (label, uri) in enumerate(variants(folder, env).items()):
            path = folder / f"keyset-{n}.json"
            cost = 10 if "2^10" in label else None
            keyset.save(path, kek=None if uri is None else kek_from_uri(uri, kdf_log_n=cost))
            base = [sys.executable, "-m", "mrtr_state", "--keyset", str(path)]
            base += [] if uri is None else ["--kek", uri]
            commands[label] = (
                [*base, "verify", "--request-id", "r", token],
                [*base, "verify", "--request-id", "r", "-"],
            )
        for one, _batch in commands.values():  # warm the page cache and byte-compile
            _run(one, env)
        single: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(ROUNDS):
            for label, (one, _batch) in commands.items():
                single[label].append(_run(one, env))
        lines = (token + "\n").encode() * BATCH
        batch: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(3):
            for label, (_one, many) in commands.items():
                batch[label].append(_run(many, env, lines))
    rows = {
        label: {
            "best_ms": min(times) * 1000,
            "median_ms": statistics.median(times) * 1000,
            "batch_best_ms": min(batch[label]) * 1000,
        }
        for label, times in single.items()
    }
    text = markdown(rows)
    print(text)
    (HERE / "kek_startup.md").write_text(text + "\n")
    return rows


def markdown(rows: dict[str, dict[str, float]]) -> str:
    plain = rows["plain keyset"]
    lines = [
        f"| keyset | `verify` one token: best (median) | added to start-up, median | "
        f"`verify -` of {BATCH:,} tokens in one process, best |",
        "|---|---|---|---|",
    ]
    # the batch column: the KEK's cost is paid once per process, whatever the number of tokens
    for label, row in rows.items():
        added = row["median_ms"] - plain["median_ms"]
        lines.append(
            f"| {label} | {row['best_ms']:.0f} ms ({row['median_ms']:.0f} ms) | "
            f"{'-' if label == 'plain keyset' else f'{added:+.0f} ms'} | "
            f"{row['batch_best_ms']:.0f} ms |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
