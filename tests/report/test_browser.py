"""The HTML report in a real headless browser (Debian's Chromium over the DevTools protocol).

It must load without console errors or exceptions, show the key sections, and have its
inline charts decoded. A screenshot goes to pytest's tmp dir (never into the repository);
set GPUPLAN_SCREENSHOT_DIR to keep a copy elsewhere.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.cdp import CHROMIUM, Browser

pytestmark = pytest.mark.browser

KEY_SECTIONS = [
    "summary",
    "constraints",
    "ranking",
    "costs",
    "options",
    "sensitivity",
    "time-to-train",
    "trial-node",
    "shared-cluster",
    "wait-vs-size",
    "reference-curve",
    "provenance",
    "figures",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/setup.sh --test (apt-get install chromium)"
        )
    with Browser(tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


def test_report_renders_without_errors_and_shows_the_sections(browser, report_dir, tmp_path):
    browser.navigate((report_dir / "report.html").resolve().as_uri())
    assert browser.errors() == []
    shown = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('section')].map("
        "s => [s.id, s.getBoundingClientRect().height > 0 && getComputedStyle(s).display !== 'none']))"
    )
    for s in KEY_SECTIONS:
        assert shown.get(s) is True, s
    images = browser.evaluate(
        "[...document.images].map(i => ({id: i.id, ok: i.complete && i.naturalWidth > 100}))"
    )
    assert {i["id"] for i in images} == {
        "chart-cost",
        "chart-ttt",
        "chart-roofline",
        "chart-shared-wait",
        "chart-philly-wait",
    }
    citation = browser.evaluate("document.getElementById('reference-citation').innerText")
    assert citation.startswith("Data: Microsoft Philly trace (CC BY 4.0)")
    assert all(i["ok"] for i in images), images
    headline = browser.evaluate("document.querySelector('.headline').innerText")
    assert headline.startswith("Recommended:")
    n_figs = browser.evaluate("document.querySelectorAll('#figures tbody tr').length")
    assert n_figs > 100
    # every figure link lands on a row of the appendix
    dangling = browser.evaluate(
        "[...document.querySelectorAll('a.fn')].filter(a => !document.getElementById(a.hash.slice(1))).length"
    )
    assert dangling == 0
    shot = browser.screenshot(tmp_path / "report.png")
    assert shot.stat().st_size > 50_000
    keep = os.environ.get("GPUPLAN_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "report.png")


def test_the_error_check_is_not_blind(browser, tmp_path):
    """Negative control: a page with a console error, an exception and a broken image."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><img id="x" src="data:image/png;base64,AAAA">'
        '<script>console.error("boom"); null.f();</script></body></html>'
    )
    browser.navigate(page.resolve().as_uri())
    errors = browser.errors()
    assert any("boom" in e for e in errors)
    assert any(e.startswith("exception") for e in errors)
    assert browser.evaluate("document.getElementById('x').naturalWidth") == 0
