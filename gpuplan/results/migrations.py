"""Upgrades of older result documents to the current schema (asv's ``update_to_N`` chain).

``UPGRADES[n]`` turns a version ``n - 1`` document (a plain dict) into a version ``n`` one.
A document is upgraded in memory on load; the file on disk is never rewritten. A document
newer than :data:`gpuplan.results.schema.SCHEMA_VERSION` is refused: the code cannot know
what a future field means.

Version 1 is the first released format, so the chain is empty today; the machinery is
tested with a registered test upgrade (tests/results/test_store.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.errors import SchemaError
from gpuplan.results.schema import SCHEMA_VERSION

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]

UPGRADES: dict[int, Upgrade] = {}


def upgrade(
    doc: dict[str, Any], *, where: str = "document", target: int = SCHEMA_VERSION
) -> dict[str, Any]:
    """Return ``doc`` upgraded to ``target`` (the current version by default).

    Raises
    ------
    SchemaError
        if the document has no integer ``schema_version``, is newer than this code, or is
        older than any upgrade path.
    """
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaError(
            f"{where}: no integer 'schema_version'", hint="is this a gpuplan result file?"
        )
    if version > target:
        raise SchemaError(
            f"{where}: schema_version {version} is newer than this gpuplan understands ({target})",
            hint="upgrade gpuplan (pip install -U gpuplan) to read it",
        )
    while version < target:
        step = UPGRADES.get(version + 1)
        if step is None:
            raise SchemaError(
                f"{where}: schema_version {version} has no upgrade path to {target}",
                hint="re-run the probe with this gpuplan version",
            )
        doc = step(dict(doc))
        version += 1
        doc["schema_version"] = version
    return doc
