"""The summary says what the sections below it say (issue 17: a summary recommended 72 GPUs
and "No constraint binds" above a table whose smallest cluster meeting the p95 target was
80 GPUs), and it carries what a finance lead asks for: capex, yearly cost of ownership,
the utilisation assumed, break-even against every cloud option, exclusions, risk band.

Cross-checks read the written plan.json and the rendered HTML of the shipped examples and
of the report fixture, and compare the summary with the ranking, the options, the cost
table and the shared-cluster section.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from gpuplan.report.view import fmt, summary_view


class _Text(HTMLParser):
    """The visible text of the element with a given id (figure links [n] dropped)."""

    def __init__(self, element_id: str) -> None:
        super().__init__()
        self.id = element_id
        self.depth = 0
        self.skip = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.depth:
            self.depth += 1
            if tag == "a" and "fn" in (a.get("class") or ""):
                self.skip = self.depth
        elif a.get("id") == self.id:
            self.depth = 1

    def handle_endtag(self, tag):
        if self.depth:
            if self.skip == self.depth:
                self.skip = 0
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.parts.append(data)


def text_of(html: str, element_id: str) -> str:
    p = _Text(element_id)
    p.feed(html)
    assert p.parts, f"no element #{element_id}"
    return re.sub(r"\s+", " ", "".join(p.parts)).strip()


def _load(out):
    doc = json.loads((out / "plan.json").read_text())
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    return doc, html, md


@pytest.fixture(params=["llama-pretrain", "mixed-teams", "fixture"])
def report(request, example_reports, report_dir):
    out = report_dir if request.param == "fixture" else example_reports[request.param]
    return (request.param, *_load(out))


def _recommended(doc):
    rec = doc["summary"]["recommended"]
    return rec, next(o for o in doc["options"] if o["id"] == rec["option"])


def test_summary_agrees_with_ranking_options_and_cost_table(report):
    _name, doc, html, md = report
    rec, opt = _recommended(doc)
    assert doc["ranking"][0]["option"] == rec["option"]
    view = summary_view(doc)
    facts = dict(view["facts"])
    assert facts["GPUs"] == opt["gpus"] and facts["nodes"] == opt["nodes"]
    # the summary's cost figure is the option's cost under the recommended model
    metric = rec["metric"]
    cost = opt["costs"][rec["purchasing_model"]]
    key = {"run": "all_runs_usd", "month": "per_month_usd"}.get(doc["summary"]["rank_by"])
    if key:
        assert cost[key]["value"] == metric["value"]
    # the same texts in the HTML: headline, recommendation table, option section, cost table
    headline = text_of(html, "headline")
    assert headline.startswith("Recommended: " + opt["label"])
    gpus_text = fmt(opt["gpus"])
    assert gpus_text in headline and gpus_text in text_of(html, "summary-recommendation")
    value_text = fmt({**metric, "interval": None})
    assert value_text in headline
    assert value_text in text_of(html, "costs")
    i = [o["id"] for o in doc["options"]].index(opt["id"]) + 1
    assert gpus_text in text_of(html, f"option-{i}")
    # and in the Markdown
    assert f"| GPUs | {gpus_text} [" in md


def test_summary_binding_constraint_matches_the_shared_section(report):
    _name, doc, html, md = report
    _rec, opt = _recommended(doc)
    sc = doc.get("shared_cluster")
    sizing = opt.get("sizing")
    if sc is None or "smallest_cluster" not in sc:
        assert sizing is None
        return
    small = sc["smallest_cluster"]["overall"]
    serving_gpus = sum(s["gpus"]["value"] for s in opt["inference"] if s.get("gpus"))
    # the section simulates the recommended fleet less its serving GPUs ...
    assert sc["cluster_gpus"]["value"] == opt["gpus"]["value"] - serving_gpus
    # ... and that fleet meets the target it states
    assert small is not None and small["gpus"]["value"] <= sc["cluster_gpus"]["value"]
    summary = text_of(html, "summary")
    if sizing["binds"]:
        assert small["gpus"]["value"] == sc["cluster_gpus"]["value"]
        assert text_of(html, "summary-binding") == (
            "Binding constraint: scheduling.p95_wait_target_s."
        )
        assert "Binding constraint: `scheduling.p95_wait_target_s`" in md
    else:
        assert "summary-binding" not in html
    assert fmt(sizing["nodes"]) in summary
    assert "No constraint binds" not in html


def test_mixed_teams_recommends_the_fleet_its_own_table_sizes(example_reports):
    doc, _html, _ = _load(example_reports["mixed-teams"])
    _rec, opt = _recommended(doc)
    sc = doc["shared_cluster"]
    assert opt["sizing"]["binds"] is True
    serving_gpus = opt["inference"][0]["gpus"]["value"]
    assert opt["gpus"]["value"] == sc["smallest_cluster"]["overall"]["gpus"]["value"] + serving_gpus


def test_llama_summary_shows_capex_tco_break_even_and_exclusions(example_reports):
    doc, html, md = _load(example_reports["llama-pretrain"])
    rec, opt = _recommended(doc)
    assert rec["purchasing_model"] == "onprem"
    tco = opt["onprem_tco"]
    money = text_of(html, "summary-money")
    for key in ("capex_usd", "capex_per_year_usd", "energy_per_year_usd", "total_per_year_usd"):
        assert fmt(tco[key]) in money, key
    assert "PUE" in money and "utilisation assumed" in money
    headline = text_of(html, "headline")
    assert fmt(tco["capex_usd"]) in headline and fmt(tco["total_per_year_usd"]) in headline
    # the cost of one job on owned hardware is labelled as a share of a cluster bought whole
    assert "share of the owned cluster's cost (the cluster is bought whole)" in headline
    # break-even against every priced model of every cloud option with the same GPU
    rows = summary_view(doc)["break_even"]
    clouds = {
        (o["id"], m)
        for o in doc["options"]
        if o["kind"] == "cloud" and o["gpu"] == opt["gpu"]
        for m, c in o["costs"].items()
        if c["price_usd_per_node_hour"]["value"] is not None
    }
    assert {(r["cloud"], r["purchasing_model"]) for r in rows} == clouds
    be = text_of(html, "break-even")
    assert be.startswith("Owning vs renting")
    # the plan's own break-even (cheapest on-demand) is one of the rows, same value
    own = next(
        r
        for r in rows
        if r["cloud"] == opt["break_even_against"] and r["purchasing_model"] == "on_demand"
    )
    assert own["break_even_utilisation"]["value"] == pytest.approx(
        opt["break_even_utilisation"]["value"]
    )
    assert fmt(own["break_even_utilisation"]) in text_of(html, "summary")
    # what is excluded: the network gear without a price
    excluded = text_of(html, "summary-excluded")
    assert "network equipment" in excluded and "no price for switch" in excluded
    assert "### Excluded" in md and "network equipment" in md
    # the risk band: the forecast interval against the deadline
    risk = text_of(html, "summary-risk")
    assert "slow end" in risk and "deadline" in risk
