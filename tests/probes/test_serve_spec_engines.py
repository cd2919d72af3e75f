"""The serve probe reads speculative decoding from SGLang's and TensorRT-LLM's metrics too.

Parsing and the per-engine summaries are checked on exposition text written as each engine
writes it (metric and label names from SGLang's ``srt/metrics/collector.py`` and
TensorRT-LLM's ``metrics/collector.py``); the whole path -- probe, result, calibrate -- against
the CPU stand-in server (``tests/probes/serve_server.py --speculative 3 --metrics ...``),
which runs real prompt-lookup speculation and exposes it in each engine's format.
"""

from __future__ import annotations

import json

import httpx
import pytest

from gpuplan.paths import results_dir
from gpuplan.probes.serve_spec import (
    SpecReading,
    parse_samples,
    read_spec,
    speculative_summary,
)
from gpuplan.results.schema import ResultDocument
from tests.probes._points import serving_point
from tests.probes.serve_server import running_server

MODEL = "llama3.1-8b"
GPU = "h100-sxm5-80gb"

SGLANG = (
    "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
    "# TYPE sglang:spec_accept_length gauge\n"
    'sglang:spec_accept_length{model_name="m",tp_rank="0",dp_rank="0"} 2.5\n'
    'sglang:spec_accept_length{model_name="m",tp_rank="1",dp_rank="0"} 2.7\n'
    'sglang:speculative_config_info{model_name="m",spec_enabled="true",'
    'spec_algorithm="EAGLE",spec_num_draft_tokens="4",spec_num_steps="3",'
    'spec_eagle_topk="1",spec_draft_model="none"} 1.0\n'
    "sglang:num_running_reqs 8\n"
)
TRTLLM = (
    'trtllm_spec_decode_num_draft_tokens_total{model_name="m"} 3000.0\n'
    'trtllm_spec_decode_num_accepted_tokens_total{model_name="m"} 1500.0\n'
    'trtllm_spec_decode_acceptance_length{model_name="m"} 2.4\n'
    'trtllm_speculative_config_info{model_name="m",spec_enabled="true",spec_method="MTP",'
    'spec_num_tokens="3"} 1.0\n'
)


def test_samples_keep_their_labels():
    [(name, labels, value)] = parse_samples('a:b_total{x="1",y="p,q"} 4e3')
    assert (name, labels, value) == ("a:b_total", {"x": "1", "y": "p,q"}, 4000.0)


def test_each_engines_metrics_are_told_apart():
    sg = read_spec(SGLANG)
    assert sg is not None and sg.engine == "sglang"
    assert sg.gauge == pytest.approx(2.6)  # the ranks averaged
    assert sg.draft_tokens == 3  # spec_num_steps, not the tree's spec_num_draft_tokens
    assert not sg.counted
    tr = read_spec(TRTLLM)
    assert tr is not None and tr.engine == "trtllm" and tr.counted
    assert tr.counters == {"draft_tokens": 3000.0, "accepted": 1500.0}
    assert tr.draft_tokens == 3 and tr.gauge == pytest.approx(2.4)
    assert read_spec("vllm:num_requests_running 3\n") is None


def test_tensorrt_llm_counts_drafts_from_draft_tokens_and_the_draft_length():
    before = read_spec(TRTLLM)
    after = SpecReading("trtllm", {"draft_tokens": 3600.0, "accepted": 1800.0}, 2.0, 3)
    s = speculative_summary(before, after)
    assert s is not None
    # 600 draft tokens of 3 a step: 200 steps; 300 accepted: 1.5 a step, plus the bonus
    assert s["drafts"] == 200 and s["acceptance_length"] == pytest.approx(2.5)
    assert s["draft_tokens"] == 3 and "counters" not in s["source"]
    assert "trtllm_spec_decode_num_draft_tokens_total" in s["source"]
    # no drafts in the level: no speculation, whatever the gauge still says
    assert speculative_summary(after, after) is None


def test_without_a_draft_length_the_gauge_is_read_and_the_users_k_taken():
    no_k = SpecReading("trtllm", {"draft_tokens": 10.0, "accepted": 5.0}, 2.0, None)
    later = SpecReading("trtllm", {"draft_tokens": 40.0, "accepted": 20.0}, 3.0, None)
    s = speculative_summary(no_k, later, [no_k, later])
    assert s is not None and s["draft_tokens"] is None
    assert s["acceptance_length"] == pytest.approx(3.0)  # first read dropped, then the end's
    given = speculative_summary(no_k, later, draft_tokens=3)
    assert given is not None and given["draft_tokens"] == 3
    assert given["acceptance_length"] == pytest.approx(1 + 15 / 10)  # counted: 30 / 3 drafts


def test_sglang_takes_the_mean_of_the_gauge_over_the_level_without_its_first_read():
    def read(g: float) -> SpecReading:
        return SpecReading("sglang", {}, g, 3)

    s = speculative_summary(read(1.2), read(2.0), [read(9.9), read(2.4), read(2.2)])
    assert s is not None and s["draft_tokens"] == 3
    assert s["acceptance_length"] == pytest.approx((2.4 + 2.2 + 2.0) / 3)
    assert "sglang:spec_accept_length" in s["source"]
    # a server whose gauge never rose above 0 ran no speculation
    assert speculative_summary(read(1.2), SpecReading("sglang", {}, None, 3)) is None


def _probe(run_cli, url: str, *extra: str) -> ResultDocument:
    proc = run_cli(
        "probe", "--workload", "serve", "--endpoint", url, "--model", "tiny",
        "--catalog-model", MODEL, "--device-id", "h100", "--engine", "vllm",
        "--concurrency", "1,2", "--input-tokens", "24", "--output-tokens", "20",
        "--requests-per-level", "4", "--no-progress", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [path] = sorted(results_dir().rglob("*.json"))
    return ResultDocument.model_validate(json.loads(path.read_text()))


def test_a_tensorrt_llm_server_is_counted_exactly(run_cli):
    with running_server(speculative=3, metrics="trtllm") as url:
        assert httpx.get(url + "/metrics").status_code == 404
        start = httpx.get(url + "/stats").json()
        doc = _probe(run_cli, url)
        end = httpx.get(url + "/stats").json()
    levels = doc.probe("serve")[0].measurements
    drafts = accepted = 0.0
    for m in levels:
        sp = m["speculative"]
        assert sp["draft_tokens"] == 3
        assert "/prometheus/metrics" in sp["source"]
        drafts += sp["drafts"]
        accepted += (sp["acceptance_length"] - 1.0) * sp["drafts"]
    # the warmup request's steps are in neither level; the levels' own are counted whole
    assert 0 < drafts <= end["drafts"] - start["drafts"]
    assert accepted == pytest.approx(round(accepted), abs=1e-6)
    assert accepted <= end["accepted"] - start["accepted"]


def test_an_sglang_server_is_read_from_its_gauge(run_cli):
    with running_server(speculative=3, metrics="sglang") as url:
        doc = _probe(
            run_cli, url, "--concurrency", "2", "--requests-per-level", "24",
            "--output-tokens", "48",
        )  # fmt: skip
        gauges = httpx.get(url + "/stats").json()["gauges"]
    [m] = doc.probe("serve")[0].measurements
    sp = m["speculative"]
    assert sp["draft_tokens"] == 3 and "sglang:spec_accept_length" in sp["source"]
    # a mean of values the gauge took (the tiny model's acceptance swings from one logging
    # interval to the next, so no closer check holds: the unit tests above check the mean)
    assert 1.0 <= min(gauges) <= sp["acceptance_length"] <= max(gauges) <= 4.0


def test_an_unnamed_draft_length_is_said_and_left_out_of_calibration(run_cli, tmp_path):
    with running_server(speculative=3, metrics="trtllm", spec_config=False) as url:
        doc = _probe(run_cli, url)
        levels = doc.probe("serve")[0].measurements
        assert all(m["speculative"]["draft_tokens"] is None for m in levels)
        assert any("--spec-tokens" in w for w in doc.probe("serve")[0].warnings)
        out = tmp_path / "cal.json"
        cal = run_cli("calibrate", str(results_dir()), "--out", str(out))
        assert cal.returncode == 0, cal.stderr
        assert "serving" not in json.loads(out.read_text())
        # with the user's draft length the counters give the levels again
        for p in results_dir().rglob("*.json"):
            p.unlink()
        doc = _probe(run_cli, url, "--spec-tokens", "3")
    for m in doc.probe("serve")[0].measurements:
        assert m["speculative"]["draft_tokens"] == 3
        assert "trtllm_spec_decode_num_draft_tokens_total" in m["speculative"]["source"]
        assert doc.probe("serve")[0].params["spec_tokens"] == 3


def test_an_sglang_draft_tree_is_recorded_with_its_shape():
    text = SGLANG.replace('spec_eagle_topk="1"', 'spec_eagle_topk="8"').replace(
        'spec_num_draft_tokens="4"', 'spec_num_draft_tokens="32"'
    )
    tree = read_spec(text)
    assert tree is not None and (tree.tree_width, tree.verify_tokens) == (8, 32)
    s = speculative_summary(tree, tree, [tree, tree])
    assert s is not None
    assert (s["draft_tokens"], s["tree_width"], s["verify_tokens"]) == (3, 8, 32)
    # a chain (top-k 1) records no tree
    chain = read_spec(SGLANG)
    assert chain is not None and chain.tree_width is None
    assert "tree_width" not in speculative_summary(chain, chain, [chain, chain])


def test_the_artifact_keeps_a_trees_shape():
    from gpuplan.calibration.serving import validate_serving
    from gpuplan.errors import SchemaError
    from gpuplan.forecast.speculative import speculation

    point = serving_point(
        {"draft_tokens": 3, "acceptance_length": 2.5, "tree_width": 8, "verify_tokens": 16}
    )
    validate_serving({"h100": {"sglang@0.5": {"points": [point]}}})
    bad = {**point, "speculative": {**point["speculative"], "tree_width": "wide"}}
    with pytest.raises(SchemaError, match="tree_width must be a positive integer"):
        validate_serving({"h100": {"sglang@0.5": {"points": [bad]}}})
    sp = speculation(3, 2.5, tree_width=8, verify_tokens=16)
    assert sp is not None and sp.queries == 16
