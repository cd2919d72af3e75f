"""Collectives: nccl-tests' busbw factors, and real gloo ranks in spawned processes."""

from __future__ import annotations

import pytest

from gpuplan.probes.base import DeviceInfo, ProbeContext
from gpuplan.probes.collectives import (
    BUSBW_FACTORS,
    OPS,
    Plan,
    _Collective,
    bandwidths,
    busbw_factor,
    run,
    run_local,
    torchrun_env,
)
from gpuplan.probes.timing import TimingConfig
from gpuplan.results.schema import CollectiveMeasurement

FAST = TimingConfig(warmups=1, min_sample_s=0.005, samples=4, min_samples=3)


@pytest.mark.parametrize(
    ("op", "ranks", "factor"),
    [
        ("all_reduce", 2, 1.0),  # 2(n-1)/n
        ("all_reduce", 8, 1.75),
        ("all_reduce", 16, 1.875),
        ("all_gather", 8, 0.875),  # (n-1)/n
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 64, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_busbw_factors_are_nccl_tests(op, ranks, factor):
    assert busbw_factor(op, ranks) == pytest.approx(factor)


def test_every_probed_op_has_a_factor_and_bandwidths_follow():
    assert set(OPS) <= set(BUSBW_FACTORS)
    algbw, busbw = bandwidths("all_reduce", 1 << 30, 0.01, 8)
    assert algbw == pytest.approx((1 << 30) / 0.01)
    assert busbw == pytest.approx(algbw * 1.75)
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)


def test_torchrun_environment_detection():
    assert torchrun_env({}) is None
    assert torchrun_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    env = torchrun_env(
        {"WORLD_SIZE": "16", "RANK": "9", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    )
    assert env is not None and env.num_nodes == 2 and env.local_rank == 1 and env.rank == 9


def test_real_two_rank_gloo_all_reduce_sums_are_checked():
    points = []
    plan = Plan(
        backend="gloo",
        ops=("all_reduce",),
        sizes=(4096, 1 << 16),
        timing=FAST,
        num_nodes=1,
        timeout_s=60,
    )
    run_local(plan, 2, gpu=False, on_point=points.append, deadline_s=120)
    assert [p["size_bytes"] for p in points] == [4096, 1 << 16]
    for p in points:
        CollectiveMeasurement.model_validate(p)
        assert p["correct"] is True
        assert p["ranks"] == 2 and p["scope"] == "intra"
        assert p["algbw_bytes_per_s"] == pytest.approx(p["size_bytes"] / p["median_s"])
        assert p["busbw_bytes_per_s"] == pytest.approx(p["algbw_bytes_per_s"] * 1.0)  # 2(2-1)/2
        assert len(p["samples_s"]) >= 3 and p["loops"] >= 1


class _BrokenDist:
    """A process group whose collectives do nothing: the check must notice."""

    def all_reduce(self, t, op=None):
        return None

    def broadcast(self, t, src=0):
        return None

    def all_gather_single(self, out, inp):
        return None

    def reduce_scatter_single(self, out, inp):
        return None

    def all_to_all_single(self, out, inp):
        return None


@pytest.mark.parametrize("op", OPS)
def test_correctness_check_can_fail(op):
    import torch

    coll = _Collective(torch, _BrokenDist(), op, 64, 2, 1, torch.device("cpu"))
    assert coll.check() is False


def test_three_gloo_ranks_every_op_checked_and_sizes_rounded():
    points = []
    plan = Plan(backend="gloo", ops=OPS, sizes=(4100,), timing=FAST, num_nodes=1, timeout_s=60)
    run_local(plan, 3, gpu=False, on_point=points.append, deadline_s=180)
    assert [m["op"] for m in points] == list(OPS)
    for m in points:
        assert m["correct"] is True
        # 4100 B = 1025 floats, rounded down to a whole multiple of the 3 ranks (1023)
        assert m["size_bytes"] == 1023 * 4
        factor = busbw_factor(m["op"], 3)
        assert m["busbw_bytes_per_s"] == pytest.approx(m["algbw_bytes_per_s"] * factor)


def test_one_rank_is_skipped_with_a_reason():
    ctx = ProbeContext(device=DeviceInfo(kind="cuda", count=1), quick=True, timing=FAST)
    run(ctx, denv=None)
    (rec,) = ctx.recorders
    assert rec.status == "skipped" and "at least 2 ranks" in rec.error


def test_a_rank_that_fails_is_reported_not_hung():
    plan = Plan(
        backend="no-such-backend",
        ops=("all_reduce",),
        sizes=(4096,),
        timing=FAST,
        num_nodes=1,
        timeout_s=20,
    )
    with pytest.raises(RuntimeError, match="rank"):
        run_local(plan, 2, gpu=False, on_point=lambda p: None, deadline_s=60)
