"""Render capacity plans: self-contained HTML, Markdown and JSON (DESIGN.md section 2).

>>> from gpuplan.report import write_report  # doctest: +SKIP
>>> write_report(plan.to_json(), "out/report")  # doctest: +SKIP
"""

from __future__ import annotations

from gpuplan.report.render import REPORT_FILES, render_html, render_markdown, write_report

__all__ = ["REPORT_FILES", "render_html", "render_markdown", "write_report"]
