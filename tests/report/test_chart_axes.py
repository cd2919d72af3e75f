"""Chart axes a reader can read: money in $k/$M (issue 17 saw "1e7"), log axes in plain
numbers (it saw "2^7"), every reference line labelled (the deadline line had none).

The charts are drawn by matplotlib from the fixture plan; the tests read the drawn tick
labels and legend entries of the figure itself.
"""

from __future__ import annotations

import json
import re

import pytest

from gpuplan.report import charts

SCI = re.compile(r"\de[+-]?\d|\^|\$\\mathdefault|10\^|×10")


@pytest.fixture(scope="module")
def doc(report_dir):
    return json.loads((report_dir / "plan.json").read_text())


def _ticks(axis):
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def _drawn(fig):
    fig.canvas.draw()
    return fig.axes[0]


def test_money_axis_in_dollars_k_and_m(doc):
    ax = _drawn(charts.cost_by_option(doc, figure=True))
    ticks = _ticks(ax.xaxis)
    assert ticks and all(t.startswith("$") for t in ticks), ticks
    assert not any(SCI.search(t) for t in ticks), ticks
    top = max(v for v in ax.get_xlim())
    if top >= 1e6:
        assert any(t.endswith("M") for t in ticks), ticks
    elif top >= 1e3:
        assert any(t.endswith("k") for t in ticks), ticks


def test_time_to_train_log_axes_in_plain_numbers_with_a_labelled_deadline(doc):
    ax = _drawn(charts.time_to_train(doc, figure=True))
    for axis in (ax.xaxis, ax.yaxis):
        ticks = _ticks(axis)
        assert ticks and not any(SCI.search(t) for t in ticks), ticks
        assert all(re.fullmatch(r"[\d,.]+", t) for t in ticks), ticks
    deadlines = {c["deadline_days"]["value"] for c in doc["time_to_train_curves"]}
    labels = ax.get_legend_handles_labels()[1]
    for d in deadlines:
        assert f"deadline: {d:g} days" in labels


def test_wait_chart_reference_lines_are_labelled(doc):
    ax = _drawn(charts.shared_wait_vs_size(doc, figure=True))
    labels = ax.get_legend_handles_labels()[1]
    sc = doc["shared_cluster"]
    assert f"planned: {sc['cluster_gpus']['value']:g} GPUs" in labels
    assert any(lab.startswith("p95 target: ") for lab in labels)
    ticks = _ticks(ax.yaxis)
    assert ticks and not any(SCI.search(t) for t in ticks), ticks


def test_roofline_axes_plain(doc):
    ax = _drawn(charts.roofline(doc, figure=True))
    for axis in (ax.xaxis, ax.yaxis):
        ticks = _ticks(axis)
        assert ticks and not any(SCI.search(t) for t in ticks), ticks
    assert ax.get_ylabel() == "TFLOP/s"


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "$0"), (512, "$512"), (1_500, "$1.5k"), (887_552, "$888k"), (13_930_000, "$13.9M")],
)
def test_usd_tick(value, text):
    assert charts.usd_tick(value) == text


@pytest.mark.parametrize(("value", "text"), [(128, "128"), (4096, "4,096"), (0.5, "0.5")])
def test_plain_tick(value, text):
    assert charts.plain_tick(value) == text
