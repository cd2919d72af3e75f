"""Small parsers shared by the reference conversion and the fitting code.

Sizes in published tables come as free text ("1GiB", "32KiB", "up to 4GiB", "8GB",
"32,000,000 B", "best shape MxNxK 1024x10240x5120"). Sizes are read by the project's one
size parser, :func:`gpuplan.units.parse_size_bytes` (re-exported here; its docstring states the
unit convention: KiB and a bare K binary, KB decimal).
"""

from __future__ import annotations

import re

from gpuplan.errors import InputError
from gpuplan.units import parse_size_bytes as parse_size_bytes

_SHAPE = re.compile(r"(\d+)\s*x\s*(\d+)\s*x\s*(\d+)")


def parse_gemm_shape(text: str) -> tuple[int, int, int]:
    """(m, n, k) of a ``MxNxK`` shape string such as ``best shape MxNxK 1024x10240x5120``.

    >>> parse_gemm_shape("best shape MxNxK 1024x10240x5120")
    (1024, 10240, 5120)
    """
    match = _SHAPE.search(text or "")
    if match is None:
        raise InputError(
            f"cannot read a GEMM shape from {text!r}", hint="write it as MxNxK, e.g. 4096x4096x4096"
        )
    m, n, k = (int(g) for g in match.groups())
    return m, n, k


def short_dtype(name: str) -> str:
    """The catalog's dtype name (fp64, fp32, tf32, bf16, fp16, fp8, fp6, fp4, int8) for a
    torch or vendor name; the catalog's own table (:func:`gpuplan.catalogs.schema.normalise_dtype`)
    decides, so calibration and catalog never disagree on a spelling.

    >>> short_dtype("bfloat16"), short_dtype("float8_e4m3fn"), short_dtype("fp16")
    ('bf16', 'fp8', 'fp16')
    >>> short_dtype("nvfp4"), short_dtype("mxfp4"), short_dtype("int8")
    ('fp4', 'fp4', 'int8')
    """
    from gpuplan.catalogs.schema import normalise_dtype

    return normalise_dtype(name)


BYTES_PER_ELEMENT: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,  # stored as fp32
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
}


def slug(text: str) -> str:
    """Lower-case, dash-separated identifier: ``slug('Intel(R) Xeon(R) 8470')``.

    >>> slug("2x Intel Xeon Platinum 8470 (H100 host)")
    '2x-intel-xeon-platinum-8470-h100-host'
    """
    text = re.sub(r"\((?:R|TM)\)", "", text or "", flags=re.IGNORECASE)
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return out or "unknown"
