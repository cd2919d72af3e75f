"""Draft trees (SGLang's EAGLE ``--speculative-eagle-topk W --speculative-num-draft-tokens N``):
the draft steps after the first keep ``W`` tokens per sequence, and the verification pass
checks ``N`` tokens of the tree in one pass. A wide tree pays at small batches, where a pass
streams the weights whatever its rows, and loses at large ones, where ``N`` tokens per
sequence make the verification compute-bound (SGLang's advice: top-k 1 for large batches)."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.speculative import speculation

KW = dict(gpu="h100", input_tokens=1024, output_tokens=256)


def _tpot(batch: int, spec) -> float:
    return float(forecast_inference("llama3.1-8b", batch=batch, speculation=spec, **KW)["tpot_s"])


def test_a_wide_tree_pays_at_batch_1_and_loses_at_a_large_batch():
    chain = speculation(3, 2.8)
    tree = speculation(5, 4.2, tree_width=8, verify_tokens=32)
    assert _tpot(1, tree) < _tpot(1, chain) < _tpot(1, None)
    assert _tpot(64, chain) < _tpot(64, None) < _tpot(64, tree)


def test_the_tree_widens_the_draft_passes_and_the_verification():
    chain = forecast_inference("llama3.1-8b", batch=64, speculation=speculation(5, 3.0), **KW)
    tree = forecast_inference(
        "llama3.1-8b",
        batch=64,
        speculation=speculation(5, 3.0, tree_width=8, verify_tokens=32),
        **KW,
    )
    c, t = chain["speculative"], tree["speculative"]
    assert t["draft_pass_s"] > c["draft_pass_s"]
    assert t["verify_pass_s"] > 2 * c["verify_pass_s"]  # 32 tokens a sequence against 6
    assert (t["tree_width"], t["verify_tokens"]) == (8, 32)
    assert "tree_width" not in c


def test_steady_state_and_closed_loop_simulation_agree_for_a_tree():
    # (at a few requests in flight the simulation's median TPOT sits below the steady
    # state's mean, with or without a tree: a step's prompt chunks are paid whole while its
    # decode share is divided by the acceptance, so fewer requests carry more of it)
    r = forecast_inference(
        "llama3.1-8b",
        gpu="h100",
        input_tokens=1024,
        output_tokens=512,
        concurrency=32,
        closed_loop_requests=128,
        speculation=speculation(4, 3.2, tree_width=4, verify_tokens=12),
    )
    assert r["closed_loop"]["tpot_p50_s"] == pytest.approx(r["tpot_s"], rel=0.08)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(tree_width=4), "needs --spec-verify-tokens"),
        (dict(tree_width=4, verify_tokens=40), "between 2 and 17"),
        (dict(verify_tokens=8), "between 2 and 5"),
        (dict(verify_tokens=3), "verifies 5 tokens, not 3"),
        (dict(tree_width=4, verify_tokens=3, acceptance=3.5), "outside [1, 3]"),
        (dict(tree_width=40, verify_tokens=8), "between 1 and 16"),
    ],
)
def test_bad_trees_are_refused_in_one_line(kwargs, words):
    acceptance = kwargs.pop("acceptance", 2.0)
    with pytest.raises(InputError) as exc:
        speculation(4, acceptance, **kwargs)
    assert words in exc.value.one_line()


def test_a_tree_needs_a_given_acceptance():
    with pytest.raises(InputError, match="the default is a chain's"):
        speculation(4, None, tree_width=4, verify_tokens=8)


def test_cli_flags_and_json(run_cli):
    r = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--batch", "1",
        "--spec-tokens", "5", "--spec-tree-width", "8", "--spec-verify-tokens", "32",
        "--spec-acceptance", "4.2", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    sp = json.loads(r.stdout)["speculative"]
    assert (sp["tree_width"], sp["verify_tokens"], sp["draft_tokens"]) == (8, 32, 5)
    bad = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100",
        "--spec-tokens", "5", "--spec-tree-width", "8",
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_plan_scenario_with_a_tree_sizes_as_forecast_infer(run_cli, tmp_path):
    from tests.forecast._spec_plan import plan_and_forecast_agree

    notes = plan_and_forecast_agree(
        run_cli,
        tmp_path,
        qps=10,
        tpot=0.02,
        speculative=("{draft_tokens: 4, acceptance_length: 3.4, tree_width: 4, verify_tokens: 12}"),
        flags=[
            "--spec-tokens",
            "4",
            "--spec-acceptance",
            "3.4",
            "--spec-tree-width",
            "4",
            "--spec-verify-tokens",
            "12",
        ],
    )
    assert any("in a tree 4 wide, 12 verified per sequence" in n for n in notes)
