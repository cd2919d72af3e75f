"""Probe results: the versioned document (schema.py), its migrations, the local store and
the one loader every command reads result files with (loader.py, safejson.py)."""

from gpuplan.results.loader import LoadedResults, load_result_files, read_result_file
from gpuplan.results.schema import SCHEMA_VERSION, ProbeResult, ResultDocument
from gpuplan.results.store import load_result, load_results, save_result

__all__ = [
    "SCHEMA_VERSION",
    "LoadedResults",
    "ProbeResult",
    "ResultDocument",
    "load_result",
    "load_result_files",
    "load_results",
    "read_result_file",
    "save_result",
]
