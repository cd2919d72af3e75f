"""An artifact's serving point, for the tests of ``validate_serving``'s speculation checks."""

from __future__ import annotations

from typing import Any


def serving_point(speculative: Any) -> dict[str, Any]:
    """One level of a ``serve`` probe as the artifact keeps it, with ``speculative``."""
    return {
        "concurrency": 1,
        "input_tokens": 16,
        "output_tokens": 8,
        "ttft_s": {"p10": 0.1, "p50": 0.1, "p90": 0.1},
        "tpot_s": {"p10": 0.01, "p50": 0.01, "p90": 0.01},
        "speculative": speculative,
    }
