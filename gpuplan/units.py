"""Units at the edges, shared by every layer: one SI formatter, one size parser, one busbw table.

Inside the code every quantity is in SI base units (``size_bytes``, ``duration_s``,
``busbw_bytes_per_s``, STYLE.md). This module holds the few conversions to and from what
people read and type; it imports nothing from gpuplan but :mod:`gpuplan.errors`, so the
catalogs, results, probes, calibration, forecast, report and CLI layers all use the same
ones.

Unit convention
---------------
Display (:func:`fmt_si`): decimal prefixes, 1 G = 1e9, the way nccl-tests prints GB/s
and vendors print TFLOP/s. Memory (:func:`fmt_bytes`): binary units, 1 GiB = 2**30 B.

Parsing (:func:`parse_size_bytes`): the unit spelled decides, so that one parser reads
user flags, sysfs/lscpu cache sizes and published tables alike:

* ``KiB``/``MiB``/``GiB``/``TiB``: powers of 1024;
* ``KB``/``MB``/``GB``/``TB``: powers of 1000 (SI; "0.9MB" is 900,000 bytes);
* a bare prefix letter ``K``/``M``/``G``/``T`` (any case): powers of 1024, the shorthand of
  fio, nccl-tests' ``-b/-e`` and sysfs ("4G" is 4 GiB, "32768K" is 32 MiB);
* no unit or ``B``: bytes.

The bus-bandwidth factors (:data:`BUSBW_FACTORS`, :func:`busbw_factor`) are nccl-tests'
(doc/PERFORMANCE.md): busbw = algbw x factor(n) for n ranks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from gpuplan.errors import InputError

__all__ = [
    "BUSBW_FACTORS",
    "SIZE_UNITS",
    "busbw_factor",
    "fmt_bytes",
    "fmt_duration",
    "fmt_si",
    "parse_size_bytes",
]

# --- display ---------------------------------------------------------------------------------

_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(value: float | None, unit: str, *, digits: int = 3) -> str:
    """Format ``value`` with an SI prefix (1 G = 1e9, like nccl-tests).

    >>> fmt_si(2.5e12, "FLOP/s")
    '2.5 TFLOP/s'
    >>> fmt_si(None, "B/s"), fmt_si(float("nan"), "W")
    ('-', '-')
    >>> fmt_si(12.0, "")
    '12'
    """
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    for scale, prefix in _SI_PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def fmt_bytes(value: float | None) -> str:
    """Memory sizes in binary units (GiB), the way people read them.

    >>> fmt_bytes(80 * 2**30)
    '80 GiB'
    """
    if value is None:
        return "-"
    for scale, unit in [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")]:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.0f} B"


def fmt_duration(seconds: float | None) -> str:
    """Durations for people: ``fmt_duration(93784)`` -> ``'1.09 d'``.

    >>> fmt_duration(0.0123)
    '12.3 ms'
    """
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


# --- parsing ---------------------------------------------------------------------------------

#: Bytes per unit, lower-cased (module docstring: binary for KiB and bare letters, SI for KB).
SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}

_NUM_UNIT = r"(?P<num>\d[\d,]*(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|[KMGT]|B)?"
_SIZE_IN_TEXT = re.compile(_NUM_UNIT + r"\b", re.IGNORECASE)
_SIZE_WHOLE = re.compile(r"\s*" + _NUM_UNIT + r"\s*", re.IGNORECASE)


def parse_size_bytes(text: str, *, strict: bool = False, what: str | None = None) -> int:
    """Bytes named by a size string (unit convention in the module docstring).

    Parameters
    ----------
    text:
        ``"1GiB"``, ``"4G"``, ``"0.9MB"``, ``"32,000,000 B"``; without ``strict`` the first
        size inside free text (``"up to 4GiB"``).
    strict:
        The whole of ``text`` must be one size (a command-line flag, a sysfs file).
    what:
        How the user named the value (``"--storage-size"``), for the error message.

    Raises
    ------
    InputError
        No size could be read.

    >>> parse_size_bytes("1GiB"), parse_size_bytes("4G"), parse_size_bytes("4GB")
    (1073741824, 4294967296, 4000000000)
    >>> parse_size_bytes("up to 4GiB")
    4294967296
    >>> parse_size_bytes("32,000,000 B"), parse_size_bytes("0.9MB")
    (32000000, 900000)
    >>> parse_size_bytes("32768K\\n", strict=True)
    33554432
    """
    text = text or ""
    match = _SIZE_WHOLE.fullmatch(text) if strict else _SIZE_IN_TEXT.search(text)
    if match is None:
        if what is not None:
            raise InputError(
                f"{what} {text!r} is not a size", hint="use e.g. 512M, 4G (GiB), 4GB (1e9 B)"
            )
        raise InputError(f"cannot read a size from {text!r}", hint="write it like '1GiB' or '32MB'")
    number = float(match.group("num").replace(",", ""))
    unit = (match.group("unit") or "").lower()
    return round(number * SIZE_UNITS[unit])


# --- collectives -----------------------------------------------------------------------------

#: busbw = algbw x factor(n) for n ranks (nccl-tests, doc/PERFORMANCE.md): an all-reduce
#: moves 2(n-1)/n of the buffer over each rank's link (reduce-scatter then all-gather);
#: all-gather, reduce-scatter and all-to-all move (n-1)/n; broadcast, reduce and a
#: point-to-point send move it once. ``size`` follows nccl-tests: the full buffer of one rank
#: for all-reduce, broadcast, reduce and all-to-all, the gathered output for all-gather, the
#: input for reduce-scatter. Each factor works on numbers and on numpy arrays.
BUSBW_FACTORS: dict[str, Callable[[Any], Any]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: 1.0 * (n - 1) / n,
    "reduce_scatter": lambda n: 1.0 * (n - 1) / n,
    "all_to_all": lambda n: 1.0 * (n - 1) / n,
    "broadcast": lambda n: 1.0 + 0.0 * n,
    "reduce": lambda n: 1.0 + 0.0 * n,
    "p2p": lambda n: 1.0 + 0.0 * n,
}


def busbw_factor(op: str, ranks: Any) -> Any:
    """busbw / algbw for ``op`` over ``ranks`` ranks (a number or a numpy array).

    >>> busbw_factor("all_reduce", 8), busbw_factor("all_gather", 4), busbw_factor("broadcast", 8)
    (1.75, 0.75, 1.0)

    Raises
    ------
    InputError
        ``op`` is not a collective of the table.
    ValueError
        A scalar ``ranks`` below 1.
    """
    factor = BUSBW_FACTORS.get(op)
    if factor is None:
        raise InputError(
            f"unknown collective {op!r}",
            hint="use all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce or p2p",
        )
    if isinstance(ranks, (int, float)) and ranks < 1:
        raise ValueError("ranks must be >= 1")
    return factor(ranks)
