"""The HTML pages in a real headless Chromium against a live uvicorn on loopback."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.service.db import Database
from gpuplan.service.testing import LiveServer
from gpuplan.service.tokens import create_token
from tests.cdp import CHROMIUM, Browser

from .service_docs import make_doc

pytestmark = pytest.mark.browser


@pytest.fixture
def browser(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/setup.sh --test (apt-get install chromium)"
        )
    with Browser(tmp_path / "chromium-profile") as b:
        yield b


def test_log_in_browse_filter_and_compare_runs(browser, sqlite_url, tmp_path):
    db = Database(sqlite_url)
    db.migrate()
    rw, _ = create_token(db, team="vision")
    nlp, _ = create_token(db, team="nlp")
    ro, _ = create_token(db, team="vision", scopes=("read",))
    peak = get_catalog().gpu("h100").peak_flops_per_s("bf16")
    fast = make_doc(seed=80, matmul_flops_per_s=0.75 * peak)
    slow = make_doc(seed=81, matmul_flops_per_s=0.5 * peak)
    other = make_doc(
        seed=82,
        accelerator="NVIDIA A100-SXM4-80GB",
        matmul_flops_per_s=2e14,
        membw_bytes_per_s=1.6e12,
        pcie_bytes_per_s=2e10,
    )
    with LiveServer(
        sqlite_url, args=["--recalibrate", "off"], log_path=tmp_path / "serve.log"
    ) as server:
        for doc, token in ((fast, rw), (slow, rw), (other, nlp)):
            r = httpx.post(
                f"{server.url}/v1/results",
                content=json.dumps(doc),
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 201, r.text

        # without a session the pages send the browser to the login form
        browser.navigate(f"{server.url}/")
        assert browser.evaluate("location.pathname") == "/login"
        browser.submit(
            "document.querySelector('#token').value = 'gpt_wrong'; document.querySelector('#login-form').submit()"
        )
        assert (
            browser.evaluate("document.querySelector('#login-error').textContent")
            == "unknown, revoked or read-less token"
        )

        browser.submit(
            f"document.querySelector('#token').value = {json.dumps(ro)}; document.querySelector('#login-form').submit()"
        )
        assert browser.evaluate("location.pathname") == "/"
        assert browser.evaluate("document.querySelector('#viewer-team').textContent") == "vision"
        assert browser.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the token
        rows = browser.evaluate(
            "[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.runId)"
        )
        assert rows == [other["run_id"], slow["run_id"], fast["run_id"]]

        # filter by team with the form
        browser.submit(
            "document.querySelector('#team-filter').value = 'nlp'; document.querySelector('#filter').submit()"
        )
        assert browser.evaluate("location.search") == "?device=&team=nlp"
        rows = browser.evaluate(
            "[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.runId)"
        )
        assert rows == [other["run_id"]]
        browser.navigate(f"{server.url}/?device=h100")  # a catalog alias
        rows = browser.evaluate(
            "[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.runId)"
        )
        assert sorted(rows) == sorted([fast["run_id"], slow["run_id"]])

        # tick two runs and compare them
        browser.submit(
            "for (const id of {}) document.querySelector(`input[value='${{id}}']`).checked = true;"
            "document.querySelector('#compare-form').submit()".format(
                json.dumps([fast["run_id"], slow["run_id"]])
            )
        )
        assert browser.evaluate("location.pathname") == "/compare"
        cells = browser.evaluate(
            "[...document.querySelectorAll('#compare tr[data-key=\"matmul_bfloat16_flops_per_s\"] td.num')].map(td => td.dataset.value)"
        )
        # columns in the list's order (newest first), ratios relative to the first column
        assert [float(v) for v in cells] == pytest.approx([0.5 * peak, 0.75 * peak])
        ratio = browser.evaluate(
            "document.querySelector('#compare tr[data-key=\"matmul_bfloat16_flops_per_s\"] td.num:last-child small').textContent"
        )
        assert ratio == "(×1.50)"
        keys = browser.evaluate(
            "[...document.querySelectorAll('#compare tbody tr')].map(r => r.dataset.key)"
        )
        assert keys == sorted(
            [
                "allreduce_busbw_bytes_per_s",
                "d2h_bandwidth_bytes_per_s",
                "h2d_bandwidth_bytes_per_s",
                "matmul_bfloat16_flops_per_s",
                "memory_bandwidth_bytes_per_s",
            ]
        )

        # a run's own page, then log out
        browser.navigate(f"{server.url}/runs/{other['run_id']}")
        assert browser.evaluate("document.querySelector('#run-status').textContent") == "accepted"
        browser.submit("document.querySelector('header form').submit()")
        assert browser.evaluate("location.pathname") == "/login"
        browser.navigate(f"{server.url}/compare?run={fast['run_id']}&run={slow['run_id']}")
        assert browser.evaluate("location.pathname") == "/login"
    db.dispose()
