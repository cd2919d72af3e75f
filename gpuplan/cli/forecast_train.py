"""Placeholder: the command is added by its owner (see docs/dev/INTERFACES.md)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's command(s) to ``app``."""
