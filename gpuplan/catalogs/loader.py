"""Load and validate the catalog files (``gpuplan/catalogs/data/*.yaml``).

Each file is a YAML mapping ``{kind: <row kind>, version: 1, rows: [...]}``. Loading checks
every row against its typed model (:mod:`gpuplan.catalogs.schema`), then the catalog as a
whole: ids unique across all kinds, aliases unique within a kind, and references (an
instance's accelerator, a node's NICs, a switch's fabric) pointing at rows that exist.
Every problem names the file, the row (id, or index when the id itself is bad) and the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.catalogs.names import name_key
from gpuplan.catalogs.schema import ROW_TYPES, Row
from gpuplan.errors import SchemaError
from gpuplan.fsio import write_atomic

FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong in a catalog file."""

    file: str
    row: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: row {self.row}" if self.row else self.file
        if self.field:
            where += f": field {self.field}"
        return f"{where}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def default_data_dir() -> Path:
    """The shipped catalog data (``GPUPLAN_CATALOG_DIR`` overrides it)."""
    override = os.environ.get("GPUPLAN_CATALOG_DIR")
    if override:
        return Path(override)
    return _SHIPPED_DATA_DIR


_SHIPPED_DATA_DIR = Path(__file__).resolve().parent / "data"


def _row_label(raw: Any, index: int) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"]:
        return f"{index} ({raw['id']})"
    return str(index)


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(row)"


def _expand_references(raw: dict[str, Any], refs: dict[str, str]) -> dict[str, Any]:
    """Replace reference keys (``MLENG-NET``) in ``source`` texts by what they stand for."""
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(k) for k in sorted(refs, key=len, reverse=True)) + r")\b"
    )

    def sub(text: Any) -> Any:
        return (
            pattern.sub(lambda m: " ".join(refs[m.group(1)].split()), text)
            if isinstance(text, str)
            else text
        )

    out = dict(raw)
    for key in ("source", "published_params_source"):
        if key in out:
            out[key] = sub(out[key])
    if isinstance(out.get("prices"), list):
        out["prices"] = [
            {**p, "source": sub(p.get("source"))} if isinstance(p, dict) else p
            for p in out["prices"]
        ]
    return out


def _parse_yaml(fname: str, text: str) -> tuple[Any, list[Problem]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader), []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [Problem(fname, "", "", f"not valid YAML{line}: {problem}")]


def read_file(path: Path) -> tuple[list[Row], list[Problem]]:
    """Parse one catalog file into typed rows; collect every problem instead of stopping."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return [], [Problem(path.name, "", "", f"cannot read: {exc.strerror or exc}")]
    doc, problems = _parse_yaml(path.name, text)
    if problems:
        return [], problems
    return rows_from_doc(path.name, doc)


def rows_from_doc(fname: str, doc: Any) -> tuple[list[Row], list[Problem]]:
    """Validate the rows of one parsed catalog document."""
    if not isinstance(doc, dict) or "rows" not in doc or "kind" not in doc:
        return [], [Problem(fname, "", "", "expected a mapping with 'kind', 'version' and 'rows'")]
    kind = doc["kind"]
    cls = ROW_TYPES.get(kind)
    if cls is None:
        return [], [
            Problem(fname, "", "kind", f"unknown kind {kind!r}; use one of {', '.join(ROW_TYPES)}")
        ]
    if doc.get("version") != FORMAT_VERSION:
        return [], [
            Problem(fname, "", "version", f"version {doc.get('version')!r} is not {FORMAT_VERSION}")
        ]
    raw_rows = doc["rows"]
    if not isinstance(raw_rows, list):
        return [], [Problem(fname, "", "rows", "must be a list of rows")]
    refs = doc.get("references") or {}
    if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
        return [], [Problem(fname, "", "references", "must map a key to the text it stands for")]
    rows: list[Row] = []
    problems: list[Problem] = []
    for i, raw in enumerate(raw_rows):
        label = _row_label(raw, i)
        if not isinstance(raw, dict):
            problems.append(Problem(fname, label, "", "a row must be a mapping of field: value"))
            continue
        if refs:
            raw = _expand_references(raw, refs)
        try:
            rows.append(cls.model_validate(raw))
        except ValidationError as exc:
            for err in exc.errors():
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = "unknown field (typo?)"
                elif err["type"] == "missing":
                    msg = "required field is missing"
                problems.append(Problem(fname, label, _loc(err["loc"]), msg))
    return rows, problems


def check_catalog(files: dict[str, list[Row]]) -> list[Problem]:
    """Whole-catalog checks: unique ids and aliases, references between kinds."""
    problems: list[Problem] = []
    where: dict[str, tuple[str, str]] = {}  # id -> (file, kind)
    alias_keys: dict[str, str] = {}  # name key -> id
    by_kind: dict[str, set[str]] = {}
    for fname, rows in files.items():
        for row in rows:
            if row.id in where:
                problems.append(
                    Problem(fname, row.id, "id", f"duplicate id (also in {where[row.id][0]})")
                )
            where[row.id] = (fname, row.kind)
            by_kind.setdefault(row.kind, set()).add(row.id)
    # Names are unique across all kinds, so that 'gpuplan catalog show NAME' is unambiguous.
    for fname, rows in files.items():
        for row in rows:
            for name in (row.id, *row.aliases):
                key = name_key(name)
                other = alias_keys.get(key)
                if other is not None and other != row.id:
                    problems.append(
                        Problem(fname, row.id, "aliases", f"{name!r} also names {other}")
                    )
                alias_keys[key] = row.id

    def need(fname: str, row: Row, field: str, ref: str | None, kind: str) -> None:
        if ref is not None and ref not in by_kind.get(kind, set()):
            problems.append(Problem(fname, row.id, field, f"no {kind} with id {ref!r}"))

    for fname, rows in files.items():
        for row in rows:
            if row.kind in ("instance", "node"):
                need(fname, row, "accelerator_id", row.accelerator_id, "accelerator")  # type: ignore[attr-defined]
            if row.kind == "instance":
                need(fname, row, "nic_id", row.nic_id, "nic")  # type: ignore[attr-defined]
            if row.kind == "node":
                for j, nic in enumerate(row.nics):  # type: ignore[attr-defined]
                    need(fname, row, f"nics.{j}.nic_id", nic.nic_id, "nic")
            if row.kind == "switch":
                need(fname, row, "fabric_id", row.fabric_id, "fabric")  # type: ignore[attr-defined]
            if row.kind == "nic":
                for j, fid in enumerate(row.fabric_ids):  # type: ignore[attr-defined]
                    need(fname, row, f"fabric_ids.{j}", fid, "fabric")
            if row.kind == "accelerator":
                need(fname, row, "scale_up_fabric_id", row.scale_up_fabric_id, "fabric")  # type: ignore[attr-defined]
    return problems


def _cache_dir() -> Path:
    from gpuplan.paths import cache_dir

    return cache_dir()


def _parsed_docs(texts: dict[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """Parsed YAML documents, reused from a JSON cache keyed by the files' content.

    Parsing YAML is most of a cold load (about 60 ms for the shipped catalog on a 2-core
    machine, against a few ms for JSON), and every forecast loads the catalog. The cache
    holds only the parsed documents (JSON, never pickle), under a name that is the SHA-256
    of every file's name and bytes, so an edited file can never be served stale; rows are
    still validated on every load. A cache that cannot be read or written is ignored.
    """
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode() + b"\0" + texts[name].encode() + b"\0")
    cache = _cache_dir() / f"catalog-{digest.hexdigest()[:32]}.json"
    try:
        docs = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(docs, dict) and set(docs) == set(texts):
            return docs, []
    except (OSError, ValueError):
        pass
    docs, problems = {}, []
    for name in sorted(texts):
        doc, probs = _parse_yaml(name, texts[name])
        docs[name] = doc
        problems.extend(probs)
    if not problems:
        # a full disk leaves no stray temp file (write_atomic removes it); the cache is optional
        with contextlib.suppress(OSError, TypeError, ValueError):
            write_atomic(cache, json.dumps(docs, default=_json_default))
    return docs, problems


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    raise TypeError(f"cannot cache {type(obj).__name__}")


def read_dir(data_dir: Path) -> tuple[dict[str, list[Row]], list[Problem]]:
    """Read every ``*.yaml`` file of ``data_dir``; return rows per file and all problems."""
    if not data_dir.is_dir():
        return {}, [Problem(str(data_dir), "", "", "catalog folder does not exist")]
    texts: dict[str, str] = {}
    problems: list[Problem] = []
    for path in sorted(data_dir.glob("*.yaml")):
        try:
            texts[path.name] = path.read_text(encoding="utf-8")
        except OSError as exc:
            problems.append(Problem(path.name, "", "", f"cannot read: {exc.strerror or exc}"))
    docs, parse_problems = _parsed_docs(texts)
    problems.extend(parse_problems)
    files: dict[str, list[Row]] = {}
    for name in sorted(texts):
        if docs.get(name) is None and any(p.file == name for p in parse_problems):
            files[name] = []
            continue
        rows, probs = rows_from_doc(name, docs[name])
        files[name] = rows
        problems.extend(probs)
    if not problems:
        problems.extend(check_catalog(files))
    return files, problems


def raise_for(problems: Iterable[Problem], data_dir: Path) -> None:
    """Raise one SchemaError for ``problems`` (first few shown), if any."""
    problems = list(problems)
    if not problems:
        return
    shown = "; ".join(str(p) for p in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    raise SchemaError(
        f"catalog {data_dir} is invalid: {shown}{more}",
        hint="fix the named rows, then run 'gpuplan catalog validate'",
    )
