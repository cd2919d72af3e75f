"""Domain errors.

Library code raises a :class:`GpuplanError` (or a subclass) with a message a user can act
on; the CLI prints it as one line on stderr and exits with code 2. Never raise one for a
bug: bugs should surface as ordinary exceptions with a traceback.
"""

from __future__ import annotations


class GpuplanError(Exception):
    """A problem with the user's input or environment that the user can fix.

    Parameters
    ----------
    message:
        What is wrong, in one sentence.
    hint:
        How to fix it (appended after "; " in the one-line CLI message).
    """

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message}; {self.hint}"
        return " ".join(text.split())


class InputError(GpuplanError):
    """Bad value, file or option supplied by the user."""


class NotFoundError(GpuplanError):
    """A name (GPU, model, run, ...) that does not resolve; the message lists the closest."""


class SchemaError(GpuplanError):
    """A document (result file, artifact, catalog, scenario) that does not validate."""


class EnvironmentProblem(GpuplanError):
    """A missing tool or capability on this machine (fio absent, no GPU, ...)."""
