"""A KEK helper program for the exec: provider's tests: it speaks mrtr-state-kek/1 the way a
KMS helper would, holding its AES-256 key in the file named by its first argument.

Run as ``python tests/kek_helper.py KEYFILE``. ``MRTR_TEST_KEK_MODE`` makes it misbehave as a
broken helper can (``fail``, ``garbage``, ``huge``, ``refuse``, ``short``, ``extra``; ``flood``:
300 MB on stdout; ``stderr-flood``: 20 MB on stderr, then its reason, exit 1; ``orphan``: a
child that holds stdout and stderr open for five minutes, then the right answer;
``orphan-hang``: that child, then no answer at all); ``MRTR_TEST_KEK_CHILD`` names a file the
child's process id is written to. ``MRTR_TEST_KEK_LOG`` names a file it appends each operation
to, so tests can count calls to the KEK.
"""

from __future__ import annotations

import base64
import json
import os
import sys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def main() -> int:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    with open(sys.argv[1], "rb") as handle:
        key = handle.read()
    request = json.loads(sys.stdin.read())
    if request.get("protocol") != "mrtr-state-kek/1":
        print("unknown protocol", file=sys.stderr)
        return 2
    op, context = request["op"], _unb64(request["context"])
    log = os.environ.get("MRTR_TEST_KEK_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(op + "\n")
    mode = os.environ.get("MRTR_TEST_KEK_MODE", "")
    if mode in ("orphan", "orphan-hang"):
        import subprocess  # the child inherits stdout and stderr, as a shell's & would

        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
        with open(os.environ["MRTR_TEST_KEK_CHILD"], "w") as handle:
            handle.write(str(child.pid))
        if mode == "orphan-hang":
            import time

            time.sleep(300)
    if mode == "flood":
        block = b"A" * (1 << 20)
        for _ in range(300):
            sys.stdout.buffer.write(block)
        return 0
    if mode == "stderr-flood":
        noise = "noise " * 1000 + "\n"
        for _ in range(3500):
            sys.stderr.write(noise)
        print("the KMS said: ThrottlingException", file=sys.stderr)
        return 1
    if mode == "fail":
        print("the KMS said: AccessDeniedException for this role", file=sys.stderr)
        return 1
    if mode == "garbage":
        print("Hello! I am not JSON")
        return 0
    if mode == "huge":
        print(json.dumps({"ciphertext": "A" * 100_000, "plaintext": "A" * 100_000}))
        return 0
    if mode == "refuse":
        print("InvalidCiphertextException", file=sys.stderr)
        return 3
    if op == "wrap":
        nonce = os.urandom(12)
        sealed = nonce + AESGCM(key).encrypt(nonce, _unb64(request["plaintext"]), context)
        answer = {"ciphertext": _b64(sealed)}
    else:
        blob = _unb64(request["ciphertext"])
        try:
            opened = AESGCM(key).decrypt(blob[:12], blob[12:], context)
        except InvalidTag:
            print("decryption failed: wrong key or context", file=sys.stderr)
            return 3
        answer = {"plaintext": _b64(opened[:16] if mode == "short" else opened)}
    if mode == "extra":
        answer["note"] = "unexpected"
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
