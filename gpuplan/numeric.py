"""Types shared by every layer for numbers that may be a scalar or a grid, and for JSON.

The forecast formulas are written once and evaluated two ways: on one layout (Python
scalars) and elementwise on the search grid of thousands of layouts (numpy arrays,
broadcast together). These aliases say exactly that instead of ``Any``:

* :data:`Num`: a real number or an array of them (float or integer dtype);
* :data:`Int`: an integer or an integer array (degrees of parallelism, layer counts);
* :data:`Flag`: a bool or a boolean array (validity masks);
* :data:`FloatArray` / :data:`IntArray` / :data:`BoolArray`: the array halves alone.

``JSONValue`` / ``JSONDict`` type the documents that leave the package (DESIGN.md section
3) and the rows read from published tables: values are narrowed (``isinstance``) where
they are read, never assumed.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

FloatArray: TypeAlias = npt.NDArray[np.floating]
"""An array of floats of any width (float64 on the search grid)."""
IntArray: TypeAlias = npt.NDArray[np.integer]
"""An array of integers of any width."""
BoolArray: TypeAlias = npt.NDArray[np.bool_]
"""A boolean mask."""

Num: TypeAlias = float | FloatArray | IntArray
"""A real number (``int`` is accepted where ``float`` is, PEP 484) or an array of them."""
Int: TypeAlias = int | IntArray
"""An integer or an integer array."""
Flag: TypeAlias = bool | BoolArray
"""A bool or a boolean mask."""

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
"""Any value a JSON document can hold."""
JSONDict: TypeAlias = dict[str, JSONValue]
"""A JSON object."""

__all__ = [
    "BoolArray",
    "Flag",
    "FloatArray",
    "Int",
    "IntArray",
    "JSONDict",
    "JSONScalar",
    "JSONValue",
    "Num",
]
