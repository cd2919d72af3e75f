"""The one atomic file writer of gpuplan (results, calibration, validation, report, service).

A file is written into a temporary file beside its target (same folder, so the final
rename cannot cross a file system), flushed and ``fsync``'d, given the permissions a plain
``open(path, "w")`` would have (``0o666`` less the umask, or an explicit ``mode``), then
published in one step:

* ``overwrite=True``: :func:`os.replace` (readers see the old file or the new one, never a
  torn one);
* ``overwrite=False``: a hard link, which fails with :class:`FileExistsError` when the
  target exists, so a crash or a concurrent writer can never clobber an earlier file (result
  files are never overwritten, DESIGN 3.1). On file systems without hard links the name is
  reserved with ``O_EXCL`` first.

After publishing, the folder is ``fsync``'d where the platform allows it, so the new name
survives a power loss. On any failure (disk full, permission, a parent that is a file, an
interrupt) the temporary file is removed and the exception propagates unchanged; callers
turn ``OSError`` into a domain error with their own wording.

:func:`to_json_text` is the strict JSON text of every machine-readable output (the CLI's
``--format json``, a plan's ``plan.json``): NaN and inf become null.

This module sits below every other layer: it imports nothing from gpuplan.
"""

from __future__ import annotations

import contextlib
import enum
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["current_umask", "to_json_text", "write_atomic", "write_json_atomic"]


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(
    path: str | Path,
    content: str | bytes,
    *,
    overwrite: bool = True,
    mode: int | None = None,
    make_parents: bool = True,
) -> Path:
    """Write ``content`` to ``path`` atomically (temp file + fsync + rename or link).

    Parameters
    ----------
    path:
        The file to write.
    content:
        Text (written as UTF-8) or bytes.
    overwrite:
        Replace an existing file (default). With False an existing ``path`` is left alone and
        :class:`FileExistsError` is raised.
    mode:
        Permission bits of the new file; default ``0o666 & ~umask`` (what ``open`` gives).
    make_parents:
        Create missing parent folders first.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    FileExistsError
        ``overwrite=False`` and ``path`` exists.
    OSError
        The file cannot be written; no temporary file is left behind.
    """
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            # mkstemp creates 0600; the file gets the permissions of any other new file
            os.fchmod(fh.fileno(), (0o666 & ~current_umask()) if mode is None else mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _publish_new(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def write_json_atomic(
    path: str | Path, data: Any, *, overwrite: bool = False, mode: int | None = None
) -> Path:
    """Write ``data`` as strict JSON (indent 2, no NaN, trailing newline) with :func:`write_atomic`.

    ``overwrite`` defaults to False here: a JSON result is never replaced unless asked.
    """
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    return write_atomic(path, text, overwrite=overwrite, mode=mode)


def _publish_new(tmp: str, path: Path) -> None:
    """Move ``tmp`` to ``path`` atomically, failing with FileExistsError if ``path`` exists."""
    try:
        os.link(tmp, path)  # atomic, and fails if path exists
    except FileExistsError:
        raise
    except OSError:
        # File systems without hard links (some FUSE/SMB mounts): reserve the name with
        # O_EXCL (fails if it exists), then atomically replace our own empty placeholder.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


# --- JSON text (the CLI's --format json, plan.json) -------------------------------------------


def _jsonable(obj: Any) -> Any:
    """Turn pydantic models, dataclasses, numpy scalars, paths and sets into JSON types."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    if isinstance(obj, enum.Enum):
        return obj.value
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def _finite(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by None, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def to_json_text(data: Any) -> str:
    """Serialise ``data`` as strict JSON (NaN and inf become null)."""
    text = json.dumps(data, default=_jsonable)
    return json.dumps(_finite(json.loads(text)), indent=2, allow_nan=False)
