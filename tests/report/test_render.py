"""The HTML and Markdown reports: sections, self-containment, and a number-provenance audit."""

from __future__ import annotations

import json
import re
import stat
from html.parser import HTMLParser

import pytest

from gpuplan.errors import InputError
from gpuplan.plan.provenance import KINDS
from gpuplan.report import render_html, render_markdown, write_report
from gpuplan.report.render import FigureIndex

SECTIONS = [
    "summary",
    "constraints",
    "ranking",
    "costs",
    "options",
    "sensitivity",
    "time-to-train",
    "trial-node",
    "calibration",
    "shared-cluster",
    "inputs",
    "provenance",
    "figures",
]
# a number standing on its own (not part of an identifier such as p5.48xlarge or h100)
NUMBER = re.compile(r"(?<![\w.\-/])[$]?\d[\d,]*(?:\.\d+)?%?(?![\w\-/])")
ALLOWED = set(KINDS) | {"label", "provenance", "index"}


class Audit(HTMLParser):
    """Collects every standalone number of the visible text with its nearest data-kind."""

    VOID = frozenset({"br", "img", "meta", "link", "input", "hr", "wbr", "col", "source"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.naked: list[str] = []
        self.ids: set[str] = set()
        self.fig_refs: list[int] = []
        self.imgs: list[str] = []
        self.scripts = 0
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "script":
            self.scripts += 1
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        for key in ("src", "href"):
            v = a.get(key) or ""
            if v.startswith(("http:", "https:", "//")):
                self.external.append(v)
        if tag == "a" and (a.get("href") or "").startswith("#fig-"):
            self.fig_refs.append(int(a["href"][5:]))
        if tag not in self.VOID:
            self.stack.append((tag, a.get("data-kind")))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if any(t in ("style", "script", "title") for t, _ in self.stack):
            return
        kinds = [k for _, k in self.stack if k]
        if kinds and kinds[-1] in ALLOWED:
            return
        for m in NUMBER.finditer(data):
            self.naked.append(f"{m.group(0)!r} in {data.strip()[:80]!r}")


def audit(html: str) -> Audit:
    a = Audit()
    a.feed(html)
    return a


@pytest.fixture(scope="module")
def doc(report_dir):
    return json.loads((report_dir / "plan.json").read_text())


@pytest.fixture(scope="module")
def html(report_dir):
    return (report_dir / "report.html").read_text()


def test_three_outputs_written(report_dir, doc):
    for name in ("report.html", "report.md", "plan.json"):
        p = report_dir / name
        assert p.stat().st_size > 1000
        assert p.stat().st_mode & stat.S_IRGRP  # readable by others, not 0600
    assert doc["plan_version"] == 1 and doc["options"]


def test_html_has_every_section_and_is_self_contained(html):
    a = audit(html)
    for s in SECTIONS:
        assert s in a.ids, s
    assert a.scripts == 0
    assert a.external == []
    assert len(a.imgs) == 3 and all(src.startswith("data:image/png;base64,") for src in a.imgs)


def test_every_number_in_the_html_has_provenance(html, doc):
    a = audit(html)
    assert a.naked == []
    index = FigureIndex(doc)
    assert a.fig_refs and max(a.fig_refs) <= len(index.entries)
    for n in set(a.fig_refs):
        assert f'id="fig-{n}"' in html
    rows = re.findall(r'<tr id="fig-(\d+)">', html)
    assert len(rows) == len(index.entries)


def test_the_audit_catches_a_bare_number(html):
    tampered = html.replace("<h2>Ranking</h2>", "<h2>Ranking</h2><p>about 12,500 GPUs</p>")
    assert any("12,500" in n for n in audit(tampered).naked)
    # identifiers with digits are not numbers
    assert audit("<p>p5.48xlarge on h100-sxm5-80gb, llama3.1-70b</p>").naked == []


def test_markdown_has_the_same_content(report_dir, doc):
    md = (report_dir / "report.md").read_text()
    for heading in (
        "## Summary",
        "## Ranking",
        "## Options",
        "## Sensitivity",
        "## Time to train vs cluster size",
        "## Trial node",
        "## Calibration",
        "## Shared cluster",
        "## Inputs",
        "## Assumptions and provenance",
        "## Figures",
    ):
        assert heading in md
    index = FigureIndex(doc)
    refs = {int(n) for n in re.findall(r"\[(\d+)\]", md)}
    assert refs and max(refs) <= len(index.entries)
    assert md.count("\n| ") > len(index.entries)
    assert doc["summary"]["headline"]["text"].split(":")[0] in md


def test_unverified_values_are_marked(html, doc):
    # the DGX H100 max power is unverified in the catalog: its figure carries the mark
    assert "unverified" in html
    rows = doc["provenance"]["catalog_rows"]
    assert any(r["id"] == "dgx-h100" and "max_power_w" in r["unverified"] for r in rows)


def test_render_is_deterministic_for_the_same_plan(doc):
    assert render_markdown(doc) == render_markdown(doc)
    a, b = render_html(doc, charts={}), render_html(doc, charts={})
    assert a == b


def test_write_report_refuses_a_file_as_directory(tmp_path, doc):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        write_report(doc, f)
