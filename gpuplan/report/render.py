"""Render a plan (its JSON document) as a self-contained HTML report and as Markdown.

Both renderers read the plan JSON only, and both walk the same sections
(:func:`gpuplan.report.sections.build_sections`): the HTML through the Jinja2 template, the
Markdown through :func:`render_markdown`'s walker; neither holds report content of its
own. What the sections are built from (the figure index, the summary view, the break-even
rows) is in :mod:`gpuplan.report.view`; this module keeps the two renderers. Every figure is printed with a reference
number ``[n]`` into the *Figures* appendix, which lists its provenance (input line, catalog row
with source and date, calibration basis, measurement run, forecast, or the formula of a
derived figure and the figures it used). In the HTML, every element that shows a number
carries a ``data-kind`` attribute naming where the number comes from; the tests walk the
rendered DOM and fail on any number outside such an element.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.plan.provenance import is_figure_json, is_text_json, portable_text
from gpuplan.report.sections import (
    BulletList,
    Content,
    Inline,
    Paragraph,
    Section,
    Table,
    build_sections,
)
from gpuplan.report.view import FigureIndex, fmt, prov_text

REPORT_FILES = {"html": "report.html", "md": "report.md", "json": "plan.json"}


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
