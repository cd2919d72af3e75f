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
        # 4100 B = 1025 floats, rounded down to whole rows of 8 per rank (1008 = 42 * 24)
        assert m["size_bytes"] == 1008 * 4
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


def test_variants_bf16_and_in_place_with_average_time_over_ranks():
    from gpuplan.probes.collectives import Case

    variants = (
        Case("all_reduce", "bfloat16", True),
        Case("all_gather", "bfloat16", True),
        Case("reduce_scatter", "bfloat16", True),
        Case("all_to_all", "bfloat16", False),
        Case("reduce_scatter", "float32", False),
    )
    plan = Plan(
        backend="gloo",
        ops=(),
        sizes=(1 << 14,),
        timing=FAST,
        num_nodes=1,
        timeout_s=60,
        cases=variants,
    )
    points = []
    run_local(plan, 3, gpu=False, on_point=points.append, deadline_s=180)
    assert [(p["op"], p["dtype"], p["inplace"]) for p in points] == [
        (c.op, c.dtype, c.inplace) for c in variants
    ]
    for p in points:
        CollectiveMeasurement.model_validate(p)
        assert p["correct"] is True, p
        assert p["time_over_ranks"] == "avg"
        # the average over ranks is never above the slowest rank's time of the same sample
        assert len(p["rank_max_samples_s"]) == len(p["samples_s"])
        for avg, slowest in zip(p["samples_s"], p["rank_max_samples_s"], strict=True):
            assert avg <= slowest * (1 + 1e-9)
    bf16 = [p for p in points if p["dtype"] == "bfloat16"]
    assert all(p["size_bytes"] == 8184 * 2 for p in bf16)  # 8192 elements -> rows of 8 x 3


def test_sizes_reach_8_gib_with_exact_64_bit_counts_and_memory_limits():
    from gpuplan.probes.collectives import Case, element_count, fits, sizes

    full = sizes(gpu=True, quick=False)
    assert full[-1] == 8 << 30 and max(sizes(gpu=True, quick=True)) == 1 << 30
    # 8 GiB of bf16 is 2^32 elements: past int32, counted exactly
    assert element_count(8 << 30, 2, 8) == 1 << 32
    assert element_count(8 << 30, 2, 24) % (8 * 24) == 0
    ag = Case("all_gather", "bfloat16", False)
    assert fits(ag, 8 << 30, 8, free_bytes=80 << 30)
    assert not fits(ag, 8 << 30, 8, free_bytes=16 << 30)  # 9 GiB > half of 16 GiB
    assert fits(Case("all_gather", "bfloat16", True), 8 << 30, 8, free_bytes=16 << 30)


class _LoopbackDist:
    """One rank: every collective leaves the data where it is (the identity for n = 1)."""

    def all_reduce(self, t, op=None):
        return None

    def broadcast(self, t, src=0):
        return None

    def all_gather_single(self, out, inp):
        if out.data_ptr() != inp.data_ptr():
            out.copy_(inp)

    def reduce_scatter_single(self, out, inp):
        if out.data_ptr() != inp.data_ptr():
            out.copy_(inp)

    def all_to_all_single(self, out, inp):
        out.copy_(inp)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_check_compares_in_slices_and_passes_for_a_correct_collective(op, dtype, monkeypatch):
    import torch

    from gpuplan.probes import collectives

    monkeypatch.setattr(collectives, "_CHECK_ROWS", 3)  # many slices on a small buffer
    for inplace in (False, True) if op in ("all_gather", "reduce_scatter") else (None,):
        coll = _Collective(
            torch,
            _LoopbackDist(),
            op,
            8 * 50,
            1,
            0,
            torch.device("cpu"),
            dtype=dtype,
            inplace=inplace,
        )
        assert coll.check() is True
        coll.out.fill_(3.0)  # and it stays able to fail
        assert coll._equal_rows(coll.out.view(-1, 8), torch.zeros(8, dtype=coll.out.dtype)) is False


def test_nccl_algorithm_and_nvls_are_read_from_its_log(tmp_path):
    from gpuplan.probes.base import ProbeRecorder
    from gpuplan.probes.collectives import annotate_with_nccl, nccl_debug_env

    env = nccl_debug_env(str(tmp_path), {})
    assert env["NCCL_DEBUG"] == "INFO" and "TUNING" in env["NCCL_DEBUG_SUBSYS"]
    assert env["NCCL_DEBUG_FILE"].startswith(str(tmp_path))
    assert nccl_debug_env(str(tmp_path), {"NCCL_DEBUG": "WARN"}) == {}  # the user's wins
    (tmp_path / "nccl.node1.4242.log").write_text(
        "node1:4242:4242 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
        "node1:4242:4242 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}\n"
        "node1:4242:4242 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}\n"
        "node1:4242:4242 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}\n"
        "node1:4242:4242 [0] NCCL INFO AllGather: 8589934592 Bytes -> Algo 4 proto 2 time 9000.0\n"
    )
    rec = ProbeRecorder("collectives", 1)
    rec.add({"op": "all_reduce", "size_bytes": 1 << 20})
    rec.add({"op": "all_gather", "size_bytes": 8 << 30})
    rec.add({"op": "all_to_all", "size_bytes": 1 << 20})
    annotate_with_nccl(rec, tmp_path)
    a, g, t = rec.measurements
    assert (a["nccl_algorithm"], a["nccl_protocol"]) == ("RING", "LL128")  # the most frequent
    assert (g["nccl_algorithm"], g["nccl_protocol"]) == ("NVLS", "SIMPLE")
    assert "nccl_algorithm" not in t  # all-to-all is send/recv: NCCL logs no algorithm
    assert rec.params["nvls_available"] is True and rec.params["nvls_used"] is True
    empty = tmp_path / "none"
    empty.mkdir()
    rec2 = ProbeRecorder("collectives", 1)
    annotate_with_nccl(rec2, empty)
    assert rec2.params["nccl_algorithms"].startswith("not recorded")
