"""The one loader of result files, shared by every command that reads them.

``results ls/show/compare``, ``calibrate``, ``plan --results/--trial`` and the upload client
read result files through :func:`read_result_file` (one file, every problem an error) or
:func:`load_result_files` (files and folders: a bad file is reported and skipped, the rest
load). Each file goes through the same steps:

1. ``stat`` first: only regular files are opened (a FIFO named ``x.json`` would block
   ``open`` for ever; devices and sockets are refused too); the file is then opened with
   ``O_NONBLOCK`` and checked again with ``fstat``, so a file swapped for a FIFO between
   the two calls cannot hang us either. Unreadable files (permissions) are one line.
2. size limit, then :func:`gpuplan.results.safejson.loads_limited` (UTF-8 only, no
   NaN/Infinity, depth, integer and string limits);
3. JSON that is not a result document (a calibration artifact, any object without
   ``schema_version``/``probes``) is :class:`NotAResultError`: skipped with a note in a
   folder, an error when named alone;
4. schema validation: a future ``schema_version`` is refused, older ones are upgraded
   (:mod:`gpuplan.results.migrations`);
5. physical plausibility (:func:`check_physical`): no NaN/Inf, times and medians > 0,
   throughputs > 0, FLOP/s and bandwidths within [1e-3, 10] x the device's peak, the field
   named. The peak comes from the measurement's ``spec_*`` field or from a ``peaks``
   lookup the caller passes (built from the catalog by
   :func:`gpuplan.calibration.dataset.catalog_peaks`; this layer does not import the
   catalog, forecast or plan).

A run id seen in two files is kept once when both hold the same document (a note says
so); a final file beside the ``.partial.json`` of the same run wins over the partial one;
otherwise two different documents with one run id are an error naming both files.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.errors import GpuplanError, InputError, SchemaError
from gpuplan.results.migrations import upgrade
from gpuplan.results.safejson import MAX_BYTES, loads_limited
from gpuplan.results.schema import ProbeResult, ResultDocument

PeakLookup = Callable[[ResultDocument, ProbeResult, str], "float | None"]
"""``peaks(doc, probe, quantity)``: the catalog peak of the device ``probe`` ran on, in SI
units, or None when unknown. ``quantity`` is one of :data:`PEAK_QUANTITIES`' values."""

# probe -> (measured field, catalog quantity); collectives only within a scale-up domain
PEAK_QUANTITIES: dict[str, tuple[str, str]] = {
    "matmul": ("flops_per_s", "flops_per_s"),
    "membw": ("bytes_per_s", "memory_bandwidth_bytes_per_s"),
    "pcie": ("bytes_per_s", "host_link_bandwidth_bytes_per_s"),
    "collectives": ("busbw_bytes_per_s", "scale_up_bandwidth_bytes_per_s"),
}
# A point above PEAK_HIGH x peak is impossible (a unit slip, a hand edit). Below the peak
# small shapes and messages are legitimately slow (0.4 % of the NVLink peak for a 1 KiB
# all-reduce in the reference set), so the low bound applies to a probe's *best* point:
# a run whose best matmul is under 1e-3 of the peak measured something else.
PEAK_HIGH = 10.0
PEAK_LOW = 1e-3

_POSITIVE_TIMES = ("median_s", "min_s", "max_s", "runtime_s")
_POSITIVE_LISTS = ("samples_s", "warmup_s")
_POSITIVE_RATES = (
    "flops_per_s",
    "bytes_per_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "bw_bytes_per_s",
)
_NON_NEGATIVE = ("iqr_s", "iops")


class NotAResultError(SchemaError):
    """Valid JSON that is not a result document (an artifact, a config file...)."""


@dataclass(frozen=True)
class LoadedResults:
    """What :func:`load_result_files` found.

    Attributes
    ----------
    documents:
        ``(path, document)`` of every valid result, each run once, in path order.
    skipped:
        ``(path, reason)`` of every result file refused; ``reason`` is one line.
    notes:
        One line each: non-result JSON skipped, duplicates kept once.
    """

    documents: list[tuple[Path, ResultDocument]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def warnings(self) -> list[str]:
        """Lines for stderr: one per skipped file, then the notes."""
        return [f"skipped {reason}" for _, reason in self.skipped] + list(self.notes)


def read_result_bytes(path: Path | str, *, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``, refusing anything but a readable regular file of at most
    ``max_bytes`` (never blocks on a FIFO).

    Raises
    ------
    InputError
        missing, not a regular file, unreadable, or too large.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(
            f"no result file {path}", hint="list runs with 'gpuplan results ls'"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    _require_regular(path, st.st_mode)
    if st.st_size > max_bytes:
        raise InputError(
            f"{path}: {st.st_size:,} bytes is larger than a result file can be ({max_bytes:,})",
            hint="is this really a gpuplan result file?",
        )
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise InputError(
            f"{path}: permission denied", hint="make the file readable (chmod a+r) or skip it"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open it ({exc.strerror})") from None
    try:
        _require_regular(path, os.fstat(fd).st_mode)
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than a result file can be ({max_bytes:,} bytes)")
    return data


def _require_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    raise InputError(
        f"{path}: is {kind}, not a regular file", hint="result files are plain JSON files"
    )


def read_result_file(
    path: Path | str, *, peaks: PeakLookup | None = None, max_bytes: int = MAX_BYTES
) -> ResultDocument:
    """Load one result file with every check of the module docstring.

    Raises
    ------
    GpuplanError
        :class:`InputError` (missing, not regular, unreadable), :class:`NotAResultError`,
        or :class:`SchemaError` (bad JSON, schema, impossible values), naming the file and
        the field.
    """
    path = Path(path)
    data = loads_limited(read_result_bytes(path, max_bytes=max_bytes), where=str(path))
    if not isinstance(data, dict) or ("schema_version" not in data and "probes" not in data):
        what = (
            "a calibration artifact"
            if isinstance(data, dict) and "artifact_version" in data
            else "JSON without 'schema_version' and 'probes'"
        )
        raise NotAResultError(
            f"{path}: not a result file ({what})",
            hint="pass probe result files (results/<machine_id>/*.json)",
        )
    doc = parse_result(data, where=str(path))
    check_physical(doc, where=str(path), peaks=peaks)
    return doc


def check_physical(
    doc: ResultDocument, *, where: str = "document", peaks: PeakLookup | None = None
) -> None:
    """Refuse values no measurement can have, naming the field.

    NaN/Inf anywhere; times, medians and samples <= 0; throughputs <= 0; a point over
    ``PEAK_HIGH`` x the peak, or a probe whose best point is under ``PEAK_LOW`` x the peak.

    Raises
    ------
    SchemaError
        ``<where>: field 'probes.I.measurements.J.NAME': ...``
    """
    _check_finite(doc.model_dump(mode="python"), where)
    for i, probe in enumerate(doc.probes):
        for j, m in enumerate(probe.measurements):
            loc = f"probes.{i}.measurements.{j}"
            for name in _POSITIVE_TIMES + _POSITIVE_RATES:
                value = _num(m.get(name))
                if name == "busbw_bytes_per_s" and m.get("ranks") == 1:
                    continue  # nccl-tests' bus factor is 0 for one rank: busbw 0 is right
                if value is not None and value <= 0:
                    raise _impossible(where, f"{loc}.{name}", value, "must be > 0")
            for name in _POSITIVE_LISTS:
                for k, item in enumerate(m.get(name) or []):
                    value = _num(item)
                    if value is not None and value <= 0:
                        raise _impossible(where, f"{loc}.{name}.{k}", value, "must be > 0")
            for name in _NON_NEGATIVE:
                value = _num(m.get(name))
                if value is not None and value < 0:
                    raise _impossible(where, f"{loc}.{name}", value, "must be >= 0")
        _check_peaks(doc, i, probe, where, peaks)


def _check_peaks(
    doc: ResultDocument, i: int, probe: ProbeResult, where: str, peaks: PeakLookup | None
) -> None:
    spec = PEAK_QUANTITIES.get(probe.probe)
    if spec is None or not probe.measurements:
        return
    measured, quantity = spec
    catalog_peak: float | None = None
    looked_up = False
    best: tuple[float, int, float, float] | None = None  # (ratio, j, value, peak)
    for j, m in enumerate(probe.measurements):
        value = _num(m.get(measured))
        if value is None:
            continue
        if probe.probe == "collectives" and m.get("scope", "intra") != "intra":
            continue
        peak = _num(m.get("spec_flops_per_s")) if probe.probe == "matmul" else None
        if peak is None or peak <= 0:
            if not looked_up and peaks is not None:
                catalog_peak = _peak(peaks, doc, probe, quantity)
                looked_up = True
            peak = catalog_peak
        if peak is None:
            continue
        ratio = value / peak
        if ratio > PEAK_HIGH:
            raise _impossible(
                where,
                f"probes.{i}.measurements.{j}.{measured}",
                value,
                f"is {ratio:.3g}x the device's peak {peak:.4g} (at most {PEAK_HIGH:g}x is possible)",
            )
        if best is None or ratio > best[0]:
            best = (ratio, j, value, peak)
    if best is not None and best[0] < PEAK_LOW:
        ratio, j, value, peak = best
        raise _impossible(
            where,
            f"probes.{i}.measurements.{j}.{measured}",
            value,
            f"the probe's best point is {ratio:.3g}x the device's peak {peak:.4g} "
            f"(under {PEAK_LOW:g}x: wrong units or a broken run)",
        )


def _peak(
    peaks: PeakLookup, doc: ResultDocument, probe: ProbeResult, quantity: str
) -> float | None:
    try:
        value = _num(peaks(doc, probe, quantity))
    except GpuplanError:
        return None  # an unknown device is not an impossible value; calibration reports it
    return value if value is not None and value > 0 else None


def _num(value: Any) -> float | None:
    """``value`` as a float when it is a number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _impossible(where: str, loc: str, value: float, why: str) -> SchemaError:
    return SchemaError(
        f"{where}: field '{loc}': {value:g} {why}",
        hint="a physically impossible value; re-run the probe or fix the file",
    )


def _check_finite(data: Any, where: str) -> None:
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{loc}.{k}" if loc else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{loc}.{k}" if loc else str(k)) for k, v in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            raise SchemaError(
                f"{where}: field '{loc}': {item} is not a measurement",
                hint="NaN and infinite values are refused; re-run the probe or fix the file",
            )


def load_result_files(
    paths: Iterable[Path | str], *, peaks: PeakLookup | None = None, strict_single: bool = True
) -> LoadedResults:
    """Load the result files under ``paths`` (files as given, folders searched).

    A bad file is skipped and reported in ``skipped`` (one line naming it and the problem);
    JSON that is not a result goes to ``notes``. With ``strict_single`` (the default), a
    single path that is not a folder is the user's explicit choice: any problem with it is
    raised instead.

    Raises
    ------
    GpuplanError
        a path that does not exist; the problem of a file named alone; one run id in two
        files with different documents (both files named).
    """
    roots = [Path(p) for p in paths]
    single = strict_single and len(roots) == 1 and not roots[0].is_dir()
    out = LoadedResults()
    by_run: dict[str, int] = {}
    for file in iter_result_files(roots):
        try:
            doc = read_result_file(file, peaks=peaks)
        except NotAResultError as exc:
            if single:
                raise
            out.notes.append(f"{file}: not a result file, skipped ({_why(exc)})")
            continue
        except GpuplanError as exc:
            if single:
                raise
            out.skipped.append((file, exc.one_line()))
            continue
        index = by_run.get(doc.run_id)
        if index is None:
            by_run[doc.run_id] = len(out.documents)
            out.documents.append((file, doc))
            continue
        first_path, first = out.documents[index]
        if _same(first, doc):
            out.notes.append(f"{file}: run {doc.run_id} also in {first_path}, kept once")
        elif first.interrupted != doc.interrupted:
            keep = (file, doc) if first.interrupted else (first_path, first)
            drop = first_path if first.interrupted else file
            out.documents[index] = keep
            out.notes.append(
                f"{drop}: interrupted copy of run {doc.run_id}, superseded by {keep[0]}"
            )
        else:
            raise SchemaError(
                f"run {doc.run_id} is in {first_path} and {file} with different content",
                hint="keep one of the two files (a run id names one run)",
            )
    return out


def _same(a: ResultDocument, b: ResultDocument) -> bool:
    return a.model_dump(mode="json") == b.model_dump(mode="json")


def _why(exc: GpuplanError) -> str:
    text = exc.message.split(": ", 1)[-1]
    return text.removeprefix("not a result file (").removesuffix(")")


def parse_result(data: Any, *, where: str = "document") -> ResultDocument:
    """Validate a decoded JSON value as a result document, upgrading older versions."""
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected a JSON object, got {type(data).__name__}")
    data = upgrade(data, where=where)
    try:
        return ResultDocument.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SchemaError(f"{where}: field '{loc}': {err['msg']}") from None


def iter_result_files(paths: Iterable[Path | str]) -> Iterator[Path]:
    """Result files under ``paths`` (files as given, directories searched recursively)."""
    for p in paths:
        p = Path(p)
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.json") if not q.name.startswith("."))
        elif p.exists():
            yield p
        else:
            raise InputError(f"no such file or directory: {p}")
