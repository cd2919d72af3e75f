"""Figures that carry their provenance: the unit the plan and the report are built from.

Every number in a capacity plan is a :class:`Figure`: a value, its unit, an optional
[low, high] interval and a :class:`Provenance` that says where it comes from:

``input``
    a value the user wrote in the scenario file (the reference names file, line and field);
``default``
    a modelling default of the scenario schema the user did not override (named field);
``catalog``
    a catalog row field (row id, field, the row's ``source`` and ``retrieved`` date, and
    whether the field is marked ``unverified``);
``calibration``
    a calibrated device quantity (artifact, basis measured/transferred/spec);
``measurement``
    a probe result of the trial node (run id, probe);
``forecast``
    a field of a training or inference forecast (DESIGN.md 3.3);
``derived``
    arithmetic on other figures: the formula and the figures it used.

The report renders only figures, and a test walks the plan JSON to check that every number
sits inside a figure with a provenance. Derived figures inherit the ``unverified`` flag of
anything they were computed from, so a doubtful catalog value stays visible downstream.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from gpuplan.units import fmt_si

Kind = Literal["input", "default", "catalog", "calibration", "measurement", "forecast", "derived"]
KINDS: tuple[str, ...] = (
    "input",
    "default",
    "catalog",
    "calibration",
    "measurement",
    "forecast",
    "derived",
)


@dataclass(frozen=True)
class Provenance:
    """Where a figure comes from.

    Parameters
    ----------
    kind:
        One of :data:`KINDS`.
    ref:
        What was read: ``"scenario.yaml:23 costs.pue"``, ``"catalog gpus/h100-sxm5-80gb tdp_w"``,
        ``"run 3f2a... matmul"``, ``"forecast train pretrain: tokens_per_s"``.
    source:
        Citation of the catalog row or calibration (URL, paper, artifact path).
    retrieved:
        Date the catalog source was read.
    unverified:
        True when the catalog marks the field as still needing a primary source, or when
        any input of a derived figure is unverified.
    formula:
        For derived figures: the arithmetic, with the paper/equation where there is one.
    inputs:
        For derived figures: labels of the figures it was computed from.
    """

    kind: Kind
    ref: str
    source: str | None = None
    retrieved: str | None = None
    unverified: bool = False
    formula: str | None = None
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown provenance kind {self.kind!r}")
        if self.kind == "derived" and not self.formula:
            raise ValueError("a derived figure must say its formula")

    def to_json(self) -> FigureDict:
        out: FigureDict = {"kind": self.kind, "ref": self.ref}
        if self.source is not None:
            out["source"] = self.source
        if self.retrieved is not None:
            out["retrieved"] = self.retrieved
        out["unverified"] = self.unverified
        if self.formula is not None:
            out["formula"] = self.formula
        if self.inputs:
            out["inputs"] = list(self.inputs)
        return out


@dataclass(frozen=True)
class Figure:
    """One number of the plan with its unit, interval and provenance.

    ``value`` may be ``None`` when it is missing (a price the catalog does not have); then
    ``missing`` says why and what to add. Intervals are ``(low, high)`` in the same unit.
    """

    value: Any
    unit: str
    label: str
    prov: Provenance
    interval: tuple[float, float] | None = None
    missing: str | None = None

    @property
    def ok(self) -> bool:
        """True when the figure has a finite value."""
        return _finite(self.value)

    @property
    def unverified(self) -> bool:
        return self.prov.unverified

    def to_json(self) -> FigureDict:
        out: FigureDict = {
            "value": _plain(self.value),
            "unit": self.unit,
            "label": self.label,
            "provenance": self.prov.to_json(),
        }
        if self.interval is not None:
            out["interval"] = [_plain(self.interval[0]), _plain(self.interval[1])]
        if self.missing is not None:
            out["missing"] = self.missing
        return out


def _plain(x: object) -> object:
    item = getattr(x, "item", None)
    if callable(item):
        x = item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _finite(x: object) -> bool:
    if x is None or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))  # type: ignore[arg-type]  # numbers, numpy scalars
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- display


def format_value(fig: Figure) -> str:
    """A figure's value for people, in display units (1 GB = 1e9 B, memory in TiB/GiB).

    >>> format_value(input_fig(1234567.0, "USD", "x", "r"))
    '$1,234,567'
    >>> format_value(input_fig(0.4213, "fraction", "x", "r"))
    '42.1%'
    """
    return format_number(fig.value, fig.unit)


def format_number(v: Any, u: str) -> str:
    """:func:`format_value` for a bare value and unit."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "missing" if v is None else ("unbounded" if v > 0 else "-inf")
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if u.startswith("USD"):
        rest = u[3:]
        if abs(v) >= 100:
            text = f"${v:,.0f}"
        elif abs(v) >= 1:
            text = f"${v:,.2f}"
        else:
            text = f"${v:.3g}"
        return text + (f"/{rest.lstrip('/')}" if rest else "")
    if u == "fraction":
        return f"{v * 100:.3g}%"
    if u == "s":
        return _duration(v)
    if u == "B":
        return _bytes(v)
    if u == "B/s":
        return fmt_si(v, "B/s")
    if u == "bit/s":
        return fmt_si(v, "bit/s")
    if u == "W":
        return fmt_si(v, "W")
    if u == "FLOP/s":
        return fmt_si(v, "FLOP/s")
    if u == "days":
        return f"{v:.4g} days"
    if (u.endswith(("/s", "/month")) or u in ("tokens", "parameters")) and abs(v) >= 1e4:
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(v) >= scale:
                return f"{v / scale:.3g}{prefix} {u}"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,} {u}".strip()
    return f"{v:.4g} {u}".strip()


def _bytes(v: float) -> str:
    for scale, unit in ((2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB")):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {unit}"
    return f"{v:.0f} B"


def _duration(v: float) -> str:
    if v == 0:
        return "0 s"
    if v < 1:
        return f"{v * 1e3:.3g} ms"
    if v < 120:
        return f"{v:.3g} s"
    if v < 7200:
        return f"{v / 60:.3g} min"
    if v < 2 * 86400:
        return f"{v / 3600:.3g} h"
    return f"{v / 86400:.3g} days"


@dataclass(frozen=True)
class Text:
    """A sentence whose numbers are figures: ``Text("needs {a}; has {b}", {"a": f, "b": g})``.

    The JSON and Markdown get :meth:`plain`; the HTML renders each placeholder as a figure
    with its provenance, so messages never carry a number without a source.
    """

    template: str
    figs: Mapping[str, Figure] = field(default_factory=dict)

    def plain(self) -> str:
        return self.template.format(**{k: format_value(f) for k, f in self.figs.items()})

    def parts(self) -> list[str | Figure]:
        """The template split into literal text and figures, in order."""
        import string

        out: list[str | Figure] = []
        for literal, name, _spec, _conv in string.Formatter().parse(self.template):
            if literal:
                out.append(literal)
            if name is not None:
                out.append(self.figs[name])
        return out

    def __str__(self) -> str:
        return self.plain()

    def to_json(self) -> FigureDict:
        """``{"text": plain sentence, "template": ..., "figures": {name: figure}}``."""
        return {
            "text": self.plain(),
            "template": self.template,
            "figures": {k: f.to_json() for k, f in self.figs.items()},
        }


def join_texts(parts: Iterable[Text | str], sep: str = "; ") -> Text:
    """Join sentences (texts or plain strings) into one :class:`Text`."""
    import string

    template_parts: list[str] = []
    figs: dict[str, Figure] = {}
    for i, part in enumerate(parts):
        if isinstance(part, Text):
            pieces = []
            for literal, name, _spec, _conv in string.Formatter().parse(part.template):
                pieces.append(literal.replace("{", "{{").replace("}", "}}"))
                if name is not None:
                    key = f"p{i}_{name}"
                    figs[key] = part.figs[name]
                    pieces.append("{" + key + "}")
            template_parts.append("".join(pieces))
        else:
            template_parts.append(str(part).replace("{", "{{").replace("}", "}}"))
    return Text(sep.replace("{", "{{").replace("}", "}}").join(template_parts), figs)


#: A plan record before :func:`figures_to_json`: JSON values whose leaves may be figures,
#: texts or records with ``to_json``.
FigureDict = dict[str, object]


class _BindingKeys(TypedDict):
    constraint: str
    message: str | Text


class Binding(_BindingKeys, total=False):
    """A constraint that makes an option infeasible, with the figures on both sides."""

    option: str
    needed: Figure | None
    limit: Figure | None
    endpoints: Figure | None


# ---------------------------------------------------------------- constructors


def input_fig(value: object, unit: str, label: str, ref: str, *, default: bool = False) -> Figure:
    """A value the user gave (or a schema default the user did not override)."""
    kind: Kind = "default" if default else "input"
    return Figure(value, unit, label, Provenance(kind, ref))


def catalog_fig(
    value: object,
    unit: str,
    label: str,
    *,
    row_kind: str,
    row_id: str,
    field_name: str,
    source: str | None,
    retrieved: str | None,
    unverified: bool = False,
    missing: str | None = None,
) -> Figure:
    """A field of a catalog row."""
    prov = Provenance(
        "catalog",
        f"catalog {row_kind}/{row_id} {field_name}",
        source=source,
        retrieved=retrieved,
        unverified=unverified,
    )
    return Figure(value, unit, label, prov, missing=missing)


def measured_fig(
    value: object,
    unit: str,
    label: str,
    ref: str,
    *,
    source: str | None = None,
    interval: tuple[float, float] | None = None,
) -> Figure:
    """A value read from a probe result of the trial node."""
    return Figure(value, unit, label, Provenance("measurement", ref, source=source), interval)


def forecast_fig(
    value: object,
    unit: str,
    label: str,
    ref: str,
    *,
    interval: tuple[float, float] | None = None,
    source: str | None = None,
) -> Figure:
    """A field of a forecast (DESIGN.md 3.3)."""
    return Figure(value, unit, label, Provenance("forecast", ref, source=source), interval)


def calibration_fig(
    value: object,
    unit: str,
    label: str,
    ref: str,
    *,
    basis: str,
    source: str | None = None,
    interval: tuple[float, float] | None = None,
) -> Figure:
    """A calibrated device quantity; ``basis`` is measured|transferred|spec."""
    prov = Provenance("calibration", f"{ref} (basis: {basis})", source=source)
    return Figure(value, unit, label, prov, interval)


def derived(
    value: object,
    unit: str,
    label: str,
    formula: str,
    inputs: Iterable[Figure] = (),
    *,
    interval: tuple[float, float] | None = None,
    missing: str | None = None,
) -> Figure:
    """A figure computed from others; inherits their ``unverified`` flag.

    If any input is missing and no explicit ``missing`` reason is given, the result is
    missing too, with the first input's reason.
    """
    inputs = list(inputs)
    unverified = any(f.unverified for f in inputs)
    if missing is None and value is None:
        reasons = [f.missing for f in inputs if f.missing]
        missing = reasons[0] if reasons else None
    prov = Provenance(
        "derived",
        label,
        unverified=unverified,
        formula=formula,
        inputs=tuple(f.label for f in inputs),
    )
    return Figure(value, unit, label, prov, interval=interval, missing=missing)


def missing_fig(unit: str, label: str, reason: str, inputs: Iterable[Figure] = ()) -> Figure:
    """A figure that cannot be computed; ``reason`` says what to add to the scenario/catalog."""
    return derived(None, unit, label, "missing", inputs, missing=reason)


# ---------------------------------------------------------------- walking


def figures_to_json(obj: Any) -> Any:
    """Turn nested dicts/lists of figures into JSON types (figures become dicts, texts
    their plain sentence)."""
    if isinstance(obj, Figure):
        return obj.to_json()
    if isinstance(obj, Text):
        return obj.to_json()
    if hasattr(obj, "to_json") and not isinstance(obj, (dict, list, str)):
        return figures_to_json(obj.to_json())
    if isinstance(obj, Mapping):
        return {str(k): figures_to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [figures_to_json(v) for v in obj]
    return _plain(obj)


def is_text_json(obj: object) -> bool:
    """True for the JSON form of a :class:`Text`."""
    return isinstance(obj, Mapping) and set(obj) == {"text", "template", "figures"}


def text_plain(obj: object) -> str:
    """The sentence of a text's JSON form (or ``str(obj)`` for anything else)."""
    if isinstance(obj, Mapping) and is_text_json(obj):
        return str(obj["text"])
    return "" if obj is None else str(obj)


def is_figure_json(obj: object) -> bool:
    """True for the JSON form of a :class:`Figure`."""
    return (
        isinstance(obj, Mapping)
        and "provenance" in obj
        and "value" in obj
        and "unit" in obj
        and isinstance(obj["provenance"], Mapping)
        and obj["provenance"].get("kind") in KINDS
    )


@dataclass
class Unsourced:
    """A number found outside any figure by :func:`find_unsourced_numbers`."""

    path: str
    value: float


# Keys whose numeric values are structure, not plan figures (versions, line numbers,
# indices, counts of list items in the provenance section itself).
STRUCTURAL_KEYS = frozenset(
    {
        "plan_version",
        "line",
        "schema_version",
        "artifact_version",
        "rank",
        "rank_nominal",
        "rank_if",
        "index",
    }
)


def find_unsourced_numbers(doc: object, path: str = "$") -> list[Unsourced]:
    """Every int/float in ``doc`` (plan JSON) that is not inside a figure.

    Figure dicts are accepted whole (their provenance sub-dicts may hold numbers such as
    intervals). Keys in :data:`STRUCTURAL_KEYS` are skipped. Booleans are not numbers here.
    """
    found: list[Unsourced] = []
    if is_figure_json(doc):
        return found
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            if k in STRUCTURAL_KEYS:
                continue
            found.extend(find_unsourced_numbers(v, f"{path}.{k}"))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found.extend(find_unsourced_numbers(v, f"{path}[{i}]"))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        found.append(Unsourced(path, doc))
    return found


class CatalogUse(TypedDict):
    """A catalog row the plan used: its citation and which fields it read."""

    kind: str
    id: str | None
    source: str | None
    retrieved: str | None
    unverified: list[str]
    fields_used: list[str]


class ForecastCall(TypedDict):
    """One forecast the plan made (the call in words) and its error line, if any."""

    kind: str
    workload: str
    gpu: str
    call: str
    error: str | None


@dataclass
class Ledger:
    """The evidence a plan used, for the report's assumptions and provenance section.

    ``catalog`` maps ``"kind/id"`` to the row summary (source, retrieved, unverified
    fields and which fields were used); ``measurements`` maps run ids to what was read;
    ``calibration`` describes the artifact; ``forecasts`` lists the forecast calls.
    """

    catalog: dict[str, CatalogUse] = field(default_factory=dict)
    measurements: dict[str, FigureDict] = field(default_factory=dict)
    calibration: FigureDict = field(default_factory=dict)
    forecasts: list[ForecastCall] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def use_row(
        self,
        row_kind: str,
        row: object,
        fields: Iterable[str] = (),
    ) -> None:
        """Record that fields of a catalog row were used."""
        key = f"{row_kind}/{getattr(row, 'id', '?')}"
        entry = self.catalog.setdefault(
            key,
            {
                "kind": row_kind,
                "id": getattr(row, "id", None),
                "source": getattr(row, "source", None),
                "retrieved": _str_or_none(getattr(row, "retrieved", None)),
                "unverified": list(getattr(row, "unverified", None) or []),
                "fields_used": [],
            },
        )
        for f in fields:
            if f not in entry["fields_used"]:
                entry["fields_used"].append(f)

    def to_json(self) -> FigureDict:
        return {
            "catalog_rows": [self.catalog[k] for k in sorted(self.catalog)],
            "measurements": [{"run_id": k, **v} for k, v in sorted(self.measurements.items())],
            "calibration": self.calibration,
            "forecasts": self.forecasts,
            "notes": self.notes,
        }


def _str_or_none(x: object) -> str | None:
    return None if x is None else str(x)


def figure_from_json(obj: Mapping[str, Any]) -> Figure:
    """The :class:`Figure` back from its JSON form (the report derives a few figures of its
    summary from the plan document's figures)."""
    p = obj["provenance"]
    prov = Provenance(
        p["kind"],
        p.get("ref", ""),
        source=p.get("source"),
        retrieved=p.get("retrieved"),
        unverified=bool(p.get("unverified")),
        formula=p.get("formula"),
        inputs=tuple(p.get("inputs") or ()),
    )
    iv = obj.get("interval")
    interval = (iv[0], iv[1]) if iv and None not in iv else None
    return Figure(obj["value"], obj["unit"], obj["label"], prov, interval, obj.get("missing"))


def _path_roots() -> list[tuple[str, str]]:
    """(absolute prefix, what replaces it), longest first: the package's own files, the
    working directory, the home directory."""
    import os
    from pathlib import Path

    package_parent = str(Path(__file__).resolve().parents[2])
    roots = [(package_parent + os.sep + "gpuplan" + os.sep, "gpuplan" + os.sep)]
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    if cwd and cwd != os.sep:
        roots.append((cwd + os.sep, ""))
    home = os.path.expanduser("~")
    if home and home != os.sep:
        roots.append((home + os.sep, "~" + os.sep))
    return sorted(set(roots), key=lambda r: len(r[0]), reverse=True)


_ABS_PATH = re.compile(r"(?<![\w.:/~-])(/(?:[\w.+@-]+/)+)([\w.+@-]+)")


def portable_text(text: str) -> str:
    """``text`` with every absolute local path made relative: to the package
    (``gpuplan/calibration/...``), to the working directory, to the home directory
    (``~/...``); any other absolute path that exists on this machine keeps only its file
    name (``.../name``). A report travels to people who do not share this disk.

    >>> portable_text("see /nonexistent-dir/x.json and https://example.com/a/b")
    'see /nonexistent-dir/x.json and https://example.com/a/b'
    """
    import os

    if os.sep not in text:
        return text
    for prefix, repl in _path_roots():
        text = text.replace(prefix, repl)

    def other(m: re.Match[str]) -> str:
        return f".../{m.group(2)}" if os.path.exists(m.group(0)) else m.group(0)

    return _ABS_PATH.sub(other, text)
