"""Matmul probe: achieved dense GEMM throughput by shape and dtype, correctness checked.

Shapes are square GEMMs (to find the best achievable rate, as in published "maximum
achievable matmul FLOPS" tables) and the GEMMs of one transformer layer (QKV projection,
attention output, MLP up and down) at the hidden sizes of common models, with and without
tensor parallelism, because calibration needs the efficiency at the shapes forecasts use.

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

from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.timing import measure

PROBE_VERSION = 1

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


def shapes(*, gpu: bool, quick: bool) -> list[Gemm]:
    """The sweep (documented in docs/probes.md)."""
    if gpu and quick:
        return square([1024, 4096, 8192]) + transformer_layer(
            "llama3-70b", **_LLAMA3_70B, tokens=4096
        )
    if gpu:
        return (
            square([1024, 2048, 4096, 8192, 12288, 16384])
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
    out.append((Precision("fp32", "float32"), None))
    tf32_ok = hip or major >= 8  # TF32 tensor cores from Ampere (sm_80)
    out.append((Precision("tf32", "tf32"), None if tf32_ok else f"no TF32 on sm_{major}{minor}"))
    bf16_ok = bool(torch.cuda.is_bf16_supported())
    out.append((Precision("bf16", "bfloat16"), None if bf16_ok else "bf16 not supported"))
    out.append((Precision("fp16", "float16"), None))
    fp8 = _fp8_dtype(torch)
    reason = None
    if fp8 is None:
        reason = "this torch has no float8 dtype"
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


def _fp8_dtype(torch: Any) -> Any:
    # MI300 (gfx942) implements the "fnuz" variant of e4m3.
    name = "float8_e4m3fnuz" if getattr(torch.version, "hip", None) else "float8_e4m3fn"
    return getattr(torch, name, None)


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
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

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
    scale = ref.abs().max().item()
    err = (got - ref).abs().max().item()
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


def run(ctx: ProbeContext) -> None:
    """Measure every shape of :func:`shapes` in every supported precision."""
    torch = import_torch()
    gpu = ctx.device.is_gpu
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    sweep = shapes(gpu=gpu, quick=ctx.quick)
    precs = precisions(torch, gpu=gpu)
    task = ctx.progress.task("matmul", total=len(sweep) * sum(1 for _, r in precs if r is None))
    timer = timer_for(ctx.device, 0)
    for prec, unsupported in precs:
        rec = ctx.record(
            "matmul",
            PROBE_VERSION,
            dtype=prec.dtype_name,
            precision=prec.name,
            device=str(device),
            threads=None if gpu else torch.get_num_threads(),
            tolerance=TOLERANCE[prec.name],
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


def _oom_errors(torch: Any) -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [MemoryError]
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None:
        errors.append(oom)
    return tuple(errors)


def _free(torch: Any, gpu: bool) -> None:
    if gpu:
        torch.cuda.empty_cache()
