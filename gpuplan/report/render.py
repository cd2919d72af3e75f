"""Render a plan (its JSON document) as a self-contained HTML report and as Markdown.

Both renderers read the plan JSON only, and both walk the same sections
(:func:`gpuplan.report.sections.build_sections`): the HTML through the Jinja2 template, the
Markdown through :func:`render_markdown`'s walker; neither holds report content of its
own. This module keeps what the sections are built from (the figure index, the summary
view, the break-even rows) and the two renderers. Every figure is printed with a reference
number ``[n]`` into the *Figures* appendix, which lists its provenance (input line, catalog row
with source and date, calibration basis, measurement run, forecast, or the formula of a
derived figure and the figures it used). In the HTML, every element that shows a number
carries a ``data-kind`` attribute naming where the number comes from; the tests walk the
rendered DOM and fail on any number outside such an element.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.plan.provenance import format_number, is_figure_json, is_text_json, portable_text
from gpuplan.report.sections import (
    BulletList,
    Content,
    Inline,
    Paragraph,
    Section,
    Table,
    build_sections,
)

REPORT_FILES = {"html": "report.html", "md": "report.md", "json": "plan.json"}


# ------------------------------------------------------------------ figure index


def _walk_figures(obj: Any) -> Iterator[dict[str, Any]]:
    if is_figure_json(obj):
        yield obj
        return
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk_figures(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk_figures(v)


def _key(f: dict[str, Any]) -> str:
    return json.dumps(f, sort_keys=True, default=str)


class FigureIndex:
    """Numbers every distinct figure of a plan document, in document order: the summary's
    (:func:`summary_view`, kept as ``view``) first, as the report shows them."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._num: dict[str, int] = {}
        self.entries: list[dict[str, Any]] = []
        self.view = summary_view(doc)
        for f in _walk_figures([self.view, doc]):
            k = _key(f)
            if k not in self._num:
                self._num[k] = len(self.entries) + 1
                self.entries.append(f)

    def num(self, f: dict[str, Any]) -> int:
        k = _key(f)
        if k not in self._num:  # a figure built after indexing (should not happen)
            self._num[k] = len(self.entries) + 1
            self.entries.append(f)
        return self._num[k]


#: a missing figure whose reason starts so prints the short text instead of "missing"
#: (storage tiers: gpuplan.plan.storage.missing_price_reason)
MISSING_SHORT = (
    ("price not published", "price not published"),
    ("price not in the catalog", "price not in catalog"),
)


def fmt(f: Any) -> str:
    """Display text of a figure's value (with its interval)."""
    if not is_figure_json(f):
        return "-" if f is None else str(f)
    if f.get("value") is None:
        why = str(f.get("missing") or "")
        return next((short for head, short in MISSING_SHORT if why.startswith(head)), "missing")
    text = format_number(f["value"], f["unit"])
    iv = f.get("interval")
    if iv and None not in iv and format_number(iv[0], f["unit"]) != format_number(iv[1], f["unit"]):
        text += f" ({format_number(iv[0], f['unit'])} to {format_number(iv[1], f['unit'])})"
    return text


def prov_text(f: dict[str, Any]) -> str:
    """One-line provenance of a figure."""
    p = f["provenance"]
    parts = [f"{p['kind']}: {p.get('ref', '')}"]
    if p.get("formula"):
        parts.append(f"= {p['formula']}")
    if p.get("inputs"):
        parts.append("from " + ", ".join(p["inputs"]))
    if p.get("source"):
        parts.append(f"source {p['source']}")
    if p.get("retrieved"):
        parts.append(f"retrieved {p['retrieved']}")
    if p.get("unverified"):
        parts.append("UNVERIFIED")
    if f.get("missing"):
        parts.append(f"missing: {f['missing']}")
    return "; ".join(parts)


# ------------------------------------------------------------------ summary


def _option(doc: dict[str, Any], oid: str) -> dict[str, Any] | None:
    return next((o for o in doc["options"] if o["id"] == oid), None)


def _input(doc: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    """The plan's input figure for scenario field ``dotted`` (given or default)."""
    for f in doc.get("inputs") or []:
        ref = f["provenance"].get("ref", "")
        if ref.endswith(" " + dotted):
            return f
    return None


def _text(template: str, figs: dict[str, Any] | None = None) -> dict[str, Any]:
    from gpuplan.plan.provenance import Text, figure_from_json

    return Text(template, {k: figure_from_json(v) for k, v in (figs or {}).items()}).to_json()


def _ok(f: Any) -> bool:
    return is_figure_json(f) and isinstance(f.get("value"), (int, float))


def _deadline(doc: dict[str, Any], workload: str, gpu: str) -> dict[str, Any] | None:
    for c in doc.get("time_to_train_curves") or []:
        if c["workload"] == workload and c["gpu"] == gpu and _ok(c.get("deadline_days")):
            return c
    return None


def break_even_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Owning vs renting: every owned option's break-even utilisation against every priced
    purchasing model of every cloud option with the same GPU
    (:func:`gpuplan.plan.cost.break_even_against`), shared storage on both sides or on neither
    (:func:`gpuplan.plan.cost.storage_like_for_like`)."""
    from gpuplan.plan import cost as costmod
    from gpuplan.plan.provenance import figure_from_json

    rows = []
    for own in doc["options"]:
        tco = own.get("onprem_tco")
        if own["kind"] != "onprem" or not tco or not _ok(tco.get("total_per_year_usd")):
            continue
        total = figure_from_json(tco["total_per_year_usd"])
        own_st = tco.get("storage_in_total_per_year_usd")
        own_storage = figure_from_json(own_st) if own_st else None
        nodes = figure_from_json(own["nodes"])
        own_gpn = figure_from_json(own["gpus_per_node"])
        for cloud in doc["options"]:
            if cloud["kind"] != "cloud" or cloud["gpu"] != own["gpu"]:
                continue
            # every priced purchasing model of the cloud option, whichever the plan prices
            for model, c in (cloud.get("costs") or {}).items():
                if model == "onprem" or not c or not _ok(c.get("price_usd_per_node_hour")):
                    continue
                label = costmod.MODEL_LABEL.get(model, model)
                cloud_st = c.get("storage_usd_per_month")
                own_y, rented_st, left_out = costmod.storage_like_for_like(
                    total,
                    own_storage,
                    figure_from_json(cloud_st) if cloud_st else None,
                    cloud["id"],
                )
                price = costmod.per_owned_node_price(
                    figure_from_json(c["price_usd_per_node_hour"]),
                    figure_from_json(cloud["gpus_per_node"]),
                    own_gpn,
                    f"{cloud['id']} {label} per {own['platform']}-sized node",
                )
                rows.append(
                    {
                        "owned": own["id"],
                        "cloud": cloud["id"],
                        "purchasing_model": model,
                        "committed": model in costmod.COMMITTED,
                        "price_usd_per_node_hour": price.to_json(),
                        "break_even_utilisation": costmod.break_even_against(
                            own_y, nodes, price, rented_st, left_out
                        ).to_json(),
                    }
                )
    rows.sort(key=lambda r: (r["owned"], r["break_even_utilisation"]["value"] or 0.0))
    return rows


def summary_view(doc: dict[str, Any]) -> dict[str, Any]:
    """What the summary says, for both renderers (and the test that checks it against the
    sections below): the recommendation, what sets its size, what rules options out, the
    money (capex and yearly cost of ownership, or the rented fleet's cost), the utilisation
    assumed and the break-even against every cloud option, what is excluded, and the risk
    band (the forecast interval against the deadline, and the ranking's robustness).
    """
    from gpuplan.plan.cost import COMMITTED, MODEL_LABEL
    from gpuplan.plan.ranking import metric_label

    sm = doc["summary"]
    view: dict[str, Any] = {
        "headline": sm["headline"],
        "recommended": None,
        "facts": [],
        "sized_by": [],
        "ruled_out": sm.get("binding_constraints") or [],
        "money": [],
        "break_even": [],
        "excluded": [],
        "risk": [],
    }
    rec = sm.get("recommended")
    o = _option(doc, rec["option"]) if rec else None
    if rec is None or o is None:
        return view
    model = rec["purchasing_model"]
    owned = model == "onprem"
    mlabel = metric_label(sm["rank_by"], model)
    view["recommended"] = {"option": o["id"], "purchasing_model": model, "metric_label": mlabel}
    tco = o.get("onprem_tco") or {}
    if owned and _ok(tco.get("capex_usd")) and _ok(tco.get("total_per_year_usd")):
        view["headline"] = _text(
            f"Recommended: {o['label']}, bought: {{gpus}} on {{nodes}}; capex {{capex}}, "
            f"owned cost {{per_year}}; {mlabel}: {{metric}}",
            {
                "gpus": o["gpus"],
                "nodes": o["nodes"],
                "capex": tco["capex_usd"],
                "per_year": tco["total_per_year_usd"],
                "metric": rec["metric"],
            },
        )
    else:
        view["headline"] = _text(
            f"Recommended: {o['label']}, {MODEL_LABEL.get(model, model)}: {{gpus}} on "
            f"{{nodes}}; {mlabel}: {{metric}}",
            {"gpus": o["gpus"], "nodes": o["nodes"], "metric": rec["metric"]},
        )
    pw = o.get("power") or {}
    view["facts"] = [
        ("option", o["label"]),
        ("purchasing model", MODEL_LABEL.get(model, model)),
        ("GPUs", o["gpus"]),
        ("nodes", o["nodes"]),
        ("racks", pw.get("racks")),
        ("facility power", pw.get("facility_power_w")),
        (mlabel, rec["metric"]),
    ]
    # what sets the size
    for t in o.get("training") or []:
        c = _deadline(doc, t["name"], o["gpu"])
        if _ok(t.get("gpus")) and _ok(t.get("time_to_train_s")) and c is not None:
            view["sized_by"].append(
                _text(
                    f"{t['name']}: {{gpus}} to train within the deadline {{deadline}} "
                    "(forecast time to train {ttt})",
                    {
                        "gpus": t["gpus"],
                        "deadline": c["deadline_days"],
                        "ttt": t["time_to_train_s"],
                    },
                )
            )
    for sv in o.get("inference") or []:
        if _ok(sv.get("gpus")):
            view["sized_by"].append(
                _text(
                    f"{sv['name']}: {{gpus}} for its load and latency targets", {"gpus": sv["gpus"]}
                )
            )
    sizing = o.get("sizing")
    if sizing and sizing.get("message"):
        view["sized_by"].append(sizing["message"])
    view["binding"] = "scheduling.p95_wait_target_s" if sizing and sizing.get("binds") else None
    # money
    util = _input(doc, "costs.utilisation")
    cost = (o.get("costs") or {}).get(model) or {}
    if owned and tco:
        dep = _input(doc, "costs.depreciation_years")
        pue = _input(doc, "costs.pue")
        kwh = _input(doc, "costs.electricity_usd_per_kwh")
        capex_formula = str(((tco.get("capex_usd") or {}).get("provenance") or {}).get("formula"))
        view["money"] = [
            (
                "capex (nodes"
                + (
                    " + storage"
                    if "storage capex" in capex_formula
                    else ("" if _ok((o.get("fabric") or {}).get("capex_usd")) else " only")
                )
                + ")",
                tco.get("capex_usd"),
            ),
            ("depreciation per year", tco.get("capex_per_year_usd")),
            ("depreciation period", dep),
            ("power per year (facility power with PUE)", tco.get("energy_per_year_usd")),
            ("PUE", pue),
            ("electricity price", kwh),
            ("support, space and operations per year", tco.get("operations_per_year_usd")),
            ("owned cost per year (TCO)", tco.get("total_per_year_usd")),
            ("of which shared storage per year", tco.get("storage_in_total_per_year_usd")),
            ("utilisation assumed", util),
            (mlabel, rec["metric"]),
        ]
        view["excluded"].extend(tco.get("excludes") or [])
    else:
        view["money"] = [
            ("price per node-hour", cost.get("price_usd_per_node_hour")),
            ("fleet cost per month", cost.get("per_month_usd")),
            ("of which shared storage per month", cost.get("storage_usd_per_month")),
            ("all training runs", cost.get("all_runs_usd")),
            (
                "utilisation assumed"
                + (" (paid every hour)" if model in COMMITTED else " (not paid when idle)"),
                util,
            ),
        ]
    view["money"] = [(k, v) for k, v in view["money"] if v is not None]
    view["break_even"] = break_even_rows(doc)
    st = o.get("storage") or {}
    if "capacity_bytes" in st and not st.get("chosen"):
        view["excluded"].append("storage: no tier in the catalog fits (see the option's storage)")
    if not owned and st.get("chosen"):
        # the chosen tier's price is in the cloud cost (storage_usd_per_month) or excluded
        view["excluded"].extend(cost.get("excludes") or [])
    if not owned:
        view["excluded"].append(
            "network beyond the instances' price"
            if cost.get("storage_usd_per_month")
            else "network and storage beyond the instances' price"
        )
    # risk band
    for t in o.get("training") or []:
        ttt = t.get("time_to_train_s")
        c = _deadline(doc, t["name"], o["gpu"])
        if not _ok(ttt) or c is None or not ttt.get("interval"):
            continue
        slow_s = ttt["interval"][1]
        deadline_s = c["deadline_days"]["value"] * 86400.0
        if slow_s <= deadline_s:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; even the slow end of the forecast is "
                    "within the deadline {deadline}",
                    {"ttt": ttt, "deadline": c["deadline_days"]},
                )
            )
            continue
        safe = next(
            (
                p
                for p in c["points"]
                if "error" not in p
                and _ok(p.get("time_to_train_s"))
                and (p["time_to_train_s"].get("interval") or [p["time_to_train_s"]["value"]] * 2)[1]
                <= deadline_s
            ),
            None,
        )
        if safe is not None:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; the slow end misses the deadline "
                    "{deadline}: sized to the slow end, it needs {gpus} (time-to-train curve)",
                    {"ttt": ttt, "deadline": c["deadline_days"], "gpus": safe["gpus"]},
                )
            )
        else:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; the slow end misses the deadline "
                    "{deadline} at every size of the time-to-train curve",
                    {"ttt": ttt, "deadline": c["deadline_days"]},
                )
            )
    if _ok(rec["metric"]) and rec["metric"].get("interval"):
        view["risk"].append(
            _text(
                f"{mlabel}: {{metric}} (the forecast interval of throughput)",
                {"metric": rec["metric"]},
            )
        )
    sens = doc.get("sensitivity") or {}
    if sens.get("per_option"):
        moved = [c["case"] for c in sens.get("cases") or [] if c.get("order_changed")]
        view["risk"].append(
            "the ranking is robust to the MFU, price and utilisation moves of the sensitivity section"
            if sens.get("robust")
            else "the ranking changes when "
            + (", ".join(moved) if moved else "one option's MFU or prices move")
            + " (see the sensitivity section)"
        )
    return view


# ------------------------------------------------------------------ HTML


def _env(index: FigureIndex) -> Any:
    import jinja2
    from markupsafe import Markup, escape

    def fig_html(f: Any) -> Any:
        if f is None:
            return Markup('<span class="na">-</span>')
        if not is_figure_json(f):
            return escape(str(f))
        n = index.num(f)
        p = f["provenance"]
        cls = ["fig", f"k-{p['kind']}"]
        if p.get("unverified"):
            cls.append("unverified")
        if f.get("value") is None:
            cls.append("missing")
        full = fmt(f)
        value_text = fmt({**f, "interval": None})
        body: Any = escape(full)
        if full != value_text and full.startswith(value_text):
            body = Markup(
                f'{escape(value_text)} <span class="iv">{escape(full[len(value_text) + 1 :])}</span>'
            )
        mark = (
            Markup('<sup class="unv" title="unverified catalog value">&#8224;</sup>')
            if p.get("unverified")
            else ""
        )
        return Markup(
            f'<span class="{" ".join(cls)}" data-kind="{escape(p["kind"])}" '
            f'title="{escape(prov_text(f))}">{body}{mark}'
            f'<a class="fn" href="#fig-{n}">[{n}]</a></span>'
        )

    def fig_value_html(f: Any) -> Any:
        """A figure's value without its reference (the figures appendix)."""
        kind = escape(f["provenance"]["kind"])
        mark = Markup('<sup class="unv">&#8224;</sup>') if f["provenance"].get("unverified") else ""
        return Markup(
            f'<span class="fig k-{kind}" data-kind="{kind}">{escape(fmt(f))}{mark}</span>'
        )

    def text_html(t: Any) -> Any:
        if t is None:
            return ""
        if not is_text_json(t):
            return ident(t)
        import string

        out = []
        for literal, name, _spec, _conv in string.Formatter().parse(t["template"]):
            if literal:
                out.append(ident(literal))
            if name is not None:
                out.append(fig_html(t["figures"][name]))
        return Markup("").join(out)

    def ident(s: Any, kind: str = "label") -> Any:
        """Names and sentences built from catalog ids and scenario names."""
        if s is None:
            return ""
        return Markup(f'<span class="id" data-kind="{escape(kind)}">{escape(str(s))}</span>')

    def meta(s: Any) -> Any:
        """Provenance metadata: dates, paths, hashes, URLs, line references."""
        if s is None or s == "":
            return ""
        return Markup(f'<span class="meta" data-kind="provenance">{escape(str(s))}</span>')

    def idx(n: Any) -> Any:
        return Markup(f'<span class="idx" data-kind="index">{escape(str(n))}</span>')

    def inline_html(i: Inline) -> Any:
        k = i.kind
        if k == "text":
            return escape(i.value)
        if k == "fig":
            return fig_html(i.value)
        if k == "figvalue":
            return fig_value_html(i.value)
        if k == "textjson":
            return text_html(i.value)
        if k in ("ident", "meta"):
            inner = ident(i.value, i.data_kind) if k == "ident" else meta(i.value)
            return Markup(f'<span class="{escape(i.css)}">{inner}</span>') if i.css else inner
        if k == "idx":
            return idx(i.value)
        if k == "code":
            return Markup(f"<code>{escape(i.value)}</code>")
        if k == "strong":
            return Markup(f"<strong>{escape(i.value)}</strong>")
        if k == "link":
            return Markup(f'<a href="{escape(i.css)}">{escape(i.value)}</a>')
        if k == "br":
            return Markup("<br>")
        css = f' class="{escape(i.css)}"' if i.css else ""
        return Markup(f"<span{css}>{escape(i.value)}</span>")

    def content_html(content: Content) -> Any:
        return Markup("").join(inline_html(i) for i in content)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuplan.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["content"] = content_html
    env.filters["kind"] = lambda b: type(b).__name__
    return env


def render_html(doc: dict[str, Any], charts: dict[str, str | None] | None = None) -> str:
    """The self-contained HTML report (inline CSS and PNG charts; no scripts, no fetches):
    the template walks the sections of :func:`gpuplan.report.sections.build_sections`."""
    if charts is None:
        from gpuplan.report.charts import all_charts

        charts = all_charts(doc)
    index = FigureIndex(doc)
    sections = build_sections(doc, index)
    template = _env(index).get_template("report.html.j2")
    html = template.render(title=doc["scenario"]["name"], sections=sections, charts=charts)
    return portable_text(html)


# ------------------------------------------------------------------ Markdown


def _md_escape(s: Any) -> str:
    return re.sub(r"([|*_`\\])", r"\\\1", portable_text(str(s))).replace("\n", " ")


def render_markdown(doc: dict[str, Any]) -> str:
    """The same sections as the HTML (:func:`gpuplan.report.sections.build_sections`) as
    Markdown: figures as ``value [n]`` with the provenance appendix at the end; charts and
    the page's table of contents are HTML only."""
    index = FigureIndex(doc)
    sections = build_sections(doc, index)

    def f(x: Any) -> str:
        if x is None:
            return "-"
        if not is_figure_json(x):
            return _md_escape(x)
        n = index.num(x)
        dag = "†" if x["provenance"].get("unverified") else ""
        return f"{_md_escape(fmt(x))}{dag} [{n}]"

    def t(x: Any) -> str:
        if x is None:
            return ""
        if not is_text_json(x):
            return _md_escape(x)
        import string

        out = []
        for literal, name, _s, _c in string.Formatter().parse(x["template"]):
            out.append(_md_escape(literal))
            if name is not None:
                out.append(f(x["figures"][name]))
        return "".join(out)

    def inline(i: Inline) -> str:
        k = i.kind
        if k == "fig":
            return f(i.value)
        if k == "figvalue":
            dag = "†" if i.value["provenance"].get("unverified") else ""
            return _md_escape(fmt(i.value)) + dag
        if k == "textjson":
            return t(i.value)
        if k == "code" or (k == "ident" and i.md_code):
            return f"`{portable_text(str(i.value))}`"
        if k == "strong":
            return f"**{_md_escape(i.value)}**"
        if k == "br":
            return "; "
        if i.value is None or i.value == "":
            return ""
        return _md_escape(i.value)

    def content(cs: Content) -> str:
        return "".join(inline(i) for i in cs).removesuffix("; ").strip()

    def md_table(tb: Table) -> list[str]:
        width = max([len(tb.columns), *(sum(cell.colspan for cell in r.cells) for r in tb.rows)])
        if not tb.rows and not tb.columns:
            return []
        head = [content(col) for col in tb.columns] or [_md_escape(tb.caption)]
        head += [""] * (width - len(head))
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * width]
        for r in tb.rows:
            cells: list[str] = []
            for cell in r.cells:
                cells.append(content(cell.content))
                cells.extend([""] * (cell.colspan - 1))
            cells += [""] * (width - len(cells))
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    out: list[str] = []

    def walk(s: Section) -> None:
        if s.title:
            if s.tag == "details":
                out.append(f"**{content(s.title)}**")
            else:
                out.append("#" * s.level + " " + content(s.title))
            out.append("")
        for b in s.body:
            if isinstance(b, Section):
                walk(b)
                continue
            if isinstance(b, Paragraph):
                if b.html_only:
                    continue
                out.append(content(b.content))
            elif isinstance(b, BulletList):
                if not b.items:
                    continue
                out.extend(f"- {content(item)}" for item in b.items)
            elif isinstance(b, Table):
                lines = md_table(b)
                if not lines:
                    continue
                out.extend(lines)
            else:  # Chart, Nav: HTML only
                continue
            out.append("")

    for s in sections:
        walk(s)
    return portable_text("\n".join(out).rstrip("\n") + "\n")


# ------------------------------------------------------------------ files


def write_report(doc: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write ``plan.json``, ``report.html`` and ``report.md`` into ``out_dir`` as one set.

    Everything is rendered in memory first, then written into a temporary folder beside
    ``out_dir`` that is renamed into place (:func:`gpuplan.userfiles.write_file_set`): a
    failure (disk full, permission) raises a domain error and leaves an earlier report in
    ``out_dir`` intact, never a mix of new and old files. Other files in ``out_dir`` are
    kept.
    """
    from gpuplan.fsio import to_json_text
    from gpuplan.userfiles import write_file_set

    texts = {
        "json": to_json_text(doc) + "\n",
        "md": render_markdown(doc),
        "html": render_html(doc),
    }
    written = write_file_set(out_dir, {REPORT_FILES[k]: v for k, v in texts.items()})
    return {k: written[name] for k, name in REPORT_FILES.items()}


def template_text() -> str:
    """The HTML template source (for tests and for people who want to restyle it)."""
    return resources.files("gpuplan.report").joinpath("templates/report.html.j2").read_text()
