"""The ``mrtr-state`` console script: the CLI is imported inside the interrupt guard.

A Ctrl-C during start-up (click, cryptography and the command's modules are still loading) ends
the command with exit code 130 and one line, like a Ctrl-C while it runs, never a traceback.
"""

import sys


def main() -> None:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    run()
