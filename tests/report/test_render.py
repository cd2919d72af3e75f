"""The HTML and Markdown reports: sections, self-containment, and a number-provenance audit."""

from __future__ import annotations

import base64
import html as html_lib
import itertools
import json
import re
import stat
from html.parser import HTMLParser

import pytest

from gpuplan.errors import InputError
from gpuplan.plan.provenance import KINDS
from gpuplan.report import charts, render_html, render_markdown, write_report
from gpuplan.report.view import FigureIndex, fmt
from gpuplan.scheduling.workload import PHILLY_CITATION

from .conftest import SMALL_PHILLY_SIZES_GPUS

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
    "wait-vs-size",
    "reference-curve",
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
    assert len(a.imgs) == 5 and all(src.startswith("data:image/png;base64,") for src in a.imgs)


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


# ------------------------------------------------------------------ shared cluster curves


def _section(page: str, sid: str) -> str:
    """The HTML of ``<section id=sid>`` up to its first nested or closing section tag."""
    start = page.index(f'<section id="{sid}">')
    end = page.index("</section>", start)
    return page[start:end]


def _ref(index: FigureIndex, f: dict) -> str:
    return f"{fmt(f)} [{index.num(f)}]"


def test_wait_vs_size_curve_in_json_html_and_markdown(report_dir, doc, html):
    w = doc["shared_cluster"]["wait_vs_size"]
    assert w["sizes_from"] == "scheduling.sizes_gpus"
    curves = {c["policy"]: c for c in w["curves"]}
    # the scenario's policy (the schema default, backfill) and the FIFO baseline
    assert list(curves) == ["backfill", "fifo"]
    assert curves["backfill"]["scenario_policy"] and not curves["fifo"]["scenario_policy"]
    # sizes_gpus: [64, 16, 32] -> points ascending, each citing the scenario entry it came from
    size_of = {16: "curve size 2", 32: "curve size 3", 64: "curve size 1"}
    index = FigureIndex(doc)
    md = (report_dir / "report.md").read_text()
    section = _section(html, "wait-vs-size")
    assert 'id="chart-shared-wait"' in section
    for c in curves.values():
        assert [p["gpus"]["value"] for p in c["points"]] == [16, 32, 64]
        for p in c["points"]:
            g = p["gpus"]["value"]
            assert p["gpus"]["provenance"]["inputs"][0] == size_of[g]
            assert p["nodes"]["value"] * 8 == g
            for key in ("mean", "p95"):
                f = p["wait_s"][key]
                prov = f["provenance"]
                assert prov["kind"] == "derived" and "simulation" in prov["formula"]
                assert prov["inputs"][0] == "jobs drawn for the teams"
                assert prov["inputs"][-1] == size_of[g]
                assert f"#fig-{index.num(f)}" in section
                assert _ref(index, f) in md
            assert 0 < p["utilization"]["value"] <= 1
    policy_inputs = {f["label"]: f for f in doc["inputs"]}
    assert policy_inputs["scheduling policy"]["provenance"]["ref"] == "default scheduling.policy"
    assert policy_inputs["curve size 2"]["value"] == 16
    assert "### Wait vs cluster size" in md
    assert "Smallest cluster meeting the p95 wait target" in section
    assert "### Smallest cluster meeting the p95 wait target" in md


def test_fifo_waits_never_grow_with_the_cluster(doc):
    """Strict FIFO: every job starts no later on a bigger cluster (docs/scheduling.md 5),
    so every wait statistic, overall and per team, is non-increasing in the curve."""
    fifo = next(c for c in doc["shared_cluster"]["wait_vs_size"]["curves"] if c["policy"] == "fifo")
    pts = fifo["points"]
    assert len(pts) >= 3
    for a, b in itertools.pairwise(pts):
        assert a["gpus"]["value"] < b["gpus"]["value"]
        for k in ("mean", "p50", "p95", "p99", "max"):
            assert b["wait_s"][k]["value"] <= a["wait_s"][k]["value"], k
        for team, f in b["per_team_p95_wait_s"].items():
            assert f["value"] <= a["per_team_p95_wait_s"][team]["value"], team
    # and the smallest size is loaded enough for the curve to say something
    assert pts[0]["wait_s"]["mean"]["value"] > pts[-1]["wait_s"]["mean"]["value"]


def test_philly_reference_curve_is_cited_wherever_it_is_shown(report_dir, doc, html):
    ref = doc["shared_cluster"]["reference_curve"]
    assert ref["trace"] == "philly" and ref["policy"] == "backfill"
    assert ref["attribution"] == PHILLY_CITATION
    assert [p["gpus"]["value"] for p in ref["points"]] == list(SMALL_PHILLY_SIZES_GPUS)
    for i, p in enumerate(ref["points"]):
        size = p["gpus"]["provenance"]["inputs"][0]
        assert size == f"Philly curve size {i + 1}"
        prov = p["wait_s"]["p95"]["provenance"]
        assert prov["inputs"][0] == "reference trace" and "Philly" in prov["formula"]
    trace_input = next(f for f in doc["inputs"] if f["label"] == "reference trace")
    assert trace_input["value"] == "philly"
    assert trace_input["provenance"]["source"] == PHILLY_CITATION
    assert trace_input["provenance"]["ref"].endswith("scheduling.reference_trace")
    # next to the chart in the HTML, and in the Markdown
    section = _section(html, "reference-curve")
    assert 'id="chart-philly-wait"' in section
    assert PHILLY_CITATION in html_lib.unescape(section)
    md = (report_dir / "report.md").read_text()
    md_ref = md[md.index("### Reference: the Microsoft Philly trace") :]
    assert md_ref.index(PHILLY_CITATION.replace("_", "\\_")) < md_ref.index("| GPUs |")


def test_wait_charts_are_drawn_only_from_curves(doc):
    png = base64.b64decode(charts.shared_wait_vs_size(doc))
    assert png.startswith(b"\x89PNG")
    assert base64.b64decode(charts.reference_wait_vs_size(doc)).startswith(b"\x89PNG")
    sc = doc["shared_cluster"]
    no_curves = {**doc, "shared_cluster": {k: v for k, v in sc.items() if k != "wait_vs_size"}}
    assert charts.shared_wait_vs_size(no_curves) is None
    failed = {**doc, "shared_cluster": {**sc, "reference_curve": {"trace": "philly", "error": "x"}}}
    assert charts.reference_wait_vs_size(failed) is None
    assert charts.shared_wait_vs_size({**doc, "shared_cluster": None}) is None
