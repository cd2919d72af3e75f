"""JSON parsing with limits, for files and request bodies a user (or anyone) can hand us.

:func:`loads_limited` is :func:`json.loads` made safe for untrusted input: UTF-8 only, no
``NaN``/``Infinity`` literals (nor numbers that overflow to infinity such as ``1e400``),
bounded size, nesting depth, integer digits and string length. Every refusal is a
:class:`gpuplan.errors.SchemaError` whose message starts with ``where`` and names the JSON
field (``probes.0.measurements.2.median_s``) or the line and column where it is known.

Why each check exists
---------------------
* ``json.loads(bytes)`` silently accepts UTF-16/UTF-32; a UTF-16 file then fails later with
  a misleading message. We decode strictly as UTF-8 ourselves (a UTF-8 byte-order mark is
  tolerated: the text is still UTF-8).
* The C scanner of :mod:`json` recurses once per nesting level: 200,000 ``[`` raise
  :class:`RecursionError`. Depth is therefore measured *before* parsing, by a regular
  expression scan over brackets outside strings (no Python recursion, linear time).
* Python >= 3.11 refuses to convert integers of more than 4,300 digits with a bare
  :class:`ValueError`; ``parse_int`` sees the digits first and refuses long ones itself.
* ``NaN``/``Infinity`` are not JSON (RFC 8259) and poison every statistic downstream.

Default limits (sized for result files)
---------------------------------------
Measured on the shipped files (``results/reference/*.json`` and the CPU quick run in
``tests/results/data``): the largest is 40,678 bytes (16,064 for a reference file), the
deepest nests 7 levels, the longest string has 162 characters and the longest integer 11
digits (``memory_bytes``). A full 8-GPU probe run with every raw sample is estimated below
2 MB. The defaults leave a wide margin without letting a hostile file exhaust memory:

* ``max_bytes`` = 32 MiB (about 800x the largest file seen, >10x the largest full run);
* ``max_depth`` = 32 (4x the deepest document; any schema change will stay far below);
* ``max_int_digits`` = 32 (a 64-bit integer has at most 20 digits);
* ``max_str_chars`` = 1 MiB characters (``host.topology`` of a large node, or a probe's
  ``error`` carrying a tool's output, stays in the kilobytes).

Callers with other needs (the results service for request bodies) pass their own limits.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gpuplan.errors import SchemaError

MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_INT_DIGITS = 32
MAX_STR_CHARS = 1024 * 1024

# A JSON string (unrolled loop: no backtracking blow-up) or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_UTF16_32_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class _Bad:
    """A value refused by a parse hook; reported with its JSON path after parsing."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def loads_limited(
    data: bytes | str,
    *,
    where: str,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    max_int_digits: int = MAX_INT_DIGITS,
    max_str_chars: int = MAX_STR_CHARS,
) -> Any:
    """Parse ``data`` as JSON within limits.

    Parameters
    ----------
    data:
        The raw bytes (decoded as UTF-8, strictly) or already decoded text.
    where:
        What is being parsed (a file path, "request body"); starts every error message.
    max_bytes:
        Largest accepted input, in bytes (characters for ``str`` input).
    max_depth:
        Deepest accepted nesting of arrays/objects (a top-level ``{}`` is depth 1).
    max_int_digits:
        Most digits an integer may have (sign not counted).
    max_str_chars:
        Longest accepted string (keys included), in characters after unescaping.

    Returns
    -------
    Any
        The decoded value, as :func:`json.loads` would return it.

    Raises
    ------
    SchemaError
        for anything that is not UTF-8 JSON within the limits, naming the field or position.

    Examples
    --------
    >>> loads_limited('{"a": [1, 2.5]}', where="x")
    {'a': [1, 2.5]}
    >>> loads_limited('{"a": NaN}', where="x")
    Traceback (most recent call last):
    ...
    gpuplan.errors.SchemaError: x: field 'a': NaN is not allowed in JSON
    """
    if len(data) > max_bytes:
        raise SchemaError(
            f"{where}: {len(data):,} bytes is larger than the limit of {max_bytes:,}",
            hint="is this really a gpuplan JSON document?",
        )
    text = _decode(data, where=where) if isinstance(data, (bytes, bytearray)) else data
    if text.startswith("\ufeff"):
        text = text[1:]
    _check_depth(text, where=where, max_depth=max_depth)

    def parse_int(digits: str) -> int | _Bad:
        n = len(digits) - digits.startswith("-")
        if n > max_int_digits:
            return _Bad(f"an integer of {n:,} digits is over the limit of {max_int_digits}")
        return int(digits)

    def parse_float(literal: str) -> float | _Bad:
        value = float(literal)
        if not math.isfinite(value):
            return _Bad(f"number {literal[:40]} is out of range (overflows to infinity)")
        return value

    def parse_constant(name: str) -> _Bad:
        return _Bad(f"{name} is not allowed in JSON")

    try:
        value = json.loads(
            text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant
        )
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            hint="the file may be truncated or hand-edited",
        ) from None
    _check_values(value, where=where, max_str_chars=max_str_chars)
    return value


def _decode(data: bytes | bytearray, *, where: str) -> str:
    for bom, name in _UTF16_32_BOMS:
        if data.startswith(bom):
            raise SchemaError(
                f"{where}: the text is {name}-encoded; gpuplan reads UTF-8 JSON only",
                hint=f"convert it, e.g. iconv -f {name} -t UTF-8",
            )
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        what = f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start:,})"
    else:
        # NUL is valid UTF-8 but never valid in JSON text, raw: UTF-16 without a BOM or binary
        if "\x00" not in text:
            return text
        what = "contains NUL bytes (UTF-16/UTF-32 text without a byte-order mark, or binary)"
    raise SchemaError(
        f"{where}: {what}; gpuplan reads UTF-8 JSON only",
        hint="is this a binary file? convert text files to UTF-8",
    )


def _check_depth(text: str, *, where: str, max_depth: int) -> None:
    depth = 0
    for match in _TOKEN.finditer(text):
        char = text[match.start()]
        if char in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, match.start()) + 1
                raise SchemaError(
                    f"{where}: nesting deeper than {max_depth} levels (at line {line})",
                    hint="gpuplan documents nest a few levels; this is not one of them",
                )
        elif char in "]}":
            depth -= 1


def _check_values(value: Any, *, where: str, max_str_chars: int) -> None:
    """Walk the parsed value (iteratively) for refused numbers and over-long strings."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            # pushed in reverse so that the first problem in document order is reported
            for key, sub in reversed(item.items()):
                if len(key) > max_str_chars:
                    _refuse(where, path, f"a key of {len(key):,} characters", max_str_chars)
                stack.append((sub, (*path, key)))
        elif isinstance(item, list):
            stack.extend((item[i], (*path, i)) for i in range(len(item) - 1, -1, -1))
        elif isinstance(item, str):
            if len(item) > max_str_chars:
                _refuse(where, path, f"a string of {len(item):,} characters", max_str_chars)
        elif isinstance(item, _Bad):
            raise SchemaError(f"{where}: {_field(path)}{item.why}")


def _refuse(where: str, path: tuple[str | int, ...], what: str, limit: int) -> None:
    raise SchemaError(f"{where}: {_field(path)}{what} is over the limit of {limit:,}")


def _field(path: tuple[str | int, ...]) -> str:
    """``field 'probes.0.median_s': `` (the style of pydantic locations), or '' at the top."""
    if not path:
        return ""
    return "field '" + ".".join(str(p)[:80] for p in path) + "': "
