"""Matmul probe: achieved dense GEMM throughput by shape and dtype, correctness checked.

Shapes are square GEMMs, a grid of non-square shapes in the manner of mamf-finder
(stas00/ml-engineering, ``compute/accelerator/benchmarks/mamf-finder.py``: the best
achievable rate of a GPU is found at shapes such as 2048x2048x13312, not at squares), and
the GEMMs of one transformer layer (QKV projection, attention output, MLP up and down) at
the hidden sizes of common models, with and without tensor parallelism, because
calibration needs the efficiency at the shapes forecasts use.

On GPUs, as mamf-finder does: the device is warmed up (clocks ramp, kernels are selected)
before the sweep; the L2 cache is flushed before every timed call by zeroing a buffer
twice the last-level cache, outside the timed region (CUDA/HIP events around each call,
:class:`gpuplan.probes.timing.FlushedEventTimer`); shapes below about 2048^3 are left out,
where one call is shorter than Python's dispatch of it. On ROCm, TunableOp is enabled
(``torch.cuda.tunable``: the fastest hipBLASLt/rocBLAS solution per shape, tuned during
the warmups, results cached under the cache folder) and hipBLASLt preferred; both are
recorded in ``params``. fp8 is OCP ``float8_e4m3fn`` on NVIDIA and gfx950 (MI350/MI355X)
and ``float8_e4m3fnuz`` on gfx942 (MI300X/MI325X); TF32 is measured only where it
engages (Ampere and newer; on ROCm only where a short check shows it faster than fp32).

Work: an (m x k) @ (k x n) product is ``2*m*n*k`` floating-point operations (one multiply
and one add per term). Correctness: a row and column slice of the product is recomputed
in float64 from the same (already rounded) inputs; ``max_rel_error`` is
``max|C - C_ref| / max|C_ref|`` on that slice, checked against a per-dtype tolerance.

Operands are laid out as ``torch.nn.Linear`` computes a layer, ``y = x @ W^T`` with the
weight stored (n x k) row-major (BLAS "NT"; fp8's ``_scaled_mm`` requires this layout
anyway): that is the GEMM a transformer runs, and on this project's CPU MKL runs it up to
~30 % faster than the all-row-major ("NN") product.

One ``ProbeResult`` per dtype. ``params.dtype`` is the torch dtype name (``float32``,
``bfloat16``, ``float16``, ``float8_e4m3fn``), or ``tf32`` for float32 tensors multiplied
with TF32 tensor cores; ``params.precision`` is the catalog's short name (fp32, tf32,
bf16, fp16, fp8), which ``gpuplan.catalogs`` uses for ``peak_flops_per_s``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuplan.probes import pergpu
from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.timing import measure

#: 2: every point says which device it ran on (``device_index``, ``uuid``, ``pci_bus_id``,
#: ``concurrent``); a ``params.scope: "per_device"`` result holds the per-GPU loop
PROBE_VERSION = 2

#: Tolerance of max|C - C_ref| / max|C_ref| per precision. The reference uses the same
#: rounded inputs, so the error is accumulation plus output rounding: fp32 ~ 2^-23 sqrt(k),
#: tf32 rounds inputs inside the tensor core to 10 mantissa bits (2^-11), bf16/fp8 outputs
#: round to 8 bits (2^-8 = 3.9e-3), fp16 to 11 bits (2^-11 = 4.9e-4).
TOLERANCE: dict[str, float] = {
    "fp32": 1e-4,
    "tf32": 1e-2,
    "bf16": 2e-2,
    "fp16": 5e-3,
    "fp8": 2e-2,
}

_REF_ROWS = 32
_REF_COLS = 256


@dataclass(frozen=True)
class Gemm:
    """An (m x k) @ (k x n) product."""

    m: int
    n: int
    k: int
    label: str

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def square(sizes: list[int]) -> list[Gemm]:
    return [Gemm(s, s, s, f"square {s}") for s in sizes]


def transformer_layer(
    name: str, *, hidden: int, ffn: int, heads: int, kv_heads: int, tokens: int, tp: int = 1
) -> list[Gemm]:
    """The four GEMMs of a gated-MLP transformer layer for ``tokens`` tokens on one TP rank.

    Megatron-style tensor parallelism (Shoeybi et al. 2019, section 3) splits QKV and the MLP
    up projection by output columns and the attention output and MLP down projection by
    input rows, so ``n`` or ``k`` shrink by ``tp``.
    """
    head_dim = hidden // heads
    qkv = (heads + 2 * kv_heads) * head_dim
    suffix = f" tp{tp}" if tp > 1 else ""
    return [
        Gemm(tokens, qkv // tp, hidden, f"{name} qkv{suffix}"),
        Gemm(tokens, hidden, hidden // tp, f"{name} attn-out{suffix}"),
        Gemm(tokens, 2 * ffn // tp, hidden, f"{name} mlp-up{suffix}"),
        Gemm(tokens, hidden, ffn // tp, f"{name} mlp-down{suffix}"),
    ]


# Architectures of public models (hidden, ffn, heads, kv_heads), from their config.json:
# Llama 3.1 8B and 70B (meta-llama/Llama-3.1-8B, -70B on Hugging Face).
_LLAMA3_8B = {"hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8}
_LLAMA3_70B = {"hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8}
# A small layer of the same form, for CPUs.
_SMALL = {"hidden": 1024, "ffn": 2816, "heads": 16, "kv_heads": 4}


def mamf_grid(ms: list[int], ks: list[int]) -> list[Gemm]:
    """Non-square GEMMs ``m = n`` in ``ms`` by ``k`` in ``ks`` (mamf-finder's search space is
    m, n, k from 256 to 20480 in steps of 256; this is a sample of its best region)."""
    return [Gemm(m, m, k, f"mamf {m}x{m}x{k}") for m in ms for k in ks if k != m]


def shapes(*, gpu: bool, quick: bool) -> list[Gemm]:
    """The sweep (documented in docs/probes.md)."""
    if gpu and quick:
        return (
            square([4096, 8192])
            + mamf_grid([2048, 4096], [13312])
            + transformer_layer("llama3-70b", **_LLAMA3_70B, tokens=4096)
        )
    if gpu:
        return (
            square([2048, 4096, 8192, 12288, 16384])
            + mamf_grid([2048, 4096, 8192], [4096, 8192, 13312, 16384])
            + transformer_layer("llama3-8b", **_LLAMA3_8B, tokens=8192)
            + transformer_layer("llama3-70b", **_LLAMA3_70B, tokens=8192)
            + transformer_layer("llama3-70b", **_LLAMA3_70B, tokens=8192, tp=8)
        )
    if quick:
        return square([256, 512, 1024]) + transformer_layer("small", **_SMALL, tokens=512)
    return (
        square([256, 512, 1024, 2048, 4096])
        + transformer_layer("small", **_SMALL, tokens=2048)
        + transformer_layer("llama3-8b", **_LLAMA3_8B, tokens=512)
    )


@dataclass(frozen=True)
class Precision:
    name: str  # catalog short name
    dtype_name: str  # params.dtype


def precisions(torch: Any, *, gpu: bool) -> list[tuple[Precision, str | None]]:
    """Precisions to measure and, for each, why it is unsupported (None when supported)."""
    if not gpu:
        return [(Precision("fp32", "float32"), None), (Precision("bf16", "bfloat16"), None)]
    out: list[tuple[Precision, str | None]] = []
    major, minor = torch.cuda.get_device_capability(0)
    hip = bool(getattr(torch.version, "hip", None))
    arch = gfx_arch(torch)
    out.append((Precision("fp32", "float32"), None))
    if hip:
        tf32_reason = tf32_check(torch, torch.device("cuda", 0))
    else:  # TF32 tensor cores from Ampere (sm_80)
        tf32_reason = None if major >= 8 else f"no TF32 on sm_{major}{minor}"
    out.append((Precision("tf32", "tf32"), tf32_reason))
    bf16_ok = bool(torch.cuda.is_bf16_supported())
    out.append((Precision("bf16", "bfloat16"), None if bf16_ok else "bf16 not supported"))
    out.append((Precision("fp16", "float16"), None))
    fp8 = _fp8_dtype(torch)
    reason = None
    if fp8 is None:
        reason = (
            f"no fp8 matrix cores on {arch}"
            if hip and fp8_dtype_name(True, arch) is None
            else "this torch has no float8 dtype"
        )
    elif not hip and (major, minor) < (8, 9):
        reason = f"fp8 tensor cores need sm_89 or newer (this GPU is sm_{major}{minor})"
    else:
        try:
            _fp8_call(torch, *_fp8_inputs(torch, 32, 32, 32, torch.device("cuda", 0)))()
        except Exception as exc:  # unsupported on this build/device
            reason = f"torch._scaled_mm failed: {type(exc).__name__}: {exc}"
    name = str(fp8).removeprefix("torch.") if fp8 is not None else "float8_e4m3fn"
    out.append((Precision("fp8", name), reason))
    return out


def gfx_arch(torch: Any, index: int = 0) -> str | None:
    """The AMD GPU's architecture (``gcnArchName`` without feature flags, e.g. gfx942)."""
    if not getattr(torch.version, "hip", None):
        return None
    try:
        name = getattr(torch.cuda.get_device_properties(index), "gcnArchName", None)
    except Exception:
        return None
    return str(name).split(":")[0] if name else None


def fp8_dtype_name(hip: bool, arch: str | None) -> str | None:
    """The e4m3 fp8 type of the device's matrix cores, None where it has none.

    gfx942 (MI300X, MI325X) implements the "fnuz" variant (no negative zero, no infinities,
    bias 8); gfx950 (MI350X, MI355X) and NVIDIA implement OCP e4m3 ("fn"); gfx90a (MI250X)
    has no fp8.

    >>> fp8_dtype_name(False, None), fp8_dtype_name(True, "gfx942"), fp8_dtype_name(True, "gfx950")
    ('float8_e4m3fn', 'float8_e4m3fnuz', 'float8_e4m3fn')
    >>> fp8_dtype_name(True, "gfx90a") is None
    True
    """
    if not hip:
        return "float8_e4m3fn"
    if arch is None:
        return None
    if arch.startswith("gfx94"):
        return "float8_e4m3fnuz"
    if arch.startswith(("gfx95", "gfx12")):
        return "float8_e4m3fn"
    return None


def _fp8_dtype(torch: Any) -> Any:
    hip = bool(getattr(torch.version, "hip", None))
    name = fp8_dtype_name(hip, gfx_arch(torch) if hip else None)
    return getattr(torch, name, None) if name else None


def tf32_check(torch: Any, device: Any, size: int = 4096, calls: int = 5) -> str | None:
    """None when TF32 engages (float32 matmul clearly faster with TF32 on), else why not.

    On ROCm TF32 (hipBLASLt "xf32") exists on gfx942 only and only when the build enables
    it; elsewhere ``allow_tf32`` is silently ignored, so it is measured, not assumed.
    """
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    times = {}
    for mode in ("fp32", "tf32"):
        with _float32_mode(torch, mode):
            torch.matmul(a, b)  # select the kernel
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                torch.matmul(a, b)
            end.record()
            end.synchronize()
            times[mode] = start.elapsed_time(end)
    del a, b
    if times["tf32"] * 1.5 < times["fp32"]:
        return None
    return (
        f"TF32 does not engage on this device ({size}^3: tf32 {times['tf32'] / calls:.2f} ms,"
        f" fp32 {times['fp32'] / calls:.2f} ms)"
    )


@contextlib.contextmanager
def rocm_gemm_tuning(torch: Any, cache_dir: Any) -> Iterator[dict[str, Any]]:
    """On ROCm: TunableOp on (tuned in the warmups, results in ``cache_dir``), hipBLASLt
    preferred; yields what was set (recorded in ``params``) and restores the settings.
    On NVIDIA yields the BLAS library in use and changes nothing."""
    info: dict[str, Any] = {}
    backends = getattr(torch.backends, "cuda", None)
    pref = getattr(backends, "preferred_blas_library", None)
    if not getattr(torch.version, "hip", None):
        with contextlib.suppress(Exception):
            info["blas_library"] = str(pref()).rsplit(".", 1)[-1].lower() if pref else None
        yield info
        return
    tunable = getattr(torch.cuda, "tunable", None)
    old_blas = None
    old_tunable: tuple[bool, bool] | None = None
    try:
        if pref is not None:
            with contextlib.suppress(Exception):
                old_blas = pref()
                pref("cublaslt")  # hipBLASLt under ROCm
        if tunable is not None:
            with contextlib.suppress(Exception):
                old_tunable = (tunable.is_enabled(), tunable.tuning_is_enabled())
                from pathlib import Path

                Path(cache_dir).mkdir(parents=True, exist_ok=True)
                tunable.set_filename(str(Path(cache_dir) / "tunableop_results%d.csv"))
                tunable.set_max_tuning_duration(100)  # ms per GEMM shape
                tunable.enable(True)
                tunable.tuning_enable(True)
        with contextlib.suppress(Exception):
            if pref is not None:
                info["blas_library"] = "hipblaslt" if "lt" in str(pref()).lower() else str(pref())
        info["tunableop"] = bool(tunable is not None and _q(tunable.is_enabled))
        info["tunableop_file"] = _q(tunable.get_filename) if tunable is not None else None
        yield info
    finally:
        if tunable is not None and old_tunable is not None:
            with contextlib.suppress(Exception):
                tunable.write_file()
                tunable.tuning_enable(old_tunable[1])
                tunable.enable(old_tunable[0])
        if pref is not None and old_blas is not None:
            with contextlib.suppress(Exception):
                pref(old_blas)


def _q(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _fp8_inputs(torch: Any, m: int, n: int, k: int, device: Any) -> tuple[Any, Any]:
    gen = torch.Generator(device=device).manual_seed(0)
    fp8 = _fp8_dtype(torch)
    a = torch.randn(m, k, device=device, generator=gen).to(fp8)
    # _scaled_mm wants the second operand column-major
    b = torch.randn(n, k, device=device, generator=gen).to(fp8).t()
    return a, b


def _fp8_call(torch: Any, a: Any, b: Any) -> Any:
    one = torch.ones((), device=a.device, dtype=torch.float32)

    def call() -> Any:
        out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return out[0] if isinstance(out, tuple) else out  # torch < 2.5 returned (out, amax)

    return call


@contextlib.contextmanager
def _float32_mode(torch: Any, precision: str) -> Iterator[None]:
    """fp32 with TF32 off, or TF32 on; the previous setting is restored."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def check_product(torch: Any, a: Any, b: Any, c: Any) -> float:
    """``max|C - C_ref| / max|C_ref|`` on a row/column slice, C_ref in float64."""
    r = min(a.shape[0], _REF_ROWS)
    cols = min(b.shape[1], _REF_COLS)
    a64 = a[:r].to(torch.float64)
    b64 = b[:, :cols].to(torch.float64)
    ref = a64 @ b64
    got = c[:r, :cols].to(torch.float64)
    scale = float(ref.abs().max().item())
    err = float((got - ref).abs().max().item())
    return err / scale if scale > 0 else err


def _measure_point(
    ctx: ProbeContext, torch: Any, gemm: Gemm, prec: Precision, device: Any, timer: Any
) -> dict[str, Any]:
    if prec.name == "fp8":
        a, b = _fp8_inputs(torch, gemm.m, gemm.n, gemm.k, device)
        fn = _fp8_call(torch, a, b)
        c = fn()
    else:
        dtype = torch.float32 if prec.name in ("fp32", "tf32") else getattr(torch, prec.dtype_name)
        gen = torch.Generator(device=device).manual_seed(gemm.m * 31 + gemm.n * 7 + gemm.k)
        a = torch.randn(gemm.m, gemm.k, device=device, generator=gen, dtype=torch.float32).to(dtype)
        # nn.Linear's layout: y = x @ W^T with the weight W stored (n x k) row-major
        w = torch.randn(gemm.n, gemm.k, device=device, generator=gen, dtype=torch.float32).to(dtype)
        b = w.t()
        c = torch.empty(gemm.m, gemm.n, device=device, dtype=dtype)
        fn = functools.partial(torch.matmul, a, b, out=c)
        fn()
    rel_err = check_product(torch, a, b, c)
    timed = measure(fn, timer, ctx.timing)
    return {
        "shape": {"m": gemm.m, "n": gemm.n, "k": gemm.k},
        "label": gemm.label,
        **timed.as_dict(),
        "flops_per_s": gemm.flops / timed.median_s,
        "correct": rel_err <= TOLERANCE[prec.name],
        "max_rel_error": rel_err,
    }


def flush_bytes(llc_bytes: int) -> int:
    """Size of the buffer zeroed before each timed call: twice the last-level cache and at
    least 256 MiB (mamf-finder zeroes 256 MB)."""
    return max(2 * llc_bytes, 256 << 20)


def device_warmup(torch: Any, device: Any, seconds: float) -> float:
    """Run 8192^3 bf16 GEMMs for about ``seconds`` so that clocks and power settle before the
    sweep (mamf-finder warms up the same way); returns the time spent."""
    import time

    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.randn(8192, 8192, device=device, dtype=dtype)
    b = torch.randn(8192, 8192, device=device, dtype=dtype)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            torch.matmul(a, b)
        torch.cuda.synchronize(device)
    del a, b
    return time.perf_counter() - start


def gpu_timer(
    ctx: ProbeContext, torch: Any, device: Any, index: int = 0
) -> tuple[Any, dict[str, Any]]:
    """The flushed event timer of GPU ``index`` and what it does (recorded in ``params``)."""
    from gpuplan.catalogs.cache import catalog_llc_bytes
    from gpuplan.probes.membw import device_llc_bytes
    from gpuplan.probes.timing import FlushedEventTimer

    llc, source = device_llc_bytes(
        torch, True, index=index, catalog_bytes=catalog_llc_bytes(ctx.catalog_row(index))
    )
    size = flush_bytes(llc)
    cache = torch.empty(size // 4, dtype=torch.int32, device=device)
    timer = FlushedEventTimer(torch, device, cache.zero_)
    return timer, {
        "l2_flush_bytes": size,
        "llc_bytes": llc,
        "llc_source": source,
        "timing": "events per call, cache flushed before each",
    }


def run(ctx: ProbeContext) -> None:
    """Measure every shape of :func:`shapes` in every supported precision."""
    from gpuplan.paths import cache_dir

    torch = import_torch()
    gpu = ctx.device.is_gpu
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    sweep = shapes(gpu=gpu, quick=ctx.quick)
    with contextlib.ExitStack() as stack:
        tuning = stack.enter_context(rocm_gemm_tuning(torch, cache_dir())) if gpu else {}
        precs = precisions(torch, gpu=gpu)
        extra: dict[str, Any] = dict(tuning)
        if gpu:
            timer, timing_params = gpu_timer(ctx, torch, device)
            extra.update(timing_params)
            extra["gfx_arch"] = gfx_arch(torch)
            extra["device_warmup_s"] = device_warmup(torch, device, 1.0 if ctx.quick else 5.0)
        else:
            timer = timer_for(ctx.device, 0)
        _run_sweep(ctx, torch, gpu, device, sweep, precs, timer, extra)
        _free(torch, gpu)
        if gpu:
            del timer  # its flush buffer
        run_per_device(ctx, torch, precs, {k: v for k, v in tuning.items()})


def _run_sweep(
    ctx: ProbeContext,
    torch: Any,
    gpu: bool,
    device: Any,
    sweep: list[Gemm],
    precs: list[tuple[Precision, str | None]],
    timer: Any,
    extra: dict[str, Any],
) -> None:
    task = ctx.progress.task("matmul", total=len(sweep) * sum(1 for _, r in precs if r is None))
    for prec, unsupported in precs:
        rec = ctx.record(
            "matmul",
            PROBE_VERSION,
            dtype=prec.dtype_name,
            precision=prec.name,
            device=str(device),
            threads=None if gpu else torch.get_num_threads(),
            tolerance=TOLERANCE[prec.name],
            **extra,
        )
        if unsupported:
            rec.skip(unsupported)
            continue
        spec = ctx.spec_lookup(0, prec.name) if (gpu and ctx.spec_lookup) else None
        with ctx.power_sampling(rec, [0] if gpu else []), _float32_mode(torch, prec.name):
            for gemm in sweep:
                ctx.check_deadline()
                try:
                    point = _measure_point(ctx, torch, gemm, prec, device, timer)
                except _oom_errors(torch) as exc:
                    rec.warn(f"{gemm.label} ({gemm.m}x{gemm.n}x{gemm.k}): out of memory: {exc}")
                    _free(torch, gpu)
                    task.advance()
                    continue
                point["spec_flops_per_s"] = spec
                point.update(pergpu.identity(ctx.accelerators, 0, gpu), concurrent=False)
                rec.add(point)
                if not point["correct"]:
                    rec.warn(
                        f"{gemm.label}: result incorrect (max_rel_error {point['max_rel_error']:.2e}"
                        f" > {TOLERANCE[prec.name]:g})"
                    )
                task.advance()
                ctx.point_done()
        _free(torch, gpu)
        wrong = [m["label"] for m in rec.measurements if m["correct"] is False]
        if wrong:
            rec.fail(f"incorrect results at {', '.join(wrong)}")
        else:
            rec.ok()


def per_device_point(
    torch: Any, precs: list[tuple[Precision, str | None]], *, gpu: bool
) -> tuple[Gemm, Precision] | None:
    """The GEMM each device runs alone and all together: 8192^3 in bf16 (fp16 where bf16
    is unsupported) on GPUs, a size in mamf-finder's flat region, long enough (~1 ms)
    that launch and dispatch do not count; 1024^3 fp32 on CPUs (bf16 GEMMs are slow on
    CPUs without AMX). None when no such precision is supported."""
    supported = {p.name: p for p, why in precs if why is None}
    if not gpu:
        return Gemm(1024, 1024, 1024, "per-device 1024"), supported["fp32"]
    for name in ("bf16", "fp16"):
        if name in supported:
            return Gemm(8192, 8192, 8192, "per-device 8192"), supported[name]
    return None


def run_per_device(
    ctx: ProbeContext,
    torch: Any,
    precs: list[tuple[Precision, str | None]],
    extra: dict[str, Any],
) -> None:
    """One GEMM on every device alone, then on all at once (:mod:`gpuplan.probes.pergpu`):
    one ``ProbeResult`` with ``params.scope: "per_device"``, the spread per phase in
    ``params.spread`` and an ``outlier`` flag on every point."""
    gpu = ctx.device.is_gpu
    devices = list(range(ctx.device.count)) if gpu else [0]
    chosen = per_device_point(torch, precs, gpu=gpu)
    if chosen is None:
        rec = ctx.record("matmul", PROBE_VERSION, scope="per_device")
        rec.skip("neither bf16 nor fp16 is supported: no per-device GEMM")
        return
    gemm, prec = chosen
    rec = ctx.record(
        "matmul",
        PROBE_VERSION,
        scope="per_device",
        dtype=prec.dtype_name,
        precision=prec.name,
        device="cuda:all" if gpu else "cpu:all",
        devices=devices,
        concurrency="threads, one stream per device, released by a barrier",
        outlier_threshold=pergpu.OUTLIER_BELOW_MEDIAN,
        threads=None if gpu else torch.get_num_threads(),
        tolerance=TOLERANCE[prec.name],
        **extra,
    )
    task = ctx.progress.task("matmul per GPU", total=2 * len(devices))

    def measure_on(index: int) -> dict[str, Any]:
        ctx.check_deadline()
        if gpu:
            device = torch.device("cuda", index)
            with torch.cuda.device(index), torch.cuda.stream(torch.cuda.Stream(device)):
                timer, _ = gpu_timer(ctx, torch, device, index)
                point = _measure_point(ctx, torch, gemm, prec, device, timer)
                del timer
        else:
            point = _measure_point(
                ctx, torch, gemm, prec, torch.device("cpu"), timer_for(ctx.device)
            )
        spec = ctx.spec_lookup(index, prec.name) if (gpu and ctx.spec_lookup) else None
        point.update(pergpu.identity(ctx.accelerators, index, gpu), spec_flops_per_s=spec)
        task.advance()
        return point

    with ctx.power_sampling(rec, devices if gpu else []), _float32_mode(torch, prec.name):
        pergpu.run_phases(ctx, rec, devices, measure_on, value="flops_per_s", group="label")
    _free(torch, gpu)
    wrong = [f"device {m['device_index']}" for m in rec.measurements if m["correct"] is False]
    if wrong:
        rec.fail(f"incorrect results on {', '.join(wrong)}")
    else:
        rec.ok()


def _oom_errors(torch: Any) -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [MemoryError]
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None:
        errors.append(oom)
    return tuple(errors)


def _free(torch: Any, gpu: bool) -> None:
    if gpu:
        torch.cuda.empty_cache()
