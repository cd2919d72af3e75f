"""`gpuplan forecast train --cp-comm / --cp-layout` end to end (real catalog and the shipped
calibration, in a subprocess)."""

from __future__ import annotations

import json

import pytest

LONG = [
    "forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64",
    "--seq-len", "131072", "--tp", "1", "--cp", "8", "--global-batch", "64",
    "--format", "json",
]  # fmt: skip


def _run(run_cli, *extra):
    r = run_cli(*LONG, *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cp_comm_switches_ring_attention_for_ulysses(run_cli):
    """Ring attention passes every K/V block around the CP ring (cp-1 steps of 2 s/cp x kv
    bytes) and hides it behind the block attention; Ulysses all-to-alls Q, K, V and the
    output on the critical path: less traffic, all of it exposed."""
    ring, a2a = _run(run_cli), _run(run_cli, "--cp-comm", "a2a")
    assert ring["context_parallel"] == {"comm": "ring", "layout": "zigzag"}
    assert a2a["context_parallel"]["comm"] == "a2a"
    r, u = ring["cp_comm_s"], a2a["cp_comm_s"]
    assert u["cp_comm_exposed"] == pytest.approx(u["cp_comm_total"])
    assert r["cp_comm_exposed"] < r["cp_comm_total"]
    assert u["cp_comm_total"] < r["cp_comm_total"]


def test_contiguous_causal_split_is_slower_than_zigzag(run_cli):
    """Contiguous chunks under a causal mask: the last CP rank attends to the whole prefix,
    so the step waits for it; zig-zag balances the ranks (Brandon et al. 2023)."""
    zig, cont = _run(run_cli, "--cp-layout", "zigzag"), _run(run_cli, "--cp-layout", "contiguous")
    assert cont["context_parallel"]["layout"] == "contiguous"
    assert cont["step_time_s"] > zig["step_time_s"]


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--cp-comm", "p3p", "ring, a2a"), ("--cp-layout", "diag", "zigzag")],
)
def test_bad_cp_option_is_one_line_exit_2(run_cli, flag, value, named):
    r = run_cli("forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8",
                flag, value)  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and value in lines[0] and named in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_help_names_the_cp_options(run_cli):
    r = run_cli("forecast", "train", "--help")
    assert r.returncode == 0
    assert "--cp-comm" in r.stdout and "--cp-layout" in r.stdout
