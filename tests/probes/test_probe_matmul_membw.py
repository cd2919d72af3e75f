"""Matmul and memory-bandwidth probes on the CPU: sweeps, correctness checks, real points."""

from __future__ import annotations

import pytest
import torch

from gpuplan.probes import matmul, membw
from gpuplan.probes.base import DeviceInfo, ProbeContext
from gpuplan.probes.timing import TimingConfig
from gpuplan.results.schema import MatmulMeasurement, MembwMeasurement, ProbeResult

FAST = TimingConfig(warmups=1, min_sample_s=0.005, samples=3, min_samples=3)
CPU = DeviceInfo(kind="cpu", count=0)


def test_transformer_layer_shapes_split_with_tensor_parallelism():
    # Llama 3.1 70B: hidden 8192, 64 heads of 128, 8 KV heads, FFN 28672
    full = matmul.transformer_layer("l", hidden=8192, ffn=28672, heads=64, kv_heads=8, tokens=4096)
    assert [(g.m, g.n, g.k) for g in full] == [
        (4096, 10240, 8192),  # QKV: (64 + 2*8) * 128 columns
        (4096, 8192, 8192),
        (4096, 57344, 8192),  # gate and up projections together
        (4096, 8192, 28672),
    ]
    tp8 = matmul.transformer_layer(
        "l", hidden=8192, ffn=28672, heads=64, kv_heads=8, tokens=4096, tp=8
    )
    assert [(g.n, g.k) for g in tp8] == [(1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584)]
    assert full[0].flops == 2 * 4096 * 10240 * 8192


def test_sweeps_include_square_and_layer_shapes():
    for gpu in (False, True):
        for quick in (False, True):
            labels = [g.label for g in matmul.shapes(gpu=gpu, quick=quick)]
            assert any(lab.startswith("square") for lab in labels)
            assert any("qkv" in lab for lab in labels)
    assert max(g.m for g in matmul.shapes(gpu=True, quick=False)) >= 16384


def test_product_check_detects_a_wrong_result():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(64, 128, generator=gen)
    b = torch.randn(128, 300, generator=gen)
    c = a @ b
    assert matmul.check_product(torch, a, b, c) < matmul.TOLERANCE["fp32"]
    c[3, 7] += 1.0
    assert matmul.check_product(torch, a, b, c) > matmul.TOLERANCE["fp32"]
    # bf16 inputs, bf16 output: within the bf16 tolerance, not within fp32's
    a16, b16 = a.bfloat16(), b.bfloat16()
    err = matmul.check_product(torch, a16, b16, a16 @ b16)
    assert matmul.TOLERANCE["fp32"] < err < matmul.TOLERANCE["bf16"]


def test_cpu_precisions_are_fp32_and_bf16():
    names = [(p.name, p.dtype_name, why) for p, why in matmul.precisions(torch, gpu=False)]
    assert names == [("fp32", "float32", None), ("bf16", "bfloat16", None)]


def test_matmul_point_on_cpu_is_measured_and_correct():
    ctx = ProbeContext(device=CPU, timing=FAST)
    gemm = matmul.Gemm(128, 256, 64, "tiny")
    prec = matmul.Precision("fp32", "float32")
    point = matmul._measure_point(
        ctx, torch, gemm, prec, torch.device("cpu"), matmul.timer_for(CPU)
    )
    m = MatmulMeasurement.model_validate(point)
    assert m.correct is True
    assert m.flops_per_s == pytest.approx(2 * 128 * 256 * 64 / m.median_s)
    assert len(m.samples_s) == 3 and m.loops >= 1


def test_membw_sizes_go_well_past_the_llc():
    llc = 32 << 20
    quick = membw.sizes(llc, quick=True, limit_bytes=None)
    full = membw.sizes(llc, quick=False, limit_bytes=None)
    assert min(quick) < llc and max(quick) >= 8 * llc
    assert max(full) >= 16 * llc
    assert all(s & (s - 1) == 0 for s in quick + full)  # powers of two
    assert membw.sizes(llc, quick=True, limit_bytes=64 << 20)[-1] <= 64 << 20


@pytest.mark.parametrize("quick", [True, False])
def test_a_capped_sweep_still_reaches_past_a_large_llc(quick):
    """A 2-vCPU VM that sees its socket's 480 MiB L3 with 23 GiB free (a CI machine): the x8
    step jumps from 1 GiB to 4 GiB, over the 3.8 GiB cap, which left no point past the cache
    and no measured memory bandwidth (make test failed on a fresh clone there). The largest
    power of two within the cap is added when it is past the cache, and never one over it."""
    llc, cap = 480 << 20, 3923 << 20
    out = membw.sizes(llc, quick=quick, limit_bytes=cap)
    assert max(out) == 2048 << 20 >= membw.PAST_CACHE_FACTOR * llc
    assert all(s <= cap for s in out)
    # a cap too small to reach past the cache adds nothing the sweep did not have
    assert membw.sizes(llc, quick=quick, limit_bytes=1 << 30)[-1] <= 1 << 30


def test_membw_probe_counts_bytes_read_and_written(monkeypatch):
    # a small 'LLC' keeps the sweep short; the byte accounting is what is checked
    monkeypatch.setattr(membw, "device_llc_bytes", lambda torch, gpu, **kw: (1 << 20, "test"))
    ctx = ProbeContext(device=CPU, quick=True, timing=FAST)
    membw.run(ctx)
    rec, per_device = ctx.recorders  # the sweep, then the per-device loop
    assert per_device.params["scope"] == "per_device" and "scope" not in rec.params
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert result.params["llc_bytes"] == 1 << 20
    for m in result.typed():
        assert isinstance(m, MembwMeasurement)
        per_array = {"copy": 2, "triad": 3}[m.op]
        assert m.bytes_moved == per_array * m.size_bytes
        assert m.bytes_per_s == pytest.approx(m.bytes_moved / m.median_s)
    assert {m["op"] for m in result.measurements} == {"copy", "triad"}
    assert max(m["size_bytes"] for m in result.measurements) >= 8 << 20
    # both copies (driver memcpy and an elementwise kernel) at every size, best and median kept
    methods = {(m["op"], m["method"]) for m in result.measurements}
    assert methods == {("copy", "memcpy"), ("copy", "kernel"), ("triad", "kernel")}
    for m in result.measurements:
        assert m["best_bytes_per_s"] == pytest.approx(m["bytes_moved"] / m["min_s"])
        assert m["best_bytes_per_s"] >= m["bytes_per_s"]
        assert m["past_cache"] is (m["size_bytes"] >= 4 << 20)
    assert any(m["past_cache"] for m in result.measurements)
    assert any(not m["past_cache"] for m in result.measurements)
    assert {m["device_index"] for m in result.measurements} == {0}
    # the per-device loop measured the sweep's largest past-cache size, on the CPU for real
    loop = ProbeResult.model_validate(per_device.as_dict())
    assert loop.status == "ok", loop.error
    top = max(m["size_bytes"] for m in result.measurements)
    assert {(m["op"], m["size_bytes"], m["concurrent"]) for m in loop.measurements} == {
        (op, top, together) for op in ("copy", "triad") for together in (False, True)
    }
    for m in loop.measurements:
        assert m["bytes_moved"] == {"copy": 2, "triad": 3}[m["op"]] * top
        assert m["outlier"] is False and m["rel_to_median"] == 0.0  # one device: its own median
    assert set(loop.params["spread"]) == {
        "copy alone",
        "triad alone",
        "copy together",
        "triad together",
    }


class _Props:
    def __init__(self, l2):
        self.L2_cache_size = l2


class _FakeCudaTorch:
    """torch.cuda's device properties of a GPU that is not here (MI300X: 4 MB L2)."""

    def __init__(self, l2):
        self.cuda = type("cuda", (), {"get_device_properties": staticmethod(lambda i: _Props(l2))})


def test_a_256_mb_last_level_cache_gets_arrays_of_at_least_1_gib():
    # MI300X: torch reports the 4 MB L2; the catalog knows the 256 MB Infinity Cache
    torch4 = _FakeCudaTorch(4 << 20)
    llc, source = membw.device_llc_bytes(torch4, True, catalog_bytes=256 << 20)
    assert (llc, source) == (256 << 20, "catalog last_level_cache_bytes")
    assert membw.device_llc_bytes(torch4, True) == (
        4 << 20,
        "torch.cuda.get_device_properties().L2_cache_size",
    )
    for quick in (True, False):
        top = membw.sizes(
            llc, quick=quick, limit_bytes=None, min_top_bytes=membw.GPU_MIN_TOP_BYTES[quick]
        )
        assert top[-1] >= 1 << 30 and top[-1] >= membw.PAST_CACHE_FACTOR * llc
        assert top[0] < llc  # the cache knee stays visible
    # even where nothing knows the cache, a GPU's largest array is past a 256 MB one by 4x
    blind = membw.sizes(
        4 << 20, quick=True, limit_bytes=None, min_top_bytes=membw.GPU_MIN_TOP_BYTES[True]
    )
    assert blind[-1] >= 4 * (256 << 20)


def test_catalog_llc_is_read_with_a_fallback():
    row = type("Row", (), {"last_level_cache_bytes": 50 * 10**6})()
    assert membw.catalog_llc_bytes(row) == 50_000_000
    assert membw.catalog_llc_bytes(object()) is None
    assert membw.catalog_llc_bytes(None) is None


def test_transparent_hugepage_mode_and_cpu_arrays(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert membw.transparent_hugepage_mode(str(f)) == "madvise"
    assert membw.transparent_hugepage_mode(str(tmp_path / "none")) is None
    a, b, c = membw.arrays(torch, 1 << 20, torch.device("cpu"))
    assert (a == 0).all() and (b == 1).all() and (c == 2).all()
    assert a.dtype == torch.float32 and a.numel() == 1 << 20


def test_gpu_sweep_has_mamf_shapes_and_no_dispatch_bound_sizes():
    for quick in (True, False):
        sweep = matmul.shapes(gpu=True, quick=quick)
        assert (2048, 2048, 13312) in [(g.m, g.n, g.k) for g in sweep]
        assert any(g.label.startswith("mamf") and g.k != g.m for g in sweep)
        # 1024^3 bf16 lasts ~2 us on an H100: shorter than Python's dispatch of the call
        assert min(g.flops for g in sweep) >= 2 * 2048**3 - 1
    assert len({(g.m, g.n, g.k) for g in matmul.shapes(gpu=True, quick=False)}) >= 25


class _FakeEvent:
    """A CUDA event at the edge (no GPU here): records the host clock when recorded."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        return None

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def test_flushed_event_timer_times_the_calls_not_the_flushes():
    import time
    import types

    from gpuplan.probes.timing import FlushedEventTimer

    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Event=_FakeEvent, synchronize=lambda device=None: None)
    )
    order = []

    def flush():
        order.append("flush")
        time.sleep(0.004)

    def call():
        order.append("call")
        time.sleep(0.001)

    timer = FlushedEventTimer(fake, "cuda:0", flush)
    total = timer(call, 5)
    assert order == ["flush", "call"] * 5
    assert 0.005 <= total < 0.015  # 5 calls of 1 ms; the 5 x 4 ms of flushes are not counted
    timer(call, 3)
    assert len(timer._pool) == 5  # events are reused


def test_fp8_type_per_architecture():
    assert matmul.fp8_dtype_name(False, None) == "float8_e4m3fn"
    assert matmul.fp8_dtype_name(True, "gfx942") == "float8_e4m3fnuz"  # MI300X/MI325X
    assert matmul.fp8_dtype_name(True, "gfx950") == "float8_e4m3fn"  # MI355X: OCP
    assert matmul.fp8_dtype_name(True, "gfx90a") is None  # MI250X: no fp8


def test_rocm_tuning_is_set_recorded_and_restored(tmp_path):
    import types

    calls = []
    state = {"enabled": False, "tuning": False, "blas": "cublas", "file": None}
    tunable = types.SimpleNamespace(
        is_enabled=lambda: state["enabled"],
        tuning_is_enabled=lambda: state["tuning"],
        enable=lambda v: state.update(enabled=v),
        tuning_enable=lambda v: state.update(tuning=v),
        set_filename=lambda f: state.update(file=f),
        get_filename=lambda: state["file"],
        set_max_tuning_duration=lambda ms: calls.append(("max_ms", ms)),
        write_file=lambda: calls.append("write"),
    )

    def pref(value=None):
        if value is not None:
            state["blas"] = value
        return state["blas"]

    fake = types.SimpleNamespace(
        version=types.SimpleNamespace(hip="6.2"),
        cuda=types.SimpleNamespace(tunable=tunable),
        backends=types.SimpleNamespace(cuda=types.SimpleNamespace(preferred_blas_library=pref)),
    )
    with matmul.rocm_gemm_tuning(fake, tmp_path / "cache") as info:
        assert state["enabled"] and state["tuning"] and state["blas"] == "cublaslt"
        assert info["tunableop"] is True and info["blas_library"] == "hipblaslt"
        assert info["tunableop_file"].startswith(str(tmp_path / "cache"))
    assert (state["enabled"], state["tuning"], state["blas"]) == (False, False, "cublas")
    assert "write" in calls


def test_per_device_matmul_loop_runs_on_the_cpu_for_real():
    ctx = ProbeContext(device=CPU, quick=True, timing=FAST)
    precs = matmul.precisions(torch, gpu=False)
    matmul.run_per_device(ctx, torch, precs, {})
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert result.probe_version == 2 and result.params["scope"] == "per_device"
    assert result.params["device"] == "cpu:all" and result.params["devices"] == [0]
    alone, together = result.typed()
    assert (alone.concurrent, together.concurrent) == (False, True)
    for m in (alone, together):
        assert m.device_index == 0 and m.correct is True and m.outlier is False
        assert m.flops_per_s == pytest.approx(2 * 1024**3 / m.median_s)
    spread = result.params["spread"]
    assert spread["per-device 1024 alone"]["devices"] == 1
    assert spread["per-device 1024 together"]["rel_spread"] == 0.0


def _fake_node(rates_alone, rates_together, log=None):
    """A measure function standing in for the GPU edge (no GPU here): device i returns
    its rate; ``log`` collects (index, start, end) to check the concurrent phase."""
    import time

    calls = {"n": 0}

    def measure(i):
        calls["n"] += 1
        together = calls["n"] > len(rates_alone)
        start = time.perf_counter()
        time.sleep(0.05 if together else 0.0)
        if log is not None and together:
            log.append((i, start, time.perf_counter()))
        rate = (rates_together if together else rates_alone)[i]
        return {"label": "per-device 8192", "flops_per_s": rate, "uuid": f"GPU-{i}",
                "device_index": i}  # fmt: skip

    return measure


def test_a_slow_gpu_of_eight_is_flagged_alone_and_together():
    from gpuplan.probes import pergpu
    from gpuplan.probes.base import ProbeRecorder

    alone = {i: 700e12 for i in range(8)}
    alone[5] = 700e12 * 0.90  # 10 % slow
    alone[2] = 700e12 * 0.96  # 4 % slow: inside the 5 % threshold
    together = {i: 650e12 for i in range(8)}
    together[5] = 650e12 * 0.80
    log: list = []
    rec = ProbeRecorder("matmul", 2, params={})
    ctx = ProbeContext(device=DeviceInfo(kind="cuda", count=8))
    pergpu.run_phases(
        ctx, rec, list(range(8)), _fake_node(alone, together, log),
        value="flops_per_s", group="label",
    )  # fmt: skip
    assert len(rec.measurements) == 16
    flagged = {(m["device_index"], m["concurrent"]) for m in rec.measurements if m["outlier"]}
    assert flagged == {(5, False), (5, True)}
    s = rec.params["spread"]["per-device 8192 alone"]
    assert (s["min"], s["median"], s["max"]) == (alone[5], 700e12, 700e12)
    assert s["rel_spread"] == pytest.approx(0.10)
    assert s["outliers"] == [5]
    slow = next(m for m in rec.measurements if m["device_index"] == 5 and m["concurrent"])
    assert slow["rel_to_median"] == pytest.approx(-0.20)
    assert len(rec.warnings) == 2 and all("device 5 (GPU-5)" in w for w in rec.warnings)
    # all at once means at once: every device started before any finished
    assert len(log) == 8 and max(start for _, start, _ in log) < min(end for _, _, end in log)


def test_outlier_threshold_is_below_the_median_only():
    from gpuplan.probes import pergpu

    t = pergpu.OUTLIER_BELOW_MEDIAN
    assert pergpu.outliers({0: 100.0, 1: 100.0, 2: 100.0 * (1 - t) + 1e-9}) == {}
    got = pergpu.outliers({0: 100.0, 1: 100.0, 2: 100.0 * (1 - t) - 0.01})
    assert list(got) == [2]
    assert pergpu.outliers({0: 100.0, 1: 100.0, 2: 150.0}) == {}  # fast is not a defect


def test_a_device_that_fails_all_at_once_is_a_warning_and_the_others_are_kept():
    import threading

    from gpuplan.probes import pergpu
    from gpuplan.probes.base import ProbeRecorder

    def measure(i):
        together = threading.current_thread() is not threading.main_thread()
        if i == 1 and together:
            raise RuntimeError("CUDA error: an illegal memory access")
        return {"label": "x", "flops_per_s": 1.0, "device_index": i}

    rec = ProbeRecorder("matmul", 2, params={})
    ctx = ProbeContext(device=DeviceInfo(kind="cuda", count=2))
    pergpu.run_phases(ctx, rec, [0, 1], measure, value="flops_per_s", group="label")
    assert [(m["device_index"], m["concurrent"]) for m in rec.measurements] == [
        (0, False), (1, False), (0, True)
    ]  # fmt: skip
    assert any("device 1 (all at once): RuntimeError" in w for w in rec.warnings)


def test_device_identity_comes_from_the_matched_inventory():
    from gpuplan.probes import pergpu

    accs = [
        {"name": "H100", "uuid": "GPU-b", "pci_bus_id": "0000:1b:00.0", "torch_index": 1},
        {"name": "H100", "uuid": "GPU-a", "pci_bus_id": "0000:0a:00.0", "torch_index": 0},
    ]
    assert pergpu.identity(accs, 1, True) == {
        "device_index": 1, "uuid": "GPU-b", "pci_bus_id": "0000:1b:00.0"
    }  # fmt: skip
    assert pergpu.identity(accs, 0, False)["uuid"] is None


class _CpuAsCuda:
    """torch with a fake ``torch.cuda`` edge (no GPU here): ``count`` "GPUs" whose tensors
    are CPU tensors, so the probes' GPU branches (device sizing, per-device streams and
    contexts, identities, ``cuda:all``) run with real kernels underneath. Everything but
    ``cuda`` and ``device`` is the real torch."""

    def __init__(self, count: int, free_bytes: list[int]) -> None:
        import contextlib
        import types

        self._free = free_bytes
        self.cuda = types.SimpleNamespace(
            mem_get_info=lambda i=0: (self._free[i], 80 << 30),
            Stream=lambda device=None: None,
            stream=lambda s: contextlib.nullcontext(),
            device=lambda index: contextlib.nullcontext(),
            synchronize=lambda device=None: None,
            empty_cache=lambda: None,
        )

    def device(self, kind: str, index: int | None = None):
        return torch.device("cpu")

    def __getattr__(self, name: str):
        return getattr(torch, name)


def test_per_device_membw_on_a_fake_4_gpu_node_sizes_alike_and_names_each_gpu(monkeypatch):
    from gpuplan.probes.timing import WallTimer

    monkeypatch.setattr(membw, "timer_for", lambda device, index=0: WallTimer())
    # GPU 2 has the least free memory: every GPU gets arrays that fit on it
    fake = _CpuAsCuda(4, [8 << 20, 8 << 20, 3 << 20, 8 << 20])
    accs = [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{i}",
            "pci_bus_id": f"0000:{i}a:00.0",
            "torch_index": 3 - i,
        }
        for i in range(4)
    ]
    ctx = ProbeContext(device=DeviceInfo(kind="cuda", count=4), timing=FAST, accelerators=accs)
    membw.run_per_device(ctx, fake, 64 << 20, 1 << 20)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert result.params["device"] == "cuda:all" and result.params["devices"] == [0, 1, 2, 3]
    size = 512 << 10  # the largest power of two <= 3 MiB / 4 (three arrays and headroom)
    assert result.params["size_bytes"] == size
    assert {m["size_bytes"] for m in result.measurements} == {size}
    assert len(result.measurements) == 16  # 2 kernels x 4 GPUs x (alone, together)
    for m in result.measurements:  # torch index i is the inventory row with torch_index i
        assert m["uuid"] == f"GPU-{3 - m['device_index']}"
    assert set(result.params["spread"]) == {
        "copy alone", "triad alone", "copy together", "triad together"
    }  # fmt: skip
    assert all(s["devices"] == 4 for s in result.params["spread"].values())


def test_per_device_matmul_on_a_fake_4_gpu_node_takes_each_gpus_peak(monkeypatch):
    from gpuplan.probes.timing import WallTimer

    monkeypatch.setattr(matmul, "gpu_timer", lambda ctx, torch, device, index=0: (WallTimer(), {}))
    small = matmul.Gemm(128, 128, 128, "per-device 128")
    monkeypatch.setattr(
        matmul,
        "per_device_point",
        lambda torch, precs, gpu: (small, matmul.Precision("fp32", "float32")),
    )
    ctx = ProbeContext(
        device=DeviceInfo(kind="cuda", count=4),
        timing=FAST,
        spec_lookup=lambda index, precision: 1e12 * (index + 1),
    )
    matmul.run_per_device(ctx, _CpuAsCuda(4, [1 << 30] * 4), [], {})
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert sorted((m.device_index, m.concurrent) for m in result.typed()) == sorted(
        (i, c) for i in range(4) for c in (False, True)
    )
    for m in result.typed():
        assert m.spec_flops_per_s == 1e12 * (m.device_index + 1) and m.correct is True
