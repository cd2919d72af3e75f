"""A user's own price list, merged over the shipped instance prices.

``gpuplan catalog import-prices FILE.csv`` validates a CSV and merges it into one JSON file
under :func:`gpuplan.paths.state_dir` (``prices.json``; never into the package).
:func:`gpuplan.catalogs.get_catalog` adds those observations to the instance rows, so
``gpuplan plan`` and ``gpuplan catalog ls/show`` use them like any catalog price: the
latest ``as_of`` of a purchasing model (in the scenario's region) wins.

CSV columns (header required; ``region`` and ``notes`` may be empty)::

    instance,model,usd_per_hour,region,as_of,source,notes
    p5.48xlarge,reserved_1y,31.50,us-east-1,2026-11-20,AWS EDP quote 2026-11,

``instance`` is an id or alias of a catalog instance; ``model`` one of the purchase kinds
of :class:`gpuplan.catalogs.schema.PriceObservation` (``on_demand``, ``spot``,
``reserved_1y``/``_3y``, ``savings_plan_1y``/``_3y``, ``cud_1y``/``_3y``, ``capacity_block``);
``usd_per_hour`` per instance (not per GPU; a capacity block imported here is costed with the
catalog's booking rules for that instance). An observation replaces an earlier one with the same instance, model,
region and ``as_of``; every other one is kept.

File format history: version 1 -- ``{"version": 1, "prices": {instance_id: [observation]}}``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan import paths
from gpuplan.catalogs.names import name_key
from gpuplan.catalogs.schema import Instance, PriceObservation
from gpuplan.errors import SchemaError

USER_PRICES_VERSION = 1
CSV_COLUMNS = ("instance", "model", "usd_per_hour", "region", "as_of", "source", "notes")
_REQUIRED = ("instance", "model", "usd_per_hour", "as_of", "source")


def user_prices_path() -> Path:
    """Where imported prices live: ``<state dir>/prices.json``."""
    return paths.state_dir() / "prices.json"


@dataclass(frozen=True)
class RowProblem:
    """One bad CSV row: its line, the column and what is wrong."""

    line: int
    column: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.column}: {self.message}"


def parse_price_csv(
    text: str, instances: Sequence[Instance]
) -> tuple[dict[str, list[PriceObservation]], list[RowProblem]]:
    """Observations per instance id from CSV ``text``, and every bad row (one problem each).

    >>> from gpuplan.catalogs import get_catalog
    >>> obs, bad = parse_price_csv(
    ...     "instance,model,usd_per_hour,as_of,source\\np5,on_demand,40,2026-11-01,my quote 2026\\n",
    ...     get_catalog().instances)
    >>> obs["p5.48xlarge"][0].usd_per_hour, bad
    (40.0, [])
    """
    index = {name_key(n): i.id for i in instances for n in (*i.aliases, i.id)}
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        return {}, [RowProblem(1, "header", f"missing column(s) {', '.join(missing)}")]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        return {}, [
            RowProblem(1, "header", f"unknown column(s) {', '.join(unknown)}; use {CSV_COLUMNS}")
        ]
    reader.fieldnames = header
    out: dict[str, list[PriceObservation]] = {}
    problems: list[RowProblem] = []
    rows = 0
    for raw in reader:
        line = reader.line_num
        row = {k: (v or "").strip() for k, v in raw.items() if k is not None}
        if None in raw:
            problems.append(RowProblem(line, "row", "more fields than the header has columns"))
            continue
        if not any(row.values()):
            continue
        rows += 1
        blank = [c for c in _REQUIRED if not row.get(c)]
        if blank:
            problems.append(RowProblem(line, blank[0], "empty (required)"))
            continue
        iid = index.get(name_key(row["instance"]))
        if iid is None:
            problems.append(RowProblem(line, "instance", f"unknown instance {row['instance']!r}"))
            continue
        try:
            usd = float(row["usd_per_hour"])
        except ValueError:
            problems.append(
                RowProblem(line, "usd_per_hour", f"{row['usd_per_hour']!r} is not a number")
            )
            continue
        try:
            obs = PriceObservation.model_validate(
                {
                    "model": row["model"],
                    "usd_per_hour": usd,
                    "region": row.get("region") or None,
                    "as_of": row["as_of"],
                    "source": row["source"],
                    "notes": row.get("notes", ""),
                }
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            col = str(err["loc"][0]) if err.get("loc") else "row"
            problems.append(RowProblem(line, col, err["msg"]))
            continue
        out.setdefault(iid, []).append(obs)
    if rows == 0 and not problems:
        problems.append(RowProblem(2, "row", "no price rows after the header"))
    return out, problems


def _key(o: PriceObservation) -> tuple[str, str | None, str]:
    return (o.model, o.region, o.as_of)


def merge(
    old: dict[str, list[PriceObservation]], new: dict[str, list[PriceObservation]]
) -> dict[str, list[PriceObservation]]:
    """``old`` with ``new`` merged in: same (model, region, as_of) replaced, the rest kept."""
    merged = {k: list(v) for k, v in old.items()}
    for iid, obs in new.items():
        keep = {_key(o): o for o in merged.get(iid, [])}
        for o in obs:
            keep[_key(o)] = o
        merged[iid] = sorted(keep.values(), key=lambda o: (o.model, o.region or "", o.as_of))
    return merged


def load_user_prices(path: Path | None = None) -> dict[str, list[PriceObservation]]:
    """The imported prices (empty when nothing was imported); SchemaError naming the file
    when it is damaged."""
    p = path or user_prices_path()
    if not p.is_file():
        return {}
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SchemaError(
            f"{p}: the imported price list cannot be read ({exc})",
            hint="delete it and run 'gpuplan catalog import-prices FILE.csv' again",
        ) from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != USER_PRICES_VERSION:
        raise SchemaError(
            f"{p}: imported price list version {version!r}; this gpuplan reads version "
            f"{USER_PRICES_VERSION}",
            hint="update gpuplan, or delete the file and import the CSV again",
        )
    out: dict[str, list[PriceObservation]] = {}
    try:
        for iid, obs in (doc.get("prices") or {}).items():
            out[str(iid)] = [PriceObservation.model_validate(o) for o in obs]
    except (ValidationError, AttributeError, TypeError) as exc:
        raise SchemaError(
            f"{p}: a price in the imported list is not valid ({str(exc).splitlines()[0]})",
            hint="delete it and run 'gpuplan catalog import-prices FILE.csv' again",
        ) from None
    return out


def save_user_prices(prices: dict[str, list[PriceObservation]], path: Path | None = None) -> Path:
    """Write the price list atomically (the old file stays whole until the new one is in)."""
    from gpuplan.fsio import write_json_atomic

    doc: dict[str, Any] = {
        "version": USER_PRICES_VERSION,
        "prices": {
            iid: [o.model_dump(mode="json") for o in obs] for iid, obs in sorted(prices.items())
        },
    }
    return write_json_atomic(path or user_prices_path(), doc, overwrite=True)


def with_user_prices(
    instances: Sequence[Instance], prices: dict[str, list[PriceObservation]]
) -> list[Instance]:
    """Instance rows with the imported observations added to their ``prices``."""
    if not prices:
        return list(instances)
    out = []
    for inst in instances:
        extra = prices.get(inst.id)
        if extra:
            inst = inst.model_copy(update={"prices": (*inst.prices, *extra)})
        out.append(inst)
    return out
