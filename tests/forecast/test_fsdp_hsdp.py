"""HSDP (FSDP HYBRID_SHARD / a 2-D FSDP2 mesh): shard inside groups, replicate across them."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.forecast.memory import model_state_bytes
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.training import (
    Framework,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
)

from .test_train_fakes import fake_hardware

ARCH = ModelArch(layers=8, hidden=1024, heads=8, ffn_hidden=4096, vocab=32000)


def test_hsdp_memory_is_full_shard_over_the_group():
    """States sharded over 8 of 64 ranks = FULL_SHARD on 8 ranks, term by term."""
    hsdp = model_state_bytes(ARCH, 1, 1, 1, 64, 1, 3, shard_ranks=8)
    fsdp8 = model_state_bytes(ARCH, 1, 1, 1, 8, 1, 3)
    fsdp64 = model_state_bytes(ARCH, 1, 1, 1, 64, 1, 3)
    for key in ("weights", "gradients", "optimizer", "zero3_buffers"):
        assert float(hsdp[key]) == pytest.approx(float(fsdp8[key]))
    assert float(hsdp["optimizer"]) == pytest.approx(8.0 * float(fsdp64["optimizer"]))
    # ZeRO-1 is not hybrid-sharded
    z1 = model_state_bytes(ARCH, 1, 1, 1, 64, 1, 1, shard_ranks=8)
    assert float(z1["optimizer"]) == pytest.approx(
        float(model_state_bytes(ARCH, 1, 1, 1, 64, 1, 1)["optimizer"])
    )


def _eval(shard, *, overlap=True):
    return evaluate_layouts(
        ARCH,
        fake_hardware(node_size=8),
        layouts_from_dict(
            dict(tp=1, pp=1, cp=1, ep=1, dp=16, vp=1, micro_batch=1, recompute=0, zero=3)
        ),
        seq_len=2048,
        global_batch=128,
        precision="bf16",
        framework=Framework(hsdp_shard_size=shard, dp_overlap=overlap),
        constants=default_constants(),
    )


def _dp(res) -> float:
    return float(np.asarray(res["breakdown_s"]["dp_comm_exposed"])[0, 0])


def test_shard_size_equal_to_the_group_is_full_shard():
    a, b = _eval(None), _eval(16)
    assert float(np.asarray(a["step_time_s"])[0, 0]) == float(np.asarray(b["step_time_s"])[0, 0])


def test_hsdp_inside_the_node_moves_the_per_microbatch_gathers_off_the_network():
    """16 ranks on 2 nodes, 8 micro-batches, nothing overlapped: FULL_SHARD gathers and
    reduce-scatters cross the network every micro-batch; HSDP-8 keeps them on NVLink and adds
    one replica all-reduce of a 1/8 gradient shard per step."""
    full, hybrid = _dp(_eval(None, overlap=False)), _dp(_eval(8, overlap=False))
    assert hybrid < full
    assert hybrid > _dp(_eval(8, overlap=True)) >= 0.0


def test_hsdp_needs_fsdp_and_a_divisor(run_cli):
    base = ("forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64")
    for extra, needle in (
        (("--hsdp-shard-size", "8", "--zero", "1", "--pp", "1"), "--fsdp"),
        (("--fsdp", "--tp", "1", "--cp", "1", "--hsdp-shard-size", "7"), "divide"),
    ):
        r = run_cli(*base, *extra, "--format", "json")
        assert r.returncode == 2, r.stderr
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr
    r = run_cli(*base, "--fsdp", "--tp", "1", "--hsdp-shard-size", "8", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert '"hsdp_shard_size": 8' in r.stdout
