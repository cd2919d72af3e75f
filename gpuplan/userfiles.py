"""Files a user names on the command line: read them safely, write outputs as one set.

Every reader of a user-supplied text file (``--model-file``, ``--scenario``,
``--calibration``, a scenario argument) goes through :func:`read_text`, so that a folder, a
FIFO, an unreadable, oversized, binary or UTF-16 file is one :class:`InputError` naming the
path and what to do, never a traceback. :func:`check_input_file` is the same check for
readers that open the file themselves (a gzipped trace).

Outputs of one command that belong together (a plan's ``plan.json``, ``report.md`` and
``report.html``) are written by :func:`write_file_set`: into a temporary folder beside the
target, which is then renamed into place, so that a failure (disk full, permission) never
leaves new files mixed with old ones. :func:`check_output_dir` checks, before any long
work, that the target can be created and has room.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from gpuplan.errors import EnvironmentProblem, InputError, NotFoundError
from gpuplan.fsio import current_umask, write_atomic

__all__ = [
    "check_input_file",
    "check_output_dir",
    "check_output_file",
    "read_text",
    "write_file_set",
]

#: Largest text input read whole (a scenario, model file or calibration artifact is a few
#: KiB to a few hundred KiB; the shipped calibration artifact is the largest at ~0.3 MiB).
MAX_TEXT_BYTES = 64 * 1024 * 1024

_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def check_input_file(path: str | Path, *, what: str, hint: str | None = None) -> Path:
    """``path`` as a :class:`Path` if it is an existing regular file, else a domain error.

    Parameters
    ----------
    path:
        The file the user named.
    what:
        How the user named it, for the message (``"--model-file"``, ``"scenario file"``).
    hint:
        What to do when the file does not exist.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        if p.is_symlink():
            raise InputError(
                f"{what} {p} is a symbolic link to a missing file", hint="fix or remove the link"
            ) from None
        raise NotFoundError(f"{what} {p} does not exist", hint=hint or "check the path") from None
    except OSError as exc:  # ELOOP, EACCES on a parent folder, ENAMETOOLONG
        raise InputError(
            f"cannot read {what} {p}: {exc.strerror or exc}", hint="check the path and permissions"
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {p} is a directory, not a file", hint="give the path of a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            f"{what} {p} is not a regular file (a FIFO, socket or device)",
            hint="give the path of an ordinary file",
        )
    return p


def read_text(
    path: str | Path, *, what: str, hint: str | None = None, max_bytes: int = MAX_TEXT_BYTES
) -> str:
    """The UTF-8 text of a user-supplied file (a UTF-8 byte-order mark is dropped).

    Raises
    ------
    NotFoundError
        The file does not exist.
    InputError
        A folder, FIFO or device; unreadable (permissions, symlink loop); larger than
        ``max_bytes``; not UTF-8 (binary, UTF-16/32).
    """
    p = check_input_file(path, what=what, hint=hint)
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(
            f"cannot read {what} {p}: {exc.strerror or exc}",
            hint="check its permissions (chmod u+r)",
        ) from None
    if len(data) > max_bytes:
        raise InputError(
            f"{what} {p} is larger than {max_bytes // 2**20} MiB", hint="is this the right file?"
        )
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise InputError(
                f"{what} {p} is {name}-encoded; gpuplan reads UTF-8 text",
                hint=f"convert it, e.g. iconv -f {name} -t UTF-8",
            )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{what} {p} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            hint="is this a binary file? give a UTF-8 text file",
        ) from None
    if "\x00" in text:
        raise InputError(
            f"{what} {p} contains NUL bytes (a binary file?)", hint="give a UTF-8 text file"
        )
    return text[1:] if text.startswith("\ufeff") else text


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(path: str | Path, *, what: str = "--out", min_free_bytes: int = 0) -> Path:
    """Check before any long work that the output folder ``path`` can be written.

    A folder can be created beside ``path`` (where :func:`write_file_set` stages its files),
    ``path`` is not an existing file, and the file system has at least ``min_free_bytes``
    free. Creates nothing (missing parents are checked at their nearest existing folder).

    Raises
    ------
    InputError
        ``path`` or a parent is a file, or the folder cannot be written (permissions,
        read-only file system).
    EnvironmentProblem
        Less than ``min_free_bytes`` free.
    """
    out = Path(path)
    if out.is_symlink():
        out = out.resolve()
    if out.exists() and not out.is_dir():
        raise InputError(f"{what} {out} is a file", hint="give a folder for the outputs")
    parent = out.absolute().parent
    existing = _nearest_existing(parent)
    if not existing.is_dir():
        raise InputError(
            f"{what} {out}: {existing} is a file, not a folder", hint=f"choose another {what}"
        )
    try:  # where the first new folder would be made (nothing is left behind)
        probe = tempfile.mkdtemp(dir=existing, prefix=f".{out.name}.check-")
        os.rmdir(probe)
    except OSError as exc:
        raise InputError(
            f"cannot write {what} {out}: {exc.strerror or exc} ({existing})",
            hint="choose a folder you can write, or fix its permissions",
        ) from None
    free = shutil.disk_usage(existing).free
    if free < min_free_bytes:
        raise EnvironmentProblem(
            f"only {free / 2**20:.1f} MiB free at {existing}; {what} needs about "
            f"{min_free_bytes / 2**20:.0f} MiB",
            hint="free some space or choose another folder",
        )
    return out


def check_output_file(path: str | Path, *, what: str) -> Path:
    """Check before any long work that the file ``path`` can be written (its folder, or the
    nearest existing folder above it, takes a new file; ``path`` is not a folder)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {p} is a directory", hint="give the path of a file to write")
    parent = p.absolute().parent
    existing = _nearest_existing(parent)
    if not existing.is_dir():
        raise InputError(f"{what} {p}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=f".{p.name}.check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(
            f"cannot write {what} {p}: {exc.strerror or exc}",
            hint="choose a folder you can write, or fix its permissions",
        ) from None
    return p


def write_file_set(
    out_dir: str | Path, files: Mapping[str, str | bytes], *, what: str = "--out"
) -> dict[str, Path]:
    """Write ``files`` (name -> content) into ``out_dir`` as one set.

    The files are written into a temporary folder beside ``out_dir``; only when every one is
    complete is the folder renamed into place. An existing ``out_dir`` is moved aside first
    and deleted afterwards; entries of it that are not in ``files`` are carried over into the
    new folder. A failure while writing leaves ``out_dir`` exactly as it was.

    Returns
    -------
    dict
        name -> final path.

    Raises
    ------
    InputError, EnvironmentProblem
        The folder cannot be written (permission, disk full); ``out_dir`` is unchanged.
    """
    out = Path(out_dir)
    if out.is_symlink():  # replace the folder the link points at, not the link itself
        out = out.resolve()
    if out.exists() and not out.is_dir():
        raise InputError(f"{what} {out} is a file", hint="give a folder for the outputs")
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.new-"))
    except OSError as exc:
        raise _write_error(out, exc, what) from None
    try:
        os.chmod(stage, 0o777 & ~current_umask())
        for name, content in files.items():
            write_atomic(stage / name, content, make_parents=False)
        old: Path | None = None
        if out.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.old-"))
            os.rename(out, old / "d")
            old_dir = old / "d"
            try:
                os.rename(stage, out)
            except OSError:
                os.rename(old_dir, out)  # put the earlier outputs back
                raise
            for entry in os.listdir(old_dir):
                if entry not in files:
                    os.rename(old_dir / entry, out / entry)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(stage, out)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise _write_error(out, exc, what) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return {name: out / name for name in files}


def _write_error(out: Path, exc: OSError, what: str) -> InputError | EnvironmentProblem:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentProblem(
            f"cannot write {what} {out}: {reason}; nothing was changed there",
            hint="free some space or choose another folder",
        )
    return InputError(
        f"cannot write {what} {out}: {reason}; nothing was changed there",
        hint="choose a folder you can write, or fix its permissions",
    )
