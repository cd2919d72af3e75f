"""Probe results: the versioned document (schema.py), its migrations and the local store."""

from gpuplan.results.schema import SCHEMA_VERSION, ProbeResult, ResultDocument
from gpuplan.results.store import load_result, load_results, save_result

__all__ = [
    "SCHEMA_VERSION",
    "ProbeResult",
    "ResultDocument",
    "load_result",
    "load_results",
    "save_result",
]
