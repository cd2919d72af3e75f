"""The one section model (gpuplan/report/sections.py) that both renderers walk.

The HTML and the Markdown are rendered from the same :class:`Section` records, so they
must show the same headings and the same figures; figures another part adds to a storage
tier or a purchasing model's costs, and purchasing models the renderer has never heard
of, must reach both reports without a change here.
"""

from __future__ import annotations

import copy
import html as html_lib
import json
import re
import subprocess
import sys

import pytest

from gpuplan.report import render_html, render_markdown
from gpuplan.report.sections import Chart, Nav, Paragraph, Section, Table, build_sections
from gpuplan.report.view import FigureIndex, fmt


@pytest.fixture(scope="module")
def doc(report_dir):
    return json.loads((report_dir / "plan.json").read_text())


def _text(section: Section) -> str:
    return "".join(str(i.value) for i in section.title if i.kind in ("text", "ident"))


def test_sections_are_typed_records_in_reading_order(doc):
    sections = build_sections(doc)
    ids = [s.id for s in sections]
    assert ids[0] == "top" and ids[-1] == "figures"
    assert ids[1:4] == ["summary", "constraints", "ranking"]
    assert ("shared-cluster" in ids) == (doc.get("shared_cluster") is not None)
    # the table of contents links exactly the top-level sections that have a label
    (nav,) = [b for b in sections[0].body if isinstance(b, Nav)]
    assert [h for _, h in nav.links] == [f"#{s.id}" for s in sections[1:]]
    every = [x for s in sections for x in s.walk()]
    assert all(isinstance(x, Section) for x in every)
    assert any(x.tables for x in every) and any(x.figures for x in every)
    assert all(isinstance(t, Table) for x in every for t in x.tables)
    assert all(isinstance(c, Chart) for x in every for c in x.figures)
    # one article per option, in the document's order
    (options,) = [s for s in sections if s.id == "options"]
    assert [a.id for a in options.children] == [
        f"option-{i}" for i in range(1, len(doc["options"]) + 1)
    ]


def test_html_and_markdown_show_the_same_headings_and_figures(doc):
    html = render_html(doc, charts={})
    md = render_markdown(doc)
    page = html_lib.unescape(re.sub(r"<[^>]+>", "", html))  # the text a reader sees
    for s in (x for top in build_sections(doc) for x in top.walk()):
        title = _text(s)
        if not title or any(i.kind not in ("text", "ident") for i in s.title):
            continue
        assert title in page, title
        assert title.replace("_", "\\_") in md, title
    html_refs = set(re.findall(r'href="#fig-(\d+)"', html))
    md_refs = set(re.findall(r"\[(\d+)\]", md))
    assert html_refs and html_refs <= md_refs
    # beyond the HTML's links the Markdown has only literals such as the "[0]" of an
    # input's line reference ("workloads.inference[0].qps"), no other figure
    assert md_refs - html_refs <= {"0"}
    assert len(html_refs) == len(FigureIndex(doc).entries) or html_refs
    # the legend is the only paragraph the Markdown leaves out
    html_only = [
        b
        for top in build_sections(doc)
        for x in top.walk()
        for b in x.body
        if isinstance(b, Paragraph) and b.html_only
    ]
    assert len(html_only) == 1 and "legend" in html_only[0].css


def _figure_like(doc: dict, label: str, value: float) -> dict:
    """A figure JSON with the shape of the plan's own, under a new label."""
    some = next(f for f in doc["inputs"] if isinstance(f.get("value"), (int, float)))
    f = copy.deepcopy(some)
    f["label"], f["value"], f["interval"] = label, value, None
    return f


def test_new_fields_of_storage_tiers_and_costs_and_new_purchasing_models_appear(doc):
    doc = copy.deepcopy(doc)
    opt = next(o for o in doc["options"] if (o.get("storage") or {}).get("tiers"))
    tier_fig = _figure_like(doc, "tier: metadata operations", 123_456.0)
    for t in opt["storage"]["tiers"]:
        t["metadata_ops_per_s"] = tier_fig
    cost_fig = _figure_like(doc, "committed spend for the term", 987_654.0)
    first_model = next(iter(opt["costs"]))
    opt["costs"][first_model]["committed_spend_usd"] = cost_fig
    new_model = copy.deepcopy(opt["costs"][first_model])
    opt["costs"]["capacity_block"] = new_model
    html = html_lib.unescape(render_html(doc, charts={}))
    md = render_markdown(doc)
    for text in ("metadata ops per s", "committed spend usd", "capacity block"):
        assert text in html, text
        assert text in md, text
    for fig in (tier_fig, cost_fig):
        assert fmt(fig) in html and fmt(fig) in md
    # the new model has its column in the cost table of every option
    costs = html[html.index('<section id="costs">') : html.index('<section id="options">')]
    assert costs.count("capacity block") == 1


def test_the_report_does_not_import_the_cli():
    code = (
        "import sys, gpuplan.report, gpuplan.report.sections, gpuplan.report.render;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gpuplan.cli'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json;" + code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []
