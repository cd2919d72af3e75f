"""The past-the-cache rule for memory-bandwidth points, shared by the probe and calibration.

A device-memory copy measures HBM only when its arrays are well past the last-level cache
(MI300X's 256 MB Infinity Cache, H100's 50 MB L2). BabelStream's run rules ask for arrays at
least 4x the largest cache level (UoB-HPC/BabelStream; the NERSC-10 benchmark rules repeat
it); the membw probe sizes its arrays by that rule and marks each point, and calibration
marks published points the same way before it fits HBM bandwidth from them.
"""

from __future__ import annotations

from typing import Any

#: an array at least this many times the last-level cache measures main memory
PAST_CACHE_FACTOR = 4


def catalog_llc_bytes(row: Any) -> int | None:
    """``last_level_cache_bytes`` of a catalog accelerator row (None where the row has none).

    Read with a fallback: rows written before the field existed simply lack it.
    """
    value = getattr(row, "last_level_cache_bytes", None) if row is not None else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def is_past_cache(size_bytes: float, llc_bytes: float) -> bool:
    """Whether an array of ``size_bytes`` is past ``PAST_CACHE_FACTOR`` x the cache.

    >>> is_past_cache(268_435_456, 40 << 20), is_past_cache(64_000_000, 50 << 20)
    (True, False)
    """
    return size_bytes >= PAST_CACHE_FACTOR * llc_bytes
