"""The report's one section model: typed records built once from the plan document.

:func:`build_sections` turns the plan JSON into a list of :class:`Section` records (the
header, the summary, the constraints, ... the figures appendix). Both renderers walk the
same records: the HTML through the Jinja2 template ``templates/report.html.j2`` (which
holds the page's style and the walk, no content of its own) and the Markdown through
:func:`gpuplan.report.render.render_markdown`. What the report says is therefore written
once, here; a renderer decides only how a record looks.

Content is a tuple of :class:`Inline` pieces: constant text, a figure (printed with its
reference number into the figures appendix), a text-with-figures, a name from the catalog
or the scenario (``ident``), provenance metadata (``meta``), an index (``idx``) and a few
markup pieces (``code``, ``strong``, ``span``, ``link``, ``br``). In the HTML every piece
that can show a number carries a ``data-kind`` attribute (DESIGN.md section 4, "every
number has its source").

The option tables are built generically where the plan document grows (storage tiers,
purchasing-model costs): a field of a storage tier or a cost entry that the builder has
no label for still appears, under its field name (:func:`_extra_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpuplan.plan.provenance import is_figure_json, is_text_json

if TYPE_CHECKING:
    from gpuplan.report.view import FigureIndex

InlineKind = Literal[
    "text", "fig", "figvalue", "textjson", "ident", "meta", "idx", "code", "strong", "span",
    "link", "br",
]  # fmt: skip


@dataclass(frozen=True)
class Inline:
    """One piece of content.

    ``value`` is the text, or the figure / text JSON for ``fig``, ``figvalue`` (a figure's
    value without its reference, for the appendix) and ``textjson``. ``data_kind`` names
    where an ``ident`` comes from (label, input, forecast, ...); ``css`` is the class of a
    ``span`` (or of a span around an ``ident`` or ``meta``) or the target of a ``link``;
    ``md_code`` prints an ``ident`` as code in the Markdown.
    """

    kind: InlineKind
    value: Any = None
    data_kind: str = "label"
    css: str = ""
    md_code: bool = False


Content = tuple[Inline, ...]


@dataclass(frozen=True)
class Paragraph:
    """A paragraph (``tag`` ``p``) or a block of text (``div``); ``html_only`` for pieces
    that mean nothing without the page's colours (the legend)."""

    content: Content
    css: str = ""
    id: str = ""
    tag: Literal["p", "div"] = "p"
    html_only: bool = False


@dataclass(frozen=True)
class BulletList:
    items: tuple[Content, ...]
    id: str = ""


@dataclass(frozen=True)
class Cell:
    content: Content
    header: bool = False
    colspan: int = 1


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    css: str = ""
    id: str = ""


@dataclass(frozen=True)
class Table:
    """A table. Without ``columns`` it is a key-value table whose rows start with a header
    cell; ``caption`` names it (the Markdown prints it as the header of such a table; the
    HTML, whose heading already names it, does not)."""

    columns: tuple[Content, ...]
    rows: tuple[Row, ...]
    caption: str = ""
    css: str = ""


@dataclass(frozen=True)
class Chart:
    """A chart of :func:`gpuplan.report.charts.all_charts` by key (HTML only: a PNG);
    ``missing`` is said in its place when the plan has nothing to chart."""

    key: str
    id: str
    alt: str
    missing: Paragraph | None = None


@dataclass(frozen=True)
class Nav:
    """The page's table of contents (HTML only)."""

    links: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Section:
    """A part of the report with its title and, in order, its blocks and sub-sections.

    ``tag`` is the element that holds it in the HTML (``section``, ``article``, ``div``,
    ``details`` whose title is its summary line, ``header``, or ``""`` for none); ``level``
    the heading level (1 to 4); ``nav`` the label of a top-level section in the table of
    contents.
    """

    title: Content
    level: int
    body: tuple[Block, ...] = ()
    id: str = ""
    tag: Literal["section", "article", "div", "details", "header", ""] = "section"
    css: str = ""
    title_id: str = ""
    open: bool = False
    nav: str = ""

    @property
    def children(self) -> list[Section]:
        return [b for b in self.body if isinstance(b, Section)]

    @property
    def paragraphs(self) -> list[Paragraph]:
        return [b for b in self.body if isinstance(b, Paragraph)]

    @property
    def tables(self) -> list[Table]:
        return [b for b in self.body if isinstance(b, Table)]

    @property
    def figures(self) -> list[Chart]:
        return [b for b in self.body if isinstance(b, Chart)]

    @property
    def notes(self) -> list[Paragraph]:
        return [p for p in self.paragraphs if "note" in p.css.split()]

    def walk(self) -> Iterable[Section]:
        yield self
        for c in self.children:
            yield from c.walk()


Block = Paragraph | BulletList | Table | Chart | Nav | Section


# ------------------------------------------------------------------ content helpers


def T(text: str) -> Inline:
    """Constant text of the report."""
    return Inline("text", text)


def F(fig: Any) -> Inline:
    """A figure (or ``-`` when absent)."""
    return Inline("fig", fig)


def X(text_json: Any) -> Inline:
    return Inline("textjson", text_json)


def I(value: Any, kind: str = "label", *, md_code: bool = False) -> Inline:  # noqa: E743
    """A name or sentence built from catalog ids and scenario names."""
    return Inline("ident", value, data_kind=kind, md_code=md_code)


def M(value: Any) -> Inline:
    """Provenance metadata: dates, paths, hashes, URLs, line references."""
    return Inline("meta", value)


def N(value: Any) -> Inline:
    """An index or a count of the report's own parts."""
    return Inline("idx", value)


BR = Inline("br")


def c(*pieces: Inline | str) -> Content:
    """Content from pieces; a plain string is constant text."""
    return tuple(T(p) if isinstance(p, str) else p for p in pieces)


def value(v: Any) -> Inline:
    """A value of a key-value row: a figure, a text with figures, or a name."""
    if is_figure_json(v):
        return F(v)
    if is_text_json(v):
        return X(v)
    return I(v)


def kv(items: Iterable[tuple[Any, Any]], caption: str = "") -> Table:
    """A key-value table; rows whose value is absent are left out."""
    rows = tuple(
        Row((Cell(c(label), header=True), Cell((value(v),)))) for label, v in items if v is not None
    )
    return Table((), rows, caption=caption, css="kv")


#: A table row as :func:`table` takes it: cells, content or single pieces.
RowLike = Sequence[Content | Cell | Inline]


def table(
    columns: Sequence[Content | str],
    rows: Iterable[RowLike],
    *,
    css: str = "",
    caption: str = "",
) -> Table:
    cols = tuple(c(x) if isinstance(x, str) else x for x in columns)
    out = []
    for r in rows:
        cells = []
        for x in r:
            if isinstance(x, Cell):
                cells.append(x)
            elif isinstance(x, Inline):
                cells.append(Cell((x,)))
            else:
                cells.append(Cell(tuple(x)))
        out.append(Row(tuple(cells)))
    return Table(cols, tuple(out), caption=caption, css=css)


def note(*pieces: Inline | str, css: str = "note", id: str = "") -> Paragraph:
    return Paragraph(c(*pieces), css=css, id=id)


def para(*pieces: Inline | str, css: str = "", id: str = "") -> Paragraph:
    return Paragraph(c(*pieces), css=css, id=id)


def joined(items: Iterable[Content], sep: Inline | str) -> Content:
    out: list[Inline] = []
    for i, item in enumerate(items):
        if i:
            out.append(T(sep) if isinstance(sep, str) else sep)
        out.extend(item)
    return tuple(out)


def _get(d: Mapping[str, Any] | None, key: str) -> Any:
    return None if d is None else d.get(key)


def _label(key: str) -> str:
    return key.replace("_", " ")


#: The order of the cost table's purchasing models; models the plan prices beyond these
#: follow them in the order the options list them.
MODELS = ("on_demand", "reserved_1y", "reserved_3y", "spot", "onprem")


def _models(doc: dict[str, Any]) -> list[str]:
    seen = list(MODELS)
    for o in doc["options"]:
        seen += [m for m in o.get("costs") or {} if m not in seen]
    return seen


def _model_label(model: str) -> str:
    from gpuplan.plan.cost import MODEL_LABEL

    return MODEL_LABEL.get(model, model)


def _extra_columns(
    rows: Sequence[Mapping[str, Any]], known: Iterable[str], hidden: Iterable[str] = ()
) -> list[str]:
    """Figure fields of ``rows`` (in first-seen order) that the builder has no column for
    and does not leave out on purpose (``hidden``): a figure another part adds to the plan
    document later still reaches the report, under its field name."""
    seen = set(known) | set(hidden)
    out: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k not in seen and k not in out and is_figure_json(v):
                out.append(k)
    return out


# ------------------------------------------------------------------ the sections


def build_sections(doc: dict[str, Any], index: FigureIndex | None = None) -> list[Section]:
    """The report of a plan document, as sections in reading order (the header first).

    ``index`` numbers the figures (:class:`gpuplan.report.view.FigureIndex`, whose
    ``view`` is the summary); the renderers pass theirs so that the references they print
    and the figures appendix agree.
    """
    if index is None:
        from gpuplan.report.view import FigureIndex

        index = FigureIndex(doc)
    view = index.view
    parts = [
        _summary(doc, view),
        _constraints(doc, view),
        _ranking(doc),
        _costs(doc),
        _options(doc),
        _sensitivity(doc),
        _time_to_train(doc),
        _trial_node(doc),
        _calibration(doc),
    ]
    if doc.get("shared_cluster") is not None:
        parts.append(_shared_cluster(doc))
    parts += [_inputs(doc), _provenance(doc), _figures(index)]
    return [_header(doc, parts), *parts]


def _header(doc: dict[str, Any], parts: list[Section]) -> Section:
    sc = doc["scenario"]
    body: list[Block] = []
    if sc.get("description"):
        body.append(para(I(sc["description"], "input")))
    body.append(
        note(
            "Scenario ",
            M(sc["path"]),
            " (sha256 ",
            M(sc["sha256"][:12]),
            "), gpuplan ",
            M(doc["gpuplan_version"]),
            ", created ",
            M(doc["created_at"]),
            ". Every number links to its entry in the ",
            Inline("link", "Figures", css="#figures"),
            " appendix (hover for its provenance); ",
            Inline("span", "†", css="unv"),
            " marks catalog values that still lack a primary source.",
        )
    )
    body.append(
        Paragraph(
            (
                Inline("span", "input", css="k-input"),
                Inline("span", "catalog", css="k-catalog"),
                Inline("span", "measured", css="k-measurement"),
                Inline("span", "forecast / calibration", css="k-forecast"),
                Inline("span", "derived"),
            ),
            css="legend small",
            html_only=True,
        )
    )
    body.append(Nav(tuple((p.nav, f"#{p.id}") for p in parts if p.nav)))
    return Section(
        c("Capacity plan: ", I(sc["name"], "input")), 1, tuple(body), id="top", tag="header"
    )


def _summary(doc: dict[str, Any], sv: dict[str, Any]) -> Section:
    body: list[Block] = [
        Paragraph(
            (X(sv["headline"]),),
            css="headline" + ("" if doc["summary"]["feasible"] else " bad"),
            id="headline",
            tag="div",
        )
    ]
    rec = sv["recommended"]
    if rec:
        money_title = "Cost of ownership" if rec["purchasing_model"] == "onprem" else "Cost"
        body.append(
            Section(
                (),
                3,
                (
                    Section(
                        c("Recommendation"),
                        3,
                        (kv(sv["facts"], "recommendation"),),
                        id="summary-recommendation",
                        tag="div",
                    ),
                    Section(
                        c(money_title),
                        3,
                        (kv(sv["money"], "cost"),),
                        id="summary-money",
                        tag="div",
                    ),
                ),
                tag="div",
                css="cols",
            )
        )
        size: list[Block] = []
        if sv.get("binding"):
            size.append(
                para(
                    "Binding constraint: ",
                    I(sv["binding"], "input", md_code=True),
                    ".",
                    id="summary-binding",
                )
            )
        size.append(BulletList(tuple((X(t),) for t in sv["sized_by"])))
        if sv["ruled_out"]:
            size.append(
                para(
                    "Ruled out by: ",
                    *joined(
                        (
                            c(I(b["constraint"], "input"), " (", I(", ".join(b["options"])), ")")
                            for b in sv["ruled_out"]
                        ),
                        "; ",
                    ),
                    ".",
                )
            )
        risk: list[Block] = [BulletList(tuple((X(t),) for t in sv["risk"]))]
        risk.append(Section(c("Excluded"), 3, (), tag=""))
        if sv["excluded"]:
            risk.append(BulletList(tuple((I(e),) for e in sv["excluded"]), id="summary-excluded"))
        else:
            risk.append(para("Nothing the scenario's costs leave out."))
        body.append(
            Section(
                (),
                3,
                (
                    Section(c("What sets the size"), 3, tuple(size), id="summary-size", tag="div"),
                    Section(c("Risk band"), 3, tuple(risk), id="summary-risk", tag="div"),
                ),
                tag="div",
                css="cols",
            )
        )
        if sv["break_even"]:
            be = sv["break_even"]
            body.append(
                Section(
                    c("Owning vs renting: break-even utilisation"),
                    3,
                    (
                        note(
                            "Above the break-even utilisation the owned fleet is cheaper than "
                            "renting the same GPUs (",
                            I(be[0]["owned"]),
                            " against every priced cloud option with its GPU). Commitments "
                            "for one or three years are paid every hour too: against them, a "
                            "break-even below full utilisation means owning is cheaper at any "
                            "utilisation.",
                        ),
                        table(
                            (
                                "owned",
                                "cloud option",
                                "purchasing model",
                                "rented price per owned-node-hour",
                                "break-even utilisation",
                            ),
                            (
                                (
                                    I(r["owned"]),
                                    I(r["cloud"]),
                                    I(_model_label(r["purchasing_model"])),
                                    F(r["price_usd_per_node_hour"]),
                                    F(r["break_even_utilisation"]),
                                )
                                for r in be
                            ),
                            css="compact",
                        ),
                    ),
                    tag="",
                    title_id="break-even",
                )
            )
    for n in doc["summary"].get("notes") or []:
        body.append(note(I(n)))
    return Section(c("Summary"), 2, tuple(body), id="summary", nav="Summary")


def _constraints(doc: dict[str, Any], sv: dict[str, Any]) -> Section:
    body: list[Block] = []
    if sv["sized_by"]:
        head: list[Inline | str] = ["What sets the recommended fleet's size"]
        if sv.get("binding"):
            head += [" (binding: ", I(sv["binding"], "input", md_code=True), ")"]
        head.append(":")
        body.append(para(*head))
        body.append(BulletList(tuple((X(t),) for t in sv["sized_by"])))
    bc = doc["summary"]["binding_constraints"]
    if bc:
        body.append(para("These constraints rule out the options listed:"))
        body.append(
            table(
                ("constraint", "options ruled out", "for example"),
                (
                    (I(b["constraint"], "input"), I(", ".join(b["options"])), X(b["example"]))
                    for b in bc
                ),
            )
        )
    else:
        body.append(
            para(
                "No constraint rules an option out: every option that could be sized and "
                "priced meets them."
            )
        )
    return Section(c("Constraints"), 2, tuple(body), id="constraints", nav="Constraints")


def _ranking(doc: dict[str, Any]) -> Section:
    from gpuplan.plan.ranking import metric_label

    sm = doc["summary"]
    body: list[Block] = [
        para(
            "Ranked by ",
            I(sm["rank_by_label"]),
            "; each option at its cheapest purchasing model that is priced and within budget.",
        )
    ]
    if doc["ranking"]:
        rows = []
        for r in doc["ranking"]:
            metric: list[Inline] = [F(r["metric"])]
            if r["purchasing_model"] == "onprem":
                metric += [BR, Inline("ident", metric_label(sm["rank_by"], "onprem"), css="note")]
            rows.append(
                (
                    N(r["rank"]),
                    I(r["option"]),
                    I(_model_label(r["purchasing_model"])),
                    tuple(metric),
                )
            )
        body.append(table(("rank", "option", "purchasing model", c(I(sm["rank_by_label"]))), rows))
    else:
        body.append(para("No option could be ranked."))
    if doc["unranked"]:
        body.append(
            Section(
                c("Not ranked"),
                3,
                (
                    BulletList(
                        tuple(c(I(u["option"]), ": ", X(u["reason"])) for u in doc["unranked"])
                    ),
                ),
                tag="",
            )
        )
    return Section(c("Ranking"), 2, tuple(body), id="ranking", nav="Ranking")


def _costs(doc: dict[str, Any]) -> Section:
    rank_by = doc["summary"]["rank_by"]
    models = _models(doc)

    def cell(o: dict[str, Any], m: str) -> Content:
        cost = (o.get("costs") or {}).get(m)
        if not cost:
            return ()
        if rank_by == "run":
            return (F(cost.get("all_runs_usd")),)
        if rank_by == "month":
            return (F(cost.get("per_month_usd")),)
        return joined(
            ((F(v),) for v in (cost.get("per_million_output_tokens_usd") or {}).values()), " "
        )

    return Section(
        c("Costs by option and purchasing model"),
        2,
        (
            Chart(
                "cost_by_option",
                "chart-cost",
                "cost by option and purchasing model",
                missing=para("No option has a price to chart."),
            ),
            table(
                ("option", *(c(I(_model_label(m))) for m in models)),
                ((I(o["id"]), *(cell(o, m) for m in models)) for o in doc["options"]),
            ),
        ),
        id="costs",
        nav="Costs",
    )


def _options(doc: dict[str, Any]) -> Section:
    rec = doc["summary"].get("recommended")
    arts = []
    for i, o in enumerate(doc["options"], start=1):
        recommended = bool(rec) and o["id"] == rec["option"]
        arts.append(_option_article(o, i, recommended))
    return Section(c("Options"), 2, tuple(arts), id="options", nav="Options")


_TRAINING_ROWS = (
    ("gpus", "GPUs"),
    ("nodes", "nodes"),
    ("time_to_train_s", "time to train"),
    ("time_to_train_on_fabric_s", "time to train on this fabric"),
    ("tokens_per_s", "tokens/s"),
    ("mfu", "MFU"),
    ("step_time_s", "step time"),
    ("memory_per_gpu_bytes", "memory per GPU"),
    ("parallelism", "parallelism"),
    ("error", "error"),
)
_INFERENCE_ROWS = (
    ("gpus", "GPUs"),
    ("nodes", "nodes"),
    ("replicas", "replicas"),
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT"),
    ("throughput_output_tokens_per_s_per_replica", "output tokens/s per replica"),
    ("output_tokens_per_month", "output tokens per month"),
    ("sized_at", "sized at"),
    ("error", "error"),
)
_FABRIC_ROWS = (
    ("kind", "kind"),
    ("switch", "switch"),
    ("radix", "switch ports at the NIC rate"),
    ("nic", "NIC"),
    ("nics_per_node", "NICs per node"),
    ("nic_bandwidth_bits_per_s", "NIC bandwidth"),
    ("tiers", "tiers"),
    ("leaf_switches", "leaf switches"),
    ("spine_switches", "spine switches"),
    ("core_switches", "core switches"),
    ("switches", "switches"),
    ("host_links", "node-to-leaf cables"),
    ("switch_links", "switch-to-switch cables"),
    ("cables", "cables"),
    ("transceivers", "transceivers"),
    ("per_gpu_bandwidth_worst_bytes_per_s", "bandwidth per GPU, across leaves"),
    ("per_gpu_bandwidth_best_bytes_per_s", "bandwidth per GPU, within a leaf"),
    ("capex_usd", "network capex"),
    ("power_w", "network power"),
)
#: The storage tier table's columns (field, header); other fields of a tier follow them.
_TIER_COLUMNS = (
    ("tier", "tier"),
    ("provisioned_bytes", "provisioned"),
    ("read_bytes_per_s", "read"),
    ("write_bytes_per_s", "write"),
    ("checkpoint_write_s", "checkpoint write"),
    ("usd_per_month", "per month"),
    ("fits", "fits"),
    ("sized_by", "sized by"),
)
#: Fields of the option's storage in its key-value table (other figure fields follow).
_STORAGE_KNOWN = (
    "capacity_bytes",
    "read_bytes_per_s",
    "checkpoint_write_bytes_per_s",
    "checkpoint_write_s",
    "restart_read_s",
)
#: Fields of a storage tier the table leaves out on purpose (the tier's name says them).
_TIER_HIDDEN = ("reason", "name", "cloud", "gpudirect_storage", "appliances")
#: The costs table's columns (and fields left out); other figure fields of a cost entry
#: follow them.
_COST_KNOWN = (
    "model",
    "notes",
    "per_run_usd",
    "price_usd_per_node_hour",
    "all_runs_usd",
    "per_month_usd",
    "per_million_output_tokens_usd",
    "reliability",
    "price_age",
    # in per_month_usd (an input of its provenance); the tier's month is in the option's
    # storage section and the recommended option's in the summary
    "storage_usd_per_month",
)


def _option_article(o: dict[str, Any], i: int, recommended: bool) -> Section:
    head: list[Block] = []
    for b in o["binding"]:
        head.append(note("Binding ", I(b["constraint"], "input"), ": ", X(b["message"])))
    for e in o["errors"]:
        head.append(note("Error: ", I(e, "forecast")))
    for n in o["notes"]:
        head.append(note("Note: ", X(n)))
    head.append(
        note(
            "Printed: this option's fleet and costs; its fabric, storage and power are in the "
            "report on screen (the recommended option prints them all).",
            css="note print-only alt-only",
        )
    )
    parts = (
        _fleet(o),
        _fabric(o.get("fabric") or {}),
        _storage(o.get("storage") or {}),
        _power(o.get("power") or {}),
        _option_costs(o),
    )
    badge = Inline(
        "span",
        "feasible" if o["feasible"] else "infeasible",
        css="badge " + ("ok" if o["feasible"] else "no"),
    )
    return Section(
        c(I(o["label"]), " ", badge),
        3,
        (*head, Section((), 4, parts, tag="div", css="option-parts")),
        id=f"option-{i}",
        tag="article",
        css="recommended" if recommended else "alternative",
    )


def _details(title: str, css: str, body: Sequence[Block]) -> Section:
    return Section(c(title), 4, tuple(body), tag="details", css=css, open=True)


def _fleet(o: dict[str, Any]) -> Section:
    body: list[Block] = [
        kv(
            [("GPUs", o["gpus"]), ("nodes", o["nodes"]), ("GPUs per node", o["gpus_per_node"])],
            "fleet",
        )
    ]
    for t in o.get("training") or []:
        body.append(
            kv([(f"{t['name']}: {lab}", t.get(k)) for k, lab in _TRAINING_ROWS], "training")
        )
    for s in o.get("inference") or []:
        body.append(
            kv([(f"{s['name']}: {lab}", s.get(k)) for k, lab in _INFERENCE_ROWS], "serving")
        )
    return _details("Fleet", "p-fleet", body)


def _fabric(fb: dict[str, Any]) -> Section:
    body: list[Block] = []
    if "note" in fb:
        body.append(note(X(fb["note"])))
    body.append(kv([(lab, fb.get(k)) for k, lab in _FABRIC_ROWS], "fabric"))
    for chk in fb.get("communication_check") or []:
        pieces: list[Inline | str] = [
            "Communication check (",
            I(chk["workload"], "input"),
            "): ",
            I(chk["status"]),
        ]
        if "assumed_bytes_per_s" in chk:
            pieces += ["; forecast assumed ", F(chk["assumed_bytes_per_s"])]
        if "ratio" in chk:
            pieces += ["; fabric/assumed ", F(chk["ratio"])]
        if "note" in chk:
            pieces += ["; ", X(chk["note"])]
        body.append(note(*pieces))
    return _details("Fabric", "p-fabric", body)


def _storage(st: dict[str, Any]) -> Section:
    body: list[Block] = []
    if "note" in st:
        body.append(note(I(st["note"])))
    if "capacity_bytes" in st:
        body.append(
            kv(
                [
                    ("capacity needed", st["capacity_bytes"]),
                    ("sustained read", st.get("read_bytes_per_s")),
                    ("checkpoint write bandwidth", st.get("checkpoint_write_bytes_per_s")),
                    ("checkpoint write time", st.get("checkpoint_write_s")),
                    ("checkpoint read at restart", st.get("restart_read_s")),
                    ("chosen tier", st.get("chosen") or "none fits"),
                    *((_label(k), st[k]) for k in _extra_columns([st], _STORAGE_KNOWN)),
                ],
                "storage",
            )
        )
        tiers = st.get("tiers") or []
        if tiers:
            body.append(
                note(
                    "Printed: the chosen tier only; the report on screen lists all ",
                    N(len(tiers)),
                    " tiers considered.",
                    css="note print-only",
                )
            )
            extra = _extra_columns(tiers, (k for k, _ in _TIER_COLUMNS), _TIER_HIDDEN)
            rows = []
            for t in tiers:
                fits = "yes" if t.get("fits") else (t.get("reason") or "no")
                cells = [
                    Cell((I(t["tier"]),)),
                    *(
                        Cell((F(t.get(k)),))
                        for k in (
                            "provisioned_bytes",
                            "read_bytes_per_s",
                            "write_bytes_per_s",
                            "checkpoint_write_s",
                            "usd_per_month",
                        )
                    ),
                    Cell((I(fits),)),
                    Cell((I(t.get("sized_by")),)),
                    *(Cell((F(t.get(k)),)) for k in extra),
                ]
                rows.append(
                    Row(tuple(cells), css="chosen" if t["tier"] == st.get("chosen") else "other")
                )
            body.append(
                Table(
                    tuple(c(h) for _, h in _TIER_COLUMNS) + tuple(c(_label(k)) for k in extra),
                    tuple(rows),
                    css="tiers" + (" has-chosen" if st.get("chosen") else ""),
                )
            )
        ln = st.get("local_nvme")
        if ln is not None:
            body.append(
                note(
                    "Node-local NVMe (trial node fio): needs ",
                    F(ln["read_needed_per_node_bytes_per_s"]),
                    " per node, measured ",
                    F(ln["measured_read_per_node_bytes_per_s"]),
                    ": ",
                    "sufficient" if ln["local_nvme_sufficient"] else "not sufficient",
                    ".",
                )
            )
    return _details("Storage", "wide p-storage", body)


def _power(pw: dict[str, Any]) -> Section:
    body: list[Block] = []
    if "note" in pw:
        body.append(note(I(pw["note"])))
    if "node_power_w" in pw:
        body.append(
            kv(
                [
                    (f"node power ({pw.get('basis')})", pw["node_power_w"]),
                    ("nodes per rack", pw.get("nodes_per_rack")),
                    ("racks", pw.get("racks")),
                    ("racks limited by", pw.get("racks_limited_by")),
                    ("IT power", pw.get("it_power_w")),
                    ("facility power", pw.get("facility_power_w")),
                    ("floor area", pw.get("floor_area_m2")),
                    ("largest fleet within site power", pw.get("max_gpus_within_site_power")),
                ],
                "power",
            )
        )
        if "time_to_train_within_site_power" in pw:
            body.append(
                kv(list(pw["time_to_train_within_site_power"].items()), "within site power")
            )
    return _details("Power and racks", "p-power", body)


def _option_costs(o: dict[str, Any]) -> Section:
    costs: dict[str, dict[str, Any]] = o.get("costs") or {}
    extra = _extra_columns(list(costs.values()), _COST_KNOWN)
    rows: list[RowLike] = []
    for m, cst in costs.items():
        price: list[Inline] = [F(cst.get("price_usd_per_node_hour"))]
        age = cst.get("price_age") or {}
        if age.get("stale"):
            price += [
                T(" "),
                Inline("span", f"stale price (as of {age.get('as_of') or 'no date'})", css="stale"),
            ]
        mtok: list[Inline] = []
        for k, v in (cst.get("per_million_output_tokens_usd") or {}).items():
            mtok += [I(k, "input"), T(" "), F(v), BR]
        rel = cst.get("reliability") or {}
        good: list[Inline] = []
        ckpt: list[Inline] = []
        for k, r in rel.items():
            good += [I(k, "input"), T(" "), F(r.get("goodput")), BR]
            ckpt += [F(r.get("checkpoint_interval_s")), T(" / "), F(r.get("young_interval_s")), BR]
        rows.append(
            (
                I(_model_label(m)),
                tuple(price),
                F(cst.get("all_runs_usd")),
                F(cst.get("per_month_usd")),
                tuple(mtok),
                tuple(good),
                tuple(ckpt),
                *(F(cst.get(k)) for k in extra),
            )
        )
    body: list[Block] = [
        table(
            (
                "purchasing model",
                "price per node-hour",
                "all training runs",
                "per month",
                "per million output tokens",
                "goodput",
                "checkpoint interval (Daly / Young)",
                *(_label(k) for k in extra),
            ),
            rows,
        )
    ]
    tco = o.get("onprem_tco")
    if tco:
        body.append(
            kv(
                [
                    ("capex", tco.get("capex_usd")),
                    ("capex per year", tco.get("capex_per_year_usd")),
                    ("energy per year", tco.get("energy_per_year_usd")),
                    ("operations per year", tco.get("operations_per_year_usd")),
                    ("owned cost per year", tco.get("total_per_year_usd")),
                    ("owned cost per node-hour", tco.get("usd_per_node_hour")),
                    ("excludes", "; ".join(tco["excludes"]) if tco.get("excludes") else None),
                    (
                        "break-even utilisation vs "
                        + (o.get("break_even_against") or "cloud on-demand"),
                        o.get("break_even_utilisation"),
                    ),
                ],
                "owned fleet",
            )
        )
    return _details("Costs", "wide", body)


def _sensitivity(doc: dict[str, Any]) -> Section:
    sens = doc["sensitivity"]
    body: list[Block] = []
    if sens.get("per_option"):
        body.append(
            para(
                "Each option's metric when its throughput (MFU) moves to the ends of the "
                "forecast interval and beyond, and when its prices move; the rank it would "
                "then take among the others at their nominal values. The ranking is ",
                Inline("strong", "robust" if sens.get("robust") else "sensitive"),
                " to these moves.",
            )
        )
        body.append(
            table(
                (
                    "option",
                    "nominal",
                    "high MFU",
                    "low MFU",
                    "prices lower",
                    "prices higher",
                    "rank (nominal)",
                    "rank if moved",
                ),
                (
                    (
                        I(p["option"]),
                        F(p["nominal"]),
                        F(p["throughput_range"]),
                        F(p["throughput_range_high"]),
                        F(p["price_low"]),
                        F(p["price_high"]),
                        N(p["rank_nominal"]),
                        tuple(x for k, v in p["rank_if"].items() for x in (I(k), T(" "), N(v), BR)),
                    )
                    for p in sens["per_option"]
                ),
            )
        )
        body.append(
            BulletList(
                tuple(
                    c(
                        I(cs["case"], "input"),
                        ": winner ",
                        I(cs["winner"]),
                        " (the order changes)" if cs["order_changed"] else "",
                    )
                    for cs in sens.get("cases") or []
                )
            )
        )
    else:
        body.append(para("Nothing was ranked, so there is no sensitivity to show."))
    return Section(
        c("Sensitivity of the ranking"), 2, tuple(body), id="sensitivity", nav="Sensitivity"
    )


def _time_to_train(doc: dict[str, Any]) -> Section:
    body: list[Block] = [
        Chart(
            "time_to_train",
            "chart-ttt",
            "time to train vs cluster size",
            missing=para("No training workload to chart."),
        )
    ]
    for cv in doc.get("time_to_train_curves") or []:
        rows: list[RowLike] = []
        for p in cv["points"]:
            if "error" in p:
                rows.append((F(p["gpus"]), Cell((I(p["error"], "forecast"),), colspan=2)))
            else:
                rows.append((F(p["gpus"]), F(p["time_to_train_s"]), F(p["mfu"])))
        body.append(
            Section(
                c(I(cv["workload"], "input"), " on ", I(cv["gpu"])),
                3,
                (table(("GPUs", "time to train", "MFU"), rows),),
                tag="",
            )
        )
    return Section(
        c("Time to train vs cluster size"),
        2,
        tuple(body),
        id="time-to-train",
        nav="Time to train",
    )


def _trial_node(doc: dict[str, Any]) -> Section:
    tn = doc.get("trial_node")
    body: list[Block] = []
    if tn:
        body.append(
            para(
                "Probe run ",
                M(tn["run_id"]),
                " on ",
                M(tn["machine_id"]),
                " (",
                I(tn.get("accelerator_name") or tn["device"], "measurement"),
                "), file ",
                M(tn["path"]),
                ".",
            )
        )
        body.append(Chart("roofline", "chart-roofline", "measured roofline vs catalog spec"))
        spec = doc.get("roofline_spec") or {}
        rows: list[tuple[Content, ...]] = []
        for dt, fg in (tn.get("matmul_flops_per_s") or {}).items():
            sp = (F(spec["peak_flops_per_s"]),) if spec.get("dtype") == dt else ()
            rows.append((c(I(dt), " matmul"), (F(fg),), sp))
        mb = spec.get("memory_bandwidth_bytes_per_s")
        rows.append(
            (
                c("memory bandwidth"),
                (F(tn.get("memory_bandwidth_bytes_per_s")),),
                (F(mb),) if "memory_bandwidth_bytes_per_s" in spec else (),
            )
        )
        for key, label in (
            ("gpu_power_w", "GPU power under load"),
            ("storage_read_bytes_per_s", "storage sequential read (fio)"),
            ("storage_write_bytes_per_s", "storage sequential write (fio)"),
        ):
            rows.append((c(label), (F(tn.get(key)),), ()))
        body.append(table(("quantity", "measured", "catalog spec"), rows))
        if not doc.get("roofline_spec"):
            body.append(
                note("The trial device has no catalog row, so only the measured roof is drawn.")
            )
    else:
        body.append(
            para(
                "No probe run of a trial node was found. Run ",
                Inline("code", "gpuplan probe --quick"),
                " on the node, then plan again.",
            )
        )
    return Section(c("Trial node"), 2, tuple(body), id="trial-node", nav="Trial node")


def _calibration(doc: dict[str, Any]) -> Section:
    cal = doc["calibration"]
    pieces: list[Inline | str] = ["Artifact ", M(cal["artifact"])]
    if cal.get("created_at"):
        pieces += [", created ", M(cal["created_at"])]
    if "error" in cal:
        pieces += ["; ", I(cal["error"], "calibration")]
    pieces.append(".")
    body: list[Block] = [para(*pieces)]
    for gid, qs in (cal.get("devices") or {}).items():
        if isinstance(qs, dict) and "error" in qs:
            inner: tuple[Block, ...] = (note(I(qs["error"], "calibration")),)
        else:
            inner = (
                Table(
                    (),
                    tuple(
                        Row((Cell((I(q),), header=True), Cell((F(fg),)))) for q, fg in qs.items()
                    ),
                    caption="quantity",
                ),
            )
        body.append(Section(c(I(gid)), 3, inner, tag=""))
    return Section(c("Calibration"), 2, tuple(body), id="calibration", nav="Calibration")


_WAIT_KEYS = ("mean", "p50", "p95", "p99", "max")


def _shared_cluster(doc: dict[str, Any]) -> Section:
    sc = doc["shared_cluster"]
    intro: list[Inline | str] = [
        "The scenario's teams simulated with the scheduling simulator on ",
        I(sc.get("cluster", "the fleet")),
    ]
    if "cluster_gpus" in sc:
        intro += [" (", F(sc["cluster_gpus"]), ")"]
    if "jobs" in sc:
        intro += [": ", F(sc["jobs"]), " drawn from the teams' arrival rates, sizes and durations"]
    intro.append(
        ". The planned training run is not among them unless a team lists it under its "
        "training jobs."
    )
    body: list[Block] = [para(*intro)]
    if "error" in sc:
        body.append(note(I(sc["error"], "derived")))
    if "policies" in sc:
        rows: list[RowLike] = []
        for p in sc["policies"]:
            name = c(
                I(p["policy"]), " (scenario)" if p["policy"] == sc.get("scenario_policy") else ""
            )
            if "error" in p:
                rows.append((name, Cell((I(p["error"], "derived"),), colspan=7)))
            else:
                w, j = p.get("wait_s") or {}, p.get("jct_s") or {}
                rows.append(
                    (
                        name,
                        F(p.get("utilization")),
                        F(w.get("p50")),
                        F(w.get("p95")),
                        F(w.get("p99")),
                        F(j.get("p50")),
                        F(j.get("p95")),
                        F(p.get("starved_jobs_count")),
                    )
                )
        body.append(
            table(
                (
                    "policy",
                    "GPU utilisation",
                    "wait p50",
                    "wait p95",
                    "wait p99",
                    "job time p50",
                    "job time p95",
                    "starved jobs",
                ),
                rows,
            )
        )
        with_teams = [p for p in sc["policies"] if "per_team_wait_s" in p]
        teams = list(dict.fromkeys(t for p in with_teams for t in p["per_team_wait_s"]))
        body.append(
            Section(
                c("Wait per team (p95)"),
                3,
                (
                    table(
                        ("policy", *(c(I(t, "input")) for t in teams)),
                        (
                            (
                                I(p["policy"]),
                                *(F(p["per_team_wait_s"].get(t, {}).get("p95")) for t in teams),
                            )
                            for p in with_teams
                        ),
                    ),
                ),
                tag="",
            )
        )
    every = _flat(
        {
            k: v
            for k, v in sc.items()
            if k not in ("wait_vs_size", "smallest_cluster", "reference_curve")
        }
    )
    if every:
        body.append(
            Section(
                c("Every figure of the simulation, by policy"),
                4,
                (
                    Table(
                        (),
                        tuple(
                            Row((Cell((I(k),), header=True), Cell((value(v),)))) for k, v in every
                        ),
                        caption="figure",
                    ),
                ),
                tag="details",
                css="wide",
            )
        )
    if "wait_vs_size" in sc:
        body.append(_wait_vs_size(sc))
    if "reference_curve" in sc:
        body.append(_reference_curve(sc["reference_curve"]))
    return Section(c("Shared cluster"), 2, tuple(body), id="shared-cluster", nav="Shared cluster")


def _flat(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` of every figure and scalar under ``obj``; a list item is named by its
    ``policy`` (or its position)."""
    if is_figure_json(obj) or not isinstance(obj, (dict, list)):
        return [(path, obj)]
    out: list[tuple[str, Any]] = []
    items = (
        obj.items()
        if isinstance(obj, dict)
        else (
            (str(v.get("policy", i)) if isinstance(v, dict) else str(i), v)
            for i, v in enumerate(obj)
        )
    )
    for k, v in items:
        if isinstance(obj, list):
            sub = f"{k}:"  # the item's name stands for the list's
        else:
            sub = f"{path} {_label(str(k))}".strip()
        if isinstance(obj, dict) and k == "policy" and path:
            continue  # the item's name
        out.extend(_flat(v, sub))
    return out


def _wait_cells(pt: dict[str, Any]) -> list[Inline]:
    return [
        F(pt.get("gpus")),
        F(pt.get("nodes")),
        F(pt.get("utilization")),
        *(F((pt.get("wait_s") or {}).get(k)) for k in _WAIT_KEYS),
    ]


_WAIT_HEAD = ("GPUs", "nodes", "GPU utilisation", *(f"wait {k}" for k in _WAIT_KEYS))


def _wait_vs_size(sc: dict[str, Any]) -> Section:
    w = sc["wait_vs_size"]
    curves = w.get("curves") or []
    cteams = list(
        dict.fromkeys(
            t
            for cv in curves
            if "points" in cv
            for pt in cv["points"]
            for t in pt["per_team_p95_wait_s"]
        )
    )
    body: list[Block] = [
        para(
            "The same jobs simulated on smaller and larger clusters of the same nodes (teams' "
            "mean GPU demand ",
            F(w.get("mean_demand_gpus")),
            "), under the scenario's policy and under strict FIFO, whose waits never grow "
            "with the cluster. Sizes: ",
            I(w.get("sizes_from")),
            ".",
        ),
        Chart(
            "shared_wait_vs_size", "chart-shared-wait", "the teams' queueing wait vs cluster size"
        ),
    ]
    for cv in curves:
        inner: tuple[Block, ...]
        if "error" in cv:
            inner = (note(I(cv["error"], "derived")),)
        else:
            inner = (
                table(
                    (*_WAIT_HEAD, "starved jobs", *(c(I(t, "input"), " wait p95") for t in cteams)),
                    (
                        (
                            *_wait_cells(pt),
                            F(pt.get("starved_jobs_count")),
                            *(F(pt["per_team_p95_wait_s"].get(t)) for t in cteams),
                        )
                        for pt in cv["points"]
                    ),
                ),
            )
        body.append(
            Section(
                c(I(cv["policy"]), " (scenario)" if cv.get("scenario_policy") else ""),
                4,
                inner,
                tag="",
            )
        )
    if "smallest_cluster" in sc:
        body.append(_smallest_cluster(sc["smallest_cluster"]))
    return Section(c("Wait vs cluster size"), 3, tuple(body), id="wait-vs-size")


def _smallest_cluster(sm: dict[str, Any]) -> Section:
    body: list[Block] = [
        para(
            "Target ",
            F(sm["target_p95_wait_s"]),
            " on each team's p95 wait under ",
            I(sm["policy"]),
            " (bisection over node counts; it assumes more nodes never lengthen the p95 wait, "
            "which holds for strict FIFO and usually, not always, for the other policies).",
        )
    ]
    if "error" in sm:
        body.append(note(I(sm["error"], "derived")))
    else:
        miss = Cell(c("not met up to ", F(sm.get("largest_size_tried_gpus"))), colspan=2)
        rows: list[RowLike] = []
        whos: list[tuple[Inline | str, Any]] = [("every team", sm.get("overall"))]
        whos += [(I(t, "input"), e) for t, e in (sm.get("per_team") or {}).items()]
        for who, e in whos:
            name = c(who)
            rows.append((name, F(e["gpus"]), F(e["nodes"])) if e else (name, miss))
        body.append(table(("for", "GPUs", "nodes"), rows))
        if sm.get("overall"):
            body.append(
                note(
                    "At that size, p95 wait per team: ",
                    *joined(
                        (
                            c(I(t, "input"), " ", F(v))
                            for t, v in sm["overall"]["per_team_p95_wait_s"].items()
                        ),
                        "; ",
                    ),
                    ".",
                )
            )
    return Section(c("Smallest cluster meeting the p95 wait target"), 4, tuple(body), tag="")


def _reference_curve(ref: dict[str, Any]) -> Section:
    intro: list[Inline | str] = [
        "The wait-vs-size curve of a real multi-tenant GPU cluster's jobs (trace ",
        I(ref["trace"], "input"),
        ", policy ",
        I(ref["policy"]),
    ]
    if "mean_demand_gpus" in ref:
        intro += [", mean GPU demand ", F(ref["mean_demand_gpus"])]
    intro.append("), to set the teams' curve against.")
    body: list[Block] = [
        para(*intro),
        note("Data: ", M(ref["attribution"]), css="note citation", id="reference-citation"),
    ]
    if "error" in ref:
        body.append(note(I(ref["error"], "derived")))
    else:
        body.append(
            Chart(
                "reference_wait_vs_size",
                "chart-philly-wait",
                "Philly trace queueing wait vs cluster size",
            )
        )
        body.append(
            table(
                (*_WAIT_HEAD, "jobs simulated", "starved jobs"),
                (
                    (*_wait_cells(pt), F(pt.get("jobs_simulated")), F(pt.get("starved_jobs_count")))
                    for pt in ref["points"]
                ),
            )
        )
    return Section(c("Reference: the Microsoft Philly trace"), 3, tuple(body), id="reference-curve")


def _inputs(doc: dict[str, Any]) -> Section:
    rows = []
    for fg in doc["inputs"]:
        where: list[Inline | str] = [M(fg["provenance"]["ref"])]
        if "source" in fg["provenance"]:
            where += ["; source ", M(fg["provenance"]["source"])]
        rows.append((I(fg["label"], "input"), F(fg), c(*where)))
    return Section(
        c("Inputs"),
        2,
        (
            para(
                "Every scenario value the plan used, with the file line it came from (defaults "
                'of the scenario schema are marked "default").'
            ),
            table(("input", "value", "where"), rows),
        ),
        id="inputs",
        nav="Inputs",
    )


def _provenance(doc: dict[str, Any]) -> Section:
    pv = doc["provenance"]
    rows_ = pv["catalog_rows"]
    cat = table(
        ("row", "fields used", "source", "retrieved", "unverified fields"),
        (
            (
                M(f"{r['kind']}/{r['id']}"),
                M(", ".join(r["fields_used"])),
                M(r["source"]),
                M(r["retrieved"]),
                (Inline("meta", ", ".join(r["unverified"]), css="unv"),)
                if r["unverified"]
                else c("-"),
            )
            for r in rows_
        ),
    )
    body: list[Block] = [
        Section(
            c("Catalog rows used"),
            3,
            (
                Section(
                    c(
                        N(len(rows_)),
                        " catalog rows, each with its source and date (open to read or to print them)",
                    ),
                    4,
                    (cat,),
                    id="catalog-rows",
                    tag="details",
                ),
            ),
            tag="",
        )
    ]
    ms = pv["measurements"]
    mblock: Block
    if ms:
        items = []
        for m in ms:
            acc: list[Inline | str] = [", ", M(m["accelerator"])] if m.get("accelerator") else []
            items.append(
                c(
                    "run ",
                    M(m["run_id"]),
                    " (",
                    M(m.get("device")),
                    *acc,
                    ") from ",
                    M(m["path"]),
                    ", started ",
                    M(m["started_at"]),
                )
            )
        mblock = BulletList(tuple(items))
    else:
        mblock = para("No measurement of a trial node was used.")
    body.append(Section(c("Measurements"), 3, (mblock,), tag=""))
    pc = pv["calibration"]
    cal: list[Inline | str] = [M(pc["artifact"])]
    if pc.get("training_data_sha256"):
        cal += ["; training data sha256 ", M(pc["training_data_sha256"])]
    body.append(Section(c("Calibration"), 3, (para(*cal),), tag=""))
    fc_items = tuple(
        c(M(fc["call"]), *((": error ", M(fc["error"])) if fc.get("error") else ()))
        for fc in pv["forecasts"]
    )
    fc_body: list[Block] = [BulletList(fc_items)]
    if pv.get("notes"):
        fc_body.append(BulletList(tuple((M(n),) for n in pv["notes"])))
    body.append(Section(c("Forecasts"), 3, tuple(fc_body), tag=""))
    return Section(
        c("Assumptions and provenance"), 2, tuple(body), id="provenance", nav="Provenance"
    )


def _figures(index: FigureIndex) -> Section:
    from gpuplan.report.view import prov_text

    rows = tuple(
        Row(
            (
                Cell((N(i),)),
                Cell((I(f["label"], f["provenance"]["kind"]),)),
                Cell((Inline("figvalue", f),)),
                Cell((I(f["provenance"]["kind"]),)),
                Cell((M(prov_text(f)),)),
            ),
            id=f"fig-{i}",
        )
        for i, f in enumerate(index.entries, start=1)
    )
    appendix = Section(
        c(
            "Every number of this report (",
            N(len(index.entries)),
            " figures) with where it comes from; open to read or to print it",
        ),
        3,
        (
            para("Derived figures name their formula and the figures they were computed from."),
            Table(
                tuple(c(h) for h in ("#", "figure", "value", "kind", "provenance")),
                rows,
                css="figures",
            ),
        ),
        id="figures-appendix",
        tag="details",
    )
    return Section(c("Figures"), 2, (appendix,), id="figures", nav="Figures")


__all__ = [
    "Block",
    "BulletList",
    "Cell",
    "Chart",
    "Content",
    "Inline",
    "Nav",
    "Paragraph",
    "Row",
    "Section",
    "Table",
    "build_sections",
]
