"""Placeholder: the command is added by its owner (see docs/dev/INTERFACES.md)."""

from gpuplan.cli._common import make_app

app = make_app("(not yet available)")
