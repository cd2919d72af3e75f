"""Logging of the service: tokens never reach a log line.

The code logs only a token's public id. As a second line of defence every handler of the
service carries :class:`RedactTokens`, which rewrites anything shaped like a token (say,
pasted into a URL by mistake and echoed by the access log), raw or percent-encoded, before
it is formatted.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuplan.service.tokens import redact


class RedactTokens(logging.Filter):
    """Replace the secret part of any token in the message and its arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        clean = redact(msg)  # raw and percent-encoded tokens (tokens.redact)
        if clean != msg:
            record.msg = clean
            record.args = None
        return True


def log_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn and gpuplan: stderr, tokens redacted."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": "gpuplan.service.logs.RedactTokens"}},
        "formatters": {
            "default": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "default",
                "filters": ["redact"],
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": ["stderr"], "level": level, "propagate": False},
            "gpuplan": {"handlers": ["stderr"], "level": level, "propagate": False},
            "sqlalchemy": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
            "alembic": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        },
    }
