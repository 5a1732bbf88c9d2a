"""``python -m mrtr_state`` runs the CLI."""

from .cli import main

main()
