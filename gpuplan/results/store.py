"""Result files on disk: atomic writes that never overwrite, and a validating loader.

Layout (asv-style): ``<root>/<machine_id>/<started_at>_<run_id[:8]>.json``, one file per run.
Files are written by the project's one atomic writer, :func:`gpuplan.fsio.write_json_atomic`
(re-exported here for the probe suite and the CLI), which never overwrites unless asked.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError, NotFoundError
from gpuplan.fsio import write_json_atomic
from gpuplan.results.loader import iter_result_files as iter_result_files
from gpuplan.results.loader import parse_result as parse_result
from gpuplan.results.loader import read_result_bytes, read_result_file
from gpuplan.results.schema import ResultDocument

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe version of ``text`` (machine ids, timestamps)."""
    return _SAFE.sub("-", text).strip("-") or "unknown"


def result_path(root: Path, doc: ResultDocument) -> Path:
    stamp = safe_name(doc.started_at.replace(":", "").replace("-", ""))
    return Path(root) / safe_name(doc.host.machine_id) / f"{stamp}_{doc.run_id[:8]}.json"


def save_result(doc: ResultDocument, root: Path | str | None = None) -> Path:
    """Write ``doc`` under ``root`` (default :func:`gpuplan.paths.results_dir`); never
    overwrites (a clash gets a numbered suffix)."""
    if root is None:
        from gpuplan.paths import results_dir

        root = results_dir()
    base = result_path(Path(root), doc)
    data = doc.model_dump(mode="json")
    for i in range(1000):
        path = base if i == 0 else base.with_name(f"{base.stem}.{i}{base.suffix}")
        try:
            return write_json_atomic(path, data)
        except FileExistsError:
            continue
    raise InputError(f"too many result files named like {base}")


def load_result(path: Path | str) -> ResultDocument:
    """Load one result file; refuses newer schema versions, upgrades older ones.

    Every check of :func:`gpuplan.results.loader.read_result_file` applies (regular file,
    size, safe JSON, schema, physically possible values).
    """
    return read_result_file(path)


def load_results(paths: Iterable[Path | str]) -> list[tuple[Path, ResultDocument]]:
    """Load every result file under ``paths``; the first bad file raises.

    Commands use :func:`gpuplan.results.loader.load_result_files`, which skips bad files
    and reports them.
    """
    return [(p, load_result(p)) for p in iter_result_files(paths)]


def find_result(ref: str, roots: Iterable[Path | str] | None = None) -> Path:
    """Resolve ``ref`` (a file path, a run id, a unique prefix of one, or ``latest``: the
    run that started last) to a result file.

    Raises
    ------
    NotFoundError
        when nothing matches (listing the closest run ids) or the prefix is ambiguous.
    """
    if roots is None:
        from gpuplan.paths import results_dir

        roots = [results_dir()]
    path = Path(ref)
    if path.exists() and not path.is_dir():
        return path  # a FIFO or unreadable file is refused, with its reason, by the loader
    dirs = [Path(r) for r in roots]
    matches: list[tuple[Path, str]] = []
    known: list[str] = []
    for root in dirs:
        if not root.is_dir():
            continue
        for file in iter_result_files([root]):
            run_id = _peek_run_id(file)
            if run_id is None:
                continue
            known.append(run_id)
            if run_id.startswith(ref) or file.stem == ref or file.name == ref:
                matches.append((file, run_id))
    if ref == "latest" and known:
        return max(_started(f) for f in iter_result_files([r for r in dirs if r.is_dir()]))[1]
    if len(matches) == 1:
        return matches[0][0]
    where = ", ".join(str(r) for r in dirs)
    if not matches:
        close = difflib.get_close_matches(ref, known, n=3, cutoff=0.3)
        hint = f"closest: {', '.join(close)}" if close else "list runs with 'gpuplan results ls'"
        raise NotFoundError(f"no result file or run id '{ref}' under {where}", hint=hint)
    ids = ", ".join(sorted({rid[:12] for _, rid in matches}))
    raise NotFoundError(
        f"run id prefix '{ref}' matches {len(matches)} results ({ids})", hint="give more characters"
    )


def _peek(path: Path) -> dict[str, Any]:
    """The top-level object of ``path`` (safe read, no validation), {} when unreadable."""
    from gpuplan.errors import GpuplanError
    from gpuplan.results.safejson import loads_limited

    try:
        data = loads_limited(read_result_bytes(path), where=str(path))
    except GpuplanError:
        return {}
    return data if isinstance(data, dict) else {}


def _started(path: Path) -> tuple[str, Path]:
    started = _peek(path).get("started_at")
    return (started if isinstance(started, str) else "", path)


def _peek_run_id(path: Path) -> str | None:
    run_id = _peek(path).get("run_id")
    return run_id if isinstance(run_id, str) else None
