"""``python -m mrtr_state`` runs the CLI."""

from ._launch import main

main()
