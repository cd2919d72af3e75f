"""The training-step probe: real transformer blocks of a catalog model, forward, backward, AdamW.

``gpuplan probe --workload train --model ID`` builds ``blocks`` decoder blocks with the
model's shapes (hidden, query and key/value heads, head dimension, MLP width) and times,
for a few warm-up and then timed iterations, each phase of a training step on them:

* **forward**: pre-norm attention block (RMSNorm, fused QKV projection,
  ``torch.nn.functional.scaled_dot_product_attention`` with the causal mask -- the kernel
  PyTorch's dispatcher picks for these shapes is recorded as ``attention_backend`` --, output
  projection, residual) and MLP block (RMSNorm, SwiGLU or GELU MLP, residual);
* **backward**: ``out.backward(dy)`` with a fixed random output gradient (the block's
  gradients, no loss kernel), input gradient included as for a middle layer of a model;
* **optimizer**: ``torch.optim.AdamW`` step over the block's parameters and
  ``zero_grad``.

Each phase is timed on its own (the device synchronised at its ends), so their sum is a
step of these blocks without overlap. Per-block figures divide by ``blocks``.

Tensor parallelism (``--tp N > 1``) follows Megatron-LM (Shoeybi et al. 2019, "Megatron-LM",
arXiv 1909.08053, section 3, figure 3): QKV and the MLP's first GEMM are column-parallel,
the attention output projection and the MLP's last GEMM row-parallel, with one all-reduce
after each row-parallel GEMM in the forward (``g``) and one before each column-parallel
GEMM in the backward (``f``); no sequence parallelism. The ranks are one process per GPU
(NCCL) or ``--tp`` spawned CPU processes (gloo), or the ranks of a ``torchrun`` job whose
world size is ``--tp``; the time of each phase is the slowest rank's.

What is approximated, and said in the record's ``approximations``:

* MoE layers run as a dense MLP of the width a token's routed plus shared experts add up to
  (``top_k x moe_ffn_hidden + shared``): same GEMM FLOPs per token, no router, permutation
  or grouped GEMM;
* MLA runs as multi-head attention with its query/key head dimension; hybrid
  (Mamba-2) models run their attention + MLP block shapes; rotary embeddings, QK-norm and
  biases are left out (elementwise work, a few percent of a block).

On a CPU the block is shrunk by ``scale`` (hidden, heads, key/value heads and MLP width
divided by it, head dimension kept; key/value heads at least ``--tp``), default
``ceil(hidden / 256)`` rounded up to a power of two, so that the whole path runs in CI in
seconds; GEMMs run in float32 there. On a GPU the block is full size (``scale`` 1) in
``torch.autocast`` bfloat16 over fp32 parameters and AdamW state (PyTorch automatic mixed
precision).

Memory: on a GPU ``torch.cuda.max_memory_allocated`` over the timed iterations (rank 0); on a
CPU the process's peak resident set (``VmHWM`` of ``/proc/self/status`` after resetting it
through ``/proc/self/clear_refs``; it includes the interpreter and torch) less the resident
set before the blocks were built, or ``ru_maxrss`` where ``/proc`` cannot be reset (then
``memory_method`` says so).

The forecast's block time for the same shapes, and so the calibration factor, is computed
where the forecast is (:mod:`gpuplan.forecast.train_calibration`): probes sit below the
forecast in the layering.
"""

from __future__ import annotations

import datetime
import math
import os
import queue as queue_mod
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpuplan.errors import InputError
from gpuplan.probes.base import ProbeContext, import_torch

PROBE_VERSION = 1
#: framework label of a run that names none: the probe's own eager PyTorch blocks
DEFAULT_FRAMEWORK = "pytorch-eager"
#: hidden size a CPU run shrinks the block to (about; see :func:`cpu_scale`)
CPU_TARGET_HIDDEN = 256
#: iterations (warm-up, timed): default and quick runs, GPU and CPU alike
ITERATIONS = {False: (3, 10), True: (2, 5)}
#: sequence length and micro-batch of a CPU run when not given
CPU_DEFAULT_SEQ_LEN, CPU_DEFAULT_MICRO_BATCH = 128, 1
GPU_DEFAULT_SEQ_LEN, GPU_DEFAULT_MICRO_BATCH = 4096, 1
#: the only GEMM precision this probe runs (a label for the forecast's dtype)
PRECISIONS = ("bf16",)


@dataclass(frozen=True, kw_only=True)
class BlockShape:
    """Shapes of one decoder block as the probe builds it."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    """Width of the (dense) MLP the block runs."""
    gated_mlp: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_tp(self, tp: int) -> None:
        """Refuse a TP size the shapes cannot be split by (Megatron splits heads and MLP)."""
        for name, value in (
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn_hidden", self.ffn_hidden),
        ):
            if value % tp:
                good = [d for d in range(1, self.kv_heads + 1) if self.kv_heads % d == 0]
                raise InputError(
                    f"--tp {tp} does not divide the block's {name} ({value})",
                    hint="use --tp " + "|".join(map(str, good)),
                )


def block_shape_from_catalog(row: Any) -> tuple[BlockShape, list[str]]:
    """The block a catalog model row maps to, and what it approximates (see module doc)."""
    notes: list[str] = []
    heads, kv_heads = int(row.heads), int(row.kv_heads)
    head_dim = int(row.head_dim)
    if getattr(row, "attention", None) == "mla":
        kv_heads = heads
        notes.append(
            f"MLA run as multi-head attention with head_dim {head_dim} (no latent projections)"
        )
    ffn = int(row.ffn_hidden)
    if int(getattr(row, "num_experts", 0) or 0) > 0:
        expert = int(row.moe_ffn_hidden or row.ffn_hidden)
        shared = int(getattr(row, "shared_expert_ffn_hidden", None) or expert)
        ffn = int(row.top_k) * expert + int(row.num_shared_experts or 0) * shared
        notes.append(
            f"MoE MLP run dense with width top_k x expert (+ shared) = {ffn}: same GEMM FLOPs "
            "per token, no router, permutation or grouped GEMM"
        )
    if int(getattr(row, "mamba_layers", 0) or 0) > 0:
        notes.append("hybrid model: only its attention + MLP block shapes run (no Mamba-2 mixer)")
    if getattr(row, "sliding_window", None):
        notes.append("sliding-window layers run with full causal attention")
    if getattr(row, "attention_chunk", None):
        notes.append("chunked-attention layers run with full causal attention")
    if getattr(row, "dsa", None) is not None:
        notes.append("DeepSeek sparse attention run dense (no indexer, every key attended)")
    notes.append("no rotary embedding, QK-norm or biases (elementwise, a few % of a block)")
    shape = BlockShape(
        hidden=int(row.hidden),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn_hidden=ffn,
        gated_mlp=bool(row.gated_mlp),
    )
    return shape, notes


def cpu_scale(shape: BlockShape) -> int:
    """Default shrink factor on a CPU: ``ceil(hidden / 256)`` up to a power of two.

    >>> cpu_scale(BlockShape(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn_hidden=14336))
    16
    >>> cpu_scale(BlockShape(hidden=128, heads=2, kv_heads=2, head_dim=64, ffn_hidden=512))
    1
    """
    need = max(1, math.ceil(shape.hidden / CPU_TARGET_HIDDEN))
    return int(2 ** math.ceil(math.log2(need)))


def shrink(shape: BlockShape, scale: int, tp: int) -> BlockShape:
    """``shape`` with hidden, heads, key/value heads and MLP width divided by ``scale``.

    The head dimension is kept; key/value heads stay at least ``tp`` and the query heads a
    multiple of them; the MLP width is rounded to a multiple of ``8 x tp``.

    >>> s = BlockShape(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn_hidden=14336)
    >>> shrink(s, 16, 2)
    BlockShape(hidden=256, heads=2, kv_heads=2, head_dim=128, ffn_hidden=896, gated_mlp=True)
    """
    if scale == 1:
        return shape
    kv = max(tp, shape.kv_heads // scale)
    heads = max(kv, shape.heads // scale)
    heads -= heads % kv
    step = 8 * tp
    ffn = max(step, round(shape.ffn_hidden / scale / step) * step)
    return replace(
        shape, hidden=max(8, shape.hidden // scale), heads=heads, kv_heads=kv, ffn_hidden=ffn
    )


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """What one training-step probe run measures (``ctx.workload`` holds these fields)."""

    model: str
    """Catalog model id."""
    shape: dict[str, Any]
    """The model's full-size :class:`BlockShape` fields."""
    approximations: list[str] = field(default_factory=list)
    framework: str = DEFAULT_FRAMEWORK
    seq_len: int | None = None
    micro_batch: int | None = None
    tp: int = 1
    blocks: int = 2
    scale: int | None = None
    """Shrink factor; None: 1 on a GPU, :func:`cpu_scale` on a CPU."""
    precision: str = "bf16"
    device_id: str | None = None
    """Catalog GPU the run stands for (calibration label; default: the node's GPU)."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("seq_len", "micro_batch", "scale"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise InputError(f"--{name.replace('_', '-')} must be positive (got {v})")
        if self.tp <= 0:
            raise InputError(f"--tp must be positive (got {self.tp})")
        if self.blocks <= 0:
            raise InputError(f"--blocks must be positive (got {self.blocks})")
        if self.precision not in PRECISIONS:
            raise InputError(
                f"--precision {self.precision!r}: the training probe runs bf16 blocks only",
                hint="use --precision bf16 (the factor applies to every precision's compute)",
            )
        if not self.framework.strip():
            raise InputError("--framework is empty", hint="e.g. --framework torchtitan")


# ------------------------------------------------------------------------------- the block
def _tp_functions(torch: Any, group_size: int) -> tuple[Any, Any]:
    """Megatron's ``f`` (identity forward, all-reduce backward) and ``g`` (all-reduce
    forward, identity backward) operators (Shoeybi et al. 2019, figure 3)."""
    import torch.distributed as dist

    class CopyToTP(torch.autograd.Function):  # type: ignore[misc]
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            grad = grad.contiguous()
            dist.all_reduce(grad)
            return grad

    class ReduceFromTP(torch.autograd.Function):  # type: ignore[misc]
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            x = x.contiguous()
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad

    if group_size == 1:
        return (lambda x: x), (lambda x: x)
    return CopyToTP.apply, ReduceFromTP.apply


def build_blocks(torch: Any, shape: BlockShape, tp: int, blocks: int, device: Any) -> Any:
    """``blocks`` decoder blocks holding this rank's TP shards (fp32 parameters)."""
    nn = torch.nn
    F = torch.nn.functional
    copy_to_tp, reduce_from_tp = _tp_functions(torch, tp)
    heads_l, kv_l = shape.heads // tp, shape.kv_heads // tp
    d = shape.head_dim
    ffn_l = shape.ffn_hidden // tp
    norm = getattr(nn, "RMSNorm", None) or nn.LayerNorm

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            h = shape.hidden
            self.norm1 = norm(h)
            self.qkv = nn.Linear(h, (heads_l + 2 * kv_l) * d, bias=False)
            self.proj = nn.Linear(heads_l * d, h, bias=False)
            self.norm2 = norm(h)
            self.fc1 = nn.Linear(h, ffn_l * (2 if shape.gated_mlp else 1), bias=False)
            self.fc2 = nn.Linear(ffn_l, h, bias=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            y = self.qkv(copy_to_tp(self.norm1(x)))
            q, k, v = y.split([heads_l * d, kv_l * d, kv_l * d], dim=-1)
            q = q.view(b, s, heads_l, d).transpose(1, 2)
            k = k.view(b, s, kv_l, d).transpose(1, 2)
            v = v.view(b, s, kv_l, d).transpose(1, 2)
            if kv_l != heads_l:  # GQA: each key/value head serves heads_l / kv_l queries
                k = k.repeat_interleave(heads_l // kv_l, dim=1)
                v = v.repeat_interleave(heads_l // kv_l, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + reduce_from_tp(self.proj(a.transpose(1, 2).reshape(b, s, heads_l * d)))
            u = self.fc1(copy_to_tp(self.norm2(x)))
            if shape.gated_mlp:
                gate, up = u.chunk(2, dim=-1)
                u = F.silu(gate) * up
            else:
                u = F.gelu(u)
            return x + reduce_from_tp(self.fc2(u))

    model = nn.Sequential(*[Block() for _ in range(blocks)]).to(device)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    return model


_BACKEND_OPS = (
    ("_cudnn_attention", "cudnn"),
    ("_flash_attention_for_cpu", "flash (cpu)"),
    ("_flash_attention", "flash"),
    ("_efficient_attention", "efficient"),
    ("_attention_math", "math"),
)


_CHOICES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}


def attention_backend(
    torch: Any, shape: BlockShape, tp: int, tokens: tuple[int, int], dev: Any, dtype: Any
) -> str:
    """Which SDPA kernel PyTorch dispatches these shapes to.

    The dispatcher's own choice (``torch._fused_sdp_choice``, what
    ``scaled_dot_product_attention`` calls to pick its kernel) where torch has it, else the
    op names a profiled call ran (``flash (cpu)`` is the CPU flash kernel)."""
    b, s = tokens
    heads_l = shape.heads // tp
    q = torch.randn(b, heads_l, s, shape.head_dim, device=dev, dtype=dtype)
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is not None:
        try:
            code = int(choose(q, q, q, None, 0.0, True))
        except (RuntimeError, TypeError):
            code = None
        if code in _CHOICES:
            label = _CHOICES[int(code)]
            return f"{label} (cpu)" if label == "flash" and dev.type == "cpu" else label
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    names = [e.key for e in prof.key_averages()]
    for op, label in _BACKEND_OPS:
        if any(op in n for n in names):
            return label
    return "unknown (" + ", ".join(n for n in names if "attention" in n)[:120] + ")"


def _rss_now() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def measure_rank(spec: dict[str, Any], rank: int, world: int, device: Any) -> dict[str, Any]:
    """Build the blocks on this rank and time ``warmups + iters`` training steps.

    Returns the per-iteration phase times (the slowest rank's when ``world > 1``), the
    memory figure and the attention kernel; the caller has set up the process group.
    """
    torch = import_torch()
    shape = BlockShape(**spec["block"])
    gpu = device.type == "cuda"
    tp, blocks = int(spec["tp"]), int(spec["blocks"])
    b, s = int(spec["micro_batch"]), int(spec["seq_len"])
    warmups, iters = int(spec["warmups"]), int(spec["iters"])
    torch.manual_seed(int(spec["seed"]) + rank)
    rss0 = None if gpu else _rss_now()
    model = build_blocks(torch, shape, tp, blocks, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    compute_dtype = torch.bfloat16 if gpu else torch.float32
    backend = attention_backend(torch, shape, tp, (b, s), device, compute_dtype)
    x = torch.randn(b, s, shape.hidden, device=device, requires_grad=True)
    dy = torch.randn(b, s, shape.hidden, device=device)

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize(device)

    def autocast() -> Any:
        import contextlib

        if gpu:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    samples: dict[str, list[float]] = {k: [] for k in ("forward", "backward", "optimizer")}
    warm: dict[str, list[float]] = {k: [] for k in samples}
    hwm_reset = False
    for it in range(warmups + iters):
        if it == warmups:
            if gpu:
                torch.cuda.reset_peak_memory_stats(device)
            else:
                hwm_reset = _reset_hwm()
        sync()
        t0 = time.perf_counter()
        with autocast():
            out = model(x)
        sync()
        t1 = time.perf_counter()
        out.backward(dy.to(out.dtype))
        sync()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        x.grad = None
        sync()
        t3 = time.perf_counter()
        times = [t1 - t0, t2 - t1, t3 - t2]
        if world > 1:
            import torch.distributed as dist

            t = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times = [float(v) for v in t.tolist()]
        target = warm if it < warmups else samples
        for k, v in zip(samples, times, strict=True):
            target[k].append(v)
    if gpu:
        peak: int | None = int(torch.cuda.max_memory_allocated(device))
        method = "torch.cuda.max_memory_allocated"
    else:
        hwm = _vm_hwm()
        if hwm_reset and hwm is not None and rss0 is not None:
            peak = max(0, hwm - rss0)
            method = "rss_peak_delta (VmHWM after clear_refs, less the RSS before the blocks)"
        else:
            import resource

            peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
            method = "ru_maxrss (process lifetime peak resident set)"
    params = sum(p.numel() for p in model.parameters())
    return {
        "samples": samples,
        "warmup": warm,
        "peak_memory_bytes": peak,
        "memory_method": method,
        "attention_backend": backend,
        "params_per_block": params // blocks,
        "compute_dtype": str(compute_dtype).replace("torch.", ""),
    }


def _worker(
    rank: int,
    world: int,
    init_method: str,
    spec: dict[str, Any],
    gpu: bool,
    out_queue: Any,
    parent_pid: int,
) -> None:
    """One spawned TP rank (module level: pickled by reference)."""
    from gpuplan.probes.procs import become_probe_child

    become_probe_child(parent_pid)
    torch = import_torch()
    import torch.distributed as dist

    try:
        if gpu:
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
            device = torch.device("cpu")
        dist.init_process_group(
            "nccl" if gpu else "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=float(spec["timeout_s"])),
            **({"device_id": device} if gpu else {}),
        )
        from gpuplan.probes.collectives import close_group

        result = None
        try:
            result = measure_rank(spec, rank, world, device)
        finally:
            close_group(dist, barrier=result is not None)
        if rank == 0:
            out_queue.put(("result", result))
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # reported to the parent, which records the probe failed
        out_queue.put(("error", (rank, f"{type(exc).__name__}: {exc}", traceback.format_exc())))


def run_spawned(
    spec: dict[str, Any], world: int, *, gpu: bool, deadline_s: float
) -> dict[str, Any]:
    """Spawn ``world`` TP ranks on this node; rank 0's result.

    Raises
    ------
    RuntimeError
        A rank failed, or the deadline passed (the message says which).
    """
    torch = import_torch()
    import torch.multiprocessing as tmp

    from gpuplan.probes.collectives import _stop, free_port
    from gpuplan.probes.procs import register_child

    out_queue = tmp.get_context("spawn").Queue()
    procs = tmp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        _worker,
        args=(world, f"tcp://127.0.0.1:{free_port()}", spec, gpu, out_queue, os.getpid()),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    for p in procs.processes:
        register_child(p.pid)
    del torch
    deadline = time.monotonic() + deadline_s
    result: dict[str, Any] | None = None
    error: str | None = None
    try:
        while result is None and error is None:
            if time.monotonic() > deadline:
                error = f"timeout: the training step did not finish within {deadline_s:.0f} s"
                break
            try:
                kind, payload = out_queue.get(timeout=0.2)
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs.processes):
                    codes = [p.exitcode for p in procs.processes]
                    error = f"ranks exited without a result (exit codes {codes})"
                continue
            if kind == "result":
                result = payload
            else:
                rank, message, _tb = payload
                error = f"rank {rank}: {message}"
    finally:
        _stop(procs.processes, grace_s=5.0 if result is not None else 0.5)
        out_queue.close()
    if error is not None or result is None:
        raise RuntimeError(error or "no result")
    return result


def run_torchrun(spec: dict[str, Any], denv: Any, *, gpu: bool) -> dict[str, Any]:
    """Every rank of the torchrun job is one TP rank (env:// rendezvous)."""
    torch = import_torch()
    import torch.distributed as dist

    if gpu:
        torch.cuda.set_device(denv.local_rank)
        device = torch.device("cuda", denv.local_rank)
    else:
        device = torch.device("cpu")
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group(
            "nccl" if gpu else "gloo",
            init_method="env://",
            timeout=datetime.timedelta(seconds=float(spec["timeout_s"])),
        )
    from gpuplan.probes.collectives import close_group

    finished = False
    try:
        result = measure_rank(spec, denv.rank, denv.world_size, device)
        finished = True
        return result
    finally:
        if owns:
            close_group(dist, barrier=finished)


def _timing(samples: list[float], warmup: list[float]) -> dict[str, Any]:
    return {"loops": 1, "samples_s": list(samples), "warmup_s": list(warmup)}


def measurement(result: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The ``TrainStepMeasurement`` dict of a run's result."""
    import statistics

    samples, warm = result["samples"], result["warmup"]
    step = [sum(v) for v in zip(*samples.values(), strict=True)]
    step_warm = [sum(v) for v in zip(*warm.values(), strict=True)] if warm["forward"] else []
    blocks = int(spec["blocks"])
    out: dict[str, Any] = {
        "seq_len": int(spec["seq_len"]),
        "micro_batch": int(spec["micro_batch"]),
        "tokens": int(spec["seq_len"]) * int(spec["micro_batch"]),
        "blocks": blocks,
        "tp": int(spec["tp"]),
        "step": _timing(step, step_warm),
        "step_per_block_s": statistics.median(step) / blocks,
        "peak_memory_bytes": result["peak_memory_bytes"],
        "memory_method": result["memory_method"],
        "attention_backend": result["attention_backend"],
        "params_per_block": result["params_per_block"],
        "time_over_ranks": "max",
    }
    for k in ("forward", "backward", "optimizer"):
        out[k] = _timing(samples[k], warm[k])
        out[f"{k}_per_block_s"] = statistics.median(samples[k]) / blocks
    return out


def run(ctx: ProbeContext) -> None:
    """The ``train`` probe (``ctx.workload`` holds :class:`TrainOptions` fields)."""
    from gpuplan.probes.collectives import torchrun_env

    options = TrainOptions(**ctx.workload)
    gpu = ctx.device.is_gpu
    denv = torchrun_env()
    full = BlockShape(**options.shape)
    scale = options.scale or (1 if gpu else cpu_scale(full))
    block = shrink(full, scale, options.tp)
    block.check_tp(options.tp)
    seq_len = options.seq_len or (GPU_DEFAULT_SEQ_LEN if gpu else CPU_DEFAULT_SEQ_LEN)
    micro_batch = options.micro_batch or (
        GPU_DEFAULT_MICRO_BATCH if gpu else CPU_DEFAULT_MICRO_BATCH
    )
    warmups, iters = ITERATIONS[ctx.quick]
    if denv is not None:
        launcher, world = "torchrun", denv.world_size
    elif options.tp > 1:
        launcher, world = "spawn", options.tp
    else:
        launcher, world = "in-process", 1
    labels = {"device_id": options.device_id} if options.device_id else {}
    rec = ctx.record(
        "train",
        PROBE_VERSION,
        device="cuda" if gpu else "cpu",
        model=options.model,
        framework=options.framework,
        precision=options.precision,
        compute_dtype="bfloat16 (torch.autocast over fp32 parameters)" if gpu else "float32",
        shape=full.as_dict(),
        block=block.as_dict(),
        scale=scale,
        approximations=list(options.approximations),
        tp=options.tp,
        backend=("nccl" if gpu else "gloo") if world > 1 else None,
        launcher=launcher,
        ranks=world,
        warmups=warmups,
        iterations=iters,
        optimizer="torch.optim.AdamW (fp32 state)",
        tensor_parallel="Megatron-LM column/row parallel, all-reduce, no sequence parallelism",
        **labels,
    )
    if scale > 1:
        rec.warn(
            f"block shrunk by {scale} to run on a CPU (hidden {block.hidden}, heads "
            f"{block.heads}, ffn {block.ffn_hidden}): its times calibrate nothing on a GPU"
        )
    if denv is not None and options.tp != world:
        rec.fail(f"--tp {options.tp} must equal the torchrun world size ({world})")
        return
    if gpu and denv is None and options.tp > ctx.device.count:
        rec.fail(f"--tp {options.tp} needs {options.tp} GPUs; this node has {ctx.device.count}")
        return
    spec: dict[str, Any] = {
        "block": block.as_dict(),
        "tp": options.tp,
        "blocks": options.blocks,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "warmups": warmups,
        "iters": iters,
        "seed": options.seed,
        "timeout_s": ctx.remaining_s(default=600.0),
    }
    task = ctx.progress.task(f"train step ({options.model}, tp {options.tp})", 1)
    devices = [0] if gpu and denv is None else ([denv.local_rank] if gpu and denv else [])
    try:
        with ctx.power_sampling(rec, devices):
            if denv is not None:
                result = run_torchrun(spec, denv, gpu=gpu)
            elif world > 1:
                result = run_spawned(spec, world, gpu=gpu, deadline_s=float(spec["timeout_s"]))
            else:
                torch = import_torch()
                result = measure_rank(
                    spec, 0, 1, torch.device("cuda", 0) if gpu else torch.device("cpu")
                )
    except RuntimeError as exc:
        rec.fail(str(exc))
        return
    rec.params["attention_backend"] = result["attention_backend"]
    rec.add(measurement(result, spec))
    task.advance()
    ctx.point_done()
    rec.ok()
