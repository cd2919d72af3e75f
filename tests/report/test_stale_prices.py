"""Prices older than the scenario's limit (default 12 months) are flagged where they are used."""

from __future__ import annotations

import json


def test_stale_prices_are_flagged_in_both_reports(example_reports):
    out = example_reports["llama-pretrain"]
    doc = json.loads((out / "plan.json").read_text())
    stale = [
        (o["id"], m, c["price_age"]["as_of"])
        for o in doc["options"]
        for m, c in (o.get("costs") or {}).items()
        if (c.get("price_age") or {}).get("stale")
    ]
    fresh = [
        c
        for o in doc["options"]
        for c in (o.get("costs") or {}).values()
        if c.get("price_age") and not c["price_age"]["stale"]
    ]
    assert stale and fresh  # the example has both (2025-H1 spot rows, 2026 on-demand rows)
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert html.count('class="stale"') == len(stale)
    # both reports walk the same sections, so the Markdown says what the HTML says
    assert md.count("stale price (as of") == len(stale)
    for _oid, _m, as_of in stale:
        assert f"stale price (as of {as_of})" in md
