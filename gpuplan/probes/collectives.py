"""Collectives probe: all-reduce, all-gather, reduce-scatter, all-to-all, broadcast by size.

Definitions follow nccl-tests (``doc/PERFORMANCE.md``):

* ``size_bytes`` is the size of the full buffer: the in/out buffer of all-reduce and
  broadcast, the *output* of all-gather, the *input* of reduce-scatter, the per-rank
  send buffer of all-to-all;
* ``algbw = size / time``;
* ``busbw = algbw * factor(n)`` (:data:`BUSBW_FACTORS`), the bandwidth a link would need
  if the collective were done with the optimal algorithm, comparable across rank counts
  and with the hardware's link bandwidth.

``time`` of one sample is the slowest rank's (an all-reduce MAX of the per-rank durations,
outside the timed loop), and every rank runs the same loops. A correctness check runs
before and after the timed loop with values whose result is exact in float32 (every
rank checks its own output; the flags are combined with an all-reduce MIN).

Where it runs:

* NCCL (RCCL on ROCm) over all local GPUs, one spawned process per GPU;
* gloo over ``--ranks`` (default 2) spawned local processes when there is no GPU;
* under ``torchrun`` (``WORLD_SIZE``/``RANK`` set, more than one rank) every rank of the
  job takes part, across nodes when there are several (``scope: inter``), and only rank 0
  records results.

Spawned processes use ``torch.multiprocessing`` with the ``spawn`` start method, a free
local TCP port for the rendezvous and a deadline; rank 0 streams each measured point back
through a queue, so the points measured before a failure, a timeout or Ctrl-C are kept
(on Ctrl-C the queue is drained before the ranks are stopped). Each rank leads its own
process group and dies with the parent (:mod:`gpuplan.probes.procs`), so a terminal's
Ctrl-C reaches only ``gpuplan probe`` and a killed run leaves no rank behind.
"""

from __future__ import annotations

import datetime
import math
import os
import queue as queue_mod
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.probes.base import ProbeContext, ProbeRecorder, import_torch
from gpuplan.probes.procs import become_probe_child, forget_child, kill_group, register_child
from gpuplan.probes.timing import TimingConfig, WallTimer, measure

PROBE_VERSION = 1

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")

#: busbw = algbw * factor(n) for n ranks (nccl-tests, doc/PERFORMANCE.md): an all-reduce
#: moves 2(n-1)/n of the buffer over each rank's link (reduce-scatter then all-gather);
#: all-gather, reduce-scatter and all-to-all move (n-1)/n; broadcast and reduce move it once.
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def busbw_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` over ``ranks`` ranks.

    >>> busbw_factor("all_reduce", 8), busbw_factor("all_gather", 4), busbw_factor("broadcast", 8)
    (1.75, 0.75, 1.0)
    """
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    return BUSBW_FACTORS[op](ranks)


def bandwidths(op: str, size_bytes: int, time_s: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for one collective of ``size_bytes`` that took ``time_s``.

    >>> bandwidths("all_reduce", 1_000_000, 0.001, 2)
    (1000000000.0, 1000000000.0)
    """
    algbw = size_bytes / time_s
    return algbw, algbw * busbw_factor(op, ranks)


def sizes(*, gpu: bool, quick: bool) -> list[int]:
    """Buffer sizes: 1 KiB to 1 GiB on GPUs (x4; x16 quick), 4 KiB to 64 MiB on CPUs."""
    if gpu:
        lo, hi, step = 1 << 10, (256 << 20) if quick else (1 << 30), 16 if quick else 4
    else:
        lo, hi, step = 4 << 10, (1 << 20) if quick else (64 << 20), 16 if quick else 4
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= step
    return out


@dataclass(frozen=True)
class Plan:
    """What every rank runs (the same on all ranks, or the collectives deadlock)."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    timing: TimingConfig
    num_nodes: int
    timeout_s: float


# ------------------------------------------------------------------------ one rank's work
class _Collective:
    """Buffers of one op at one size, with a check pattern whose result is exact."""

    def __init__(self, torch: Any, dist: Any, op: str, count: int, n: int, rank: int, device: Any):
        self.torch, self.dist, self.op, self.n, self.rank = torch, dist, op, n, rank
        f32 = torch.float32
        chunk = count // n
        if op == "all_reduce" or op == "broadcast":
            self.inp = torch.zeros(count, dtype=f32, device=device)
            self.out = self.inp
        elif op == "all_gather":
            self.inp = torch.zeros(chunk, dtype=f32, device=device)
            self.out = torch.zeros(chunk * n, dtype=f32, device=device)
        elif op == "reduce_scatter":
            self.inp = torch.zeros(chunk * n, dtype=f32, device=device)
            self.out = torch.zeros(chunk, dtype=f32, device=device)
        elif op == "all_to_all":
            self.inp = torch.zeros(chunk * n, dtype=f32, device=device)
            self.out = torch.zeros(chunk * n, dtype=f32, device=device)
        else:
            raise ValueError(f"unknown collective {op}")
        self.chunk = chunk
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        self.call: Callable[[], Any] = {
            "all_reduce": lambda: dist.all_reduce(self.inp),
            "broadcast": lambda: dist.broadcast(self.inp, src=0),
            "all_gather": lambda: ag(self.out, self.inp),
            "reduce_scatter": lambda: rs(self.out, self.inp),
            "all_to_all": lambda: dist.all_to_all_single(self.out, self.inp),
        }[op]

    def check(self) -> bool:
        """Fill a pattern, run once, verify this rank's output; buffers zeroed after.

        Patterns are small integers, exact in float32; rows of ``view(n, chunk)`` are
        filled by broadcasting so that a 1 GiB buffer needs no 1 GiB index tensors.
        """
        torch, n, r, chunk = self.torch, self.n, self.rank, self.chunk
        dev = self.inp.device
        rows = torch.arange(n, device=dev, dtype=torch.float32)[:, None]  # j, one per chunk
        if self.op == "all_reduce":
            # x_r[i] = (r + 1) + i % 7  ->  sum over ranks = n(n+1)/2 + n * (i % 7)
            idx7 = torch.arange(self.inp.numel(), device=dev, dtype=torch.int32) % 7
            self.inp.copy_(idx7 + (r + 1))
            self.call()
            ok = torch.equal(self.out, (idx7 * n).float() + n * (n + 1) / 2)
        elif self.op == "broadcast":
            self.inp.fill_(42.0 if r == 0 else 0.0)
            self.call()
            ok = bool((self.out == 42.0).all())
        elif self.op == "all_gather":
            self.inp.fill_(float(r + 1))
            self.call()
            ok = bool((self.out.view(n, chunk) == rows + 1).all())
        elif self.op == "reduce_scatter":
            # chunk j of rank q holds (q+1)(j+1); rank r receives sum_q (q+1)(r+1)
            self.inp.view(n, chunk).copy_(((r + 1) * (rows + 1)).expand(n, chunk))
            self.call()
            ok = bool((self.out == (r + 1) * n * (n + 1) / 2).all())
        else:  # all_to_all: chunk j of rank q holds q*n + j; rank r receives chunk r of each
            self.inp.view(n, chunk).copy_((r * n + rows).expand(n, chunk))
            self.call()
            ok = bool((self.out.view(n, chunk) == rows * n + r).all())
        self.inp.zero_()
        self.out.zero_()
        return bool(ok)


def run_rank(
    plan: Plan,
    rank: int,
    world: int,
    device: Any,
    emit: Callable[[str, Any], None],
) -> None:
    """Run the plan on an initialised process group; rank 0 ``emit``s every point."""
    torch = import_torch()
    import torch.distributed as dist

    gpu = device.type == "cuda"
    flag = torch.zeros(1, dtype=torch.float64, device=device)

    def reduce_max(x: float) -> float:
        flag.fill_(x)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return float(flag.item())

    def all_ok(ok: bool) -> bool:
        flag.fill_(1.0 if ok else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return flag.item() > 0.5

    sync = (lambda: torch.cuda.synchronize(device)) if gpu else None
    timer = WallTimer(sync=sync)
    for op in plan.ops:
        for size in plan.sizes:
            count = max(world, (size // 4) // world * world)
            coll = _Collective(torch, dist, op, count, world, rank, device)
            correct = all_ok(coll.check())
            timed = measure(coll.call, timer, plan.timing, reduce=reduce_max)
            correct = all_ok(coll.check()) and correct
            del coll
            if rank == 0:
                algbw, busbw = bandwidths(op, count * 4, timed.median_s, world)
                emit(
                    "point",
                    {
                        "op": op,
                        "size_bytes": count * 4,
                        "dtype": "float32",
                        "ranks": world,
                        "num_nodes": plan.num_nodes,
                        "scope": "inter" if plan.num_nodes > 1 else "intra",
                        **timed.as_dict(),
                        "algbw_bytes_per_s": algbw,
                        "busbw_bytes_per_s": busbw,
                        "correct": correct,
                    },
                )
    if gpu:
        torch.cuda.synchronize(device)


def _spawned_worker(
    local_rank: int,
    world: int,
    init_method: str,
    plan: Plan,
    gpu: bool,
    out_queue: Any,
    parent_pid: int,
) -> None:
    """Entry point of one spawned local rank (module level: pickled by reference)."""
    become_probe_child(parent_pid)
    torch = import_torch()
    import torch.distributed as dist

    def emit(kind: str, payload: Any) -> None:
        out_queue.put((kind, payload))

    try:
        if gpu:
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
        else:
            # share the cores between the ranks instead of oversubscribing them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
            device = torch.device("cpu")
        dist.init_process_group(
            plan.backend,
            init_method=init_method,
            rank=local_rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=plan.timeout_s),
            **({"device_id": device} if gpu else {}),
        )
        try:
            run_rank(plan, local_rank, world, device, emit if local_rank == 0 else _drop)
        finally:
            dist.destroy_process_group()
        if local_rank == 0:
            emit("done", None)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # reported to the parent, which records the probe failed
        emit("error", (local_rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=5)))


def _drop(kind: str, payload: Any) -> None:
    return None


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_local(
    plan: Plan,
    world: int,
    *,
    gpu: bool,
    on_point: Callable[[dict[str, Any]], None],
    deadline_s: float,
) -> None:
    """Spawn ``world`` local ranks running ``plan``; ``on_point`` gets rank 0's points.

    Raises
    ------
    RuntimeError
        with the first rank's error, when a rank fails or the deadline passes.
    """
    torch = import_torch()
    import torch.multiprocessing as tmp

    mp_ctx = tmp.get_context("spawn")
    out_queue = mp_ctx.Queue()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    procs = tmp.start_processes(
        _spawned_worker,
        args=(world, init_method, plan, gpu, out_queue, os.getpid()),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    for p in procs.processes:
        register_child(p.pid)
    del torch
    deadline = time.monotonic() + deadline_s
    done = False
    error: str | None = None
    try:
        while error is None:
            if time.monotonic() > deadline:
                error = f"timeout: collectives did not finish within {deadline_s:.0f} s"
                break
            try:
                kind, payload = out_queue.get(timeout=0.2)
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs.processes):
                    if not done:
                        codes = [p.exitcode for p in procs.processes]
                        error = f"ranks exited without finishing (exit codes {codes})"
                    break
                continue
            if kind == "point":
                on_point(payload)
            elif kind == "done":
                done = True
            elif kind == "error":
                rank, message, _tb = payload
                error = f"rank {rank}: {message}"
    except KeyboardInterrupt:
        _drain_points(out_queue, on_point)  # rank 0 may have sent points not read yet
        raise
    finally:
        _stop(procs.processes, grace_s=5.0 if (done and error is None) else 0.5)
        out_queue.close()
    if error:
        raise RuntimeError(error)


def _drain_points(
    out_queue: Any, on_point: Callable[[dict[str, Any]], None], budget_s: float = 1.0
) -> None:
    """Hand ``on_point`` the points already queued (stops at the first empty wait)."""
    end = time.monotonic() + budget_s
    while time.monotonic() < end:
        try:
            kind, payload = out_queue.get(timeout=0.1)
        except (queue_mod.Empty, OSError, EOFError, ValueError):
            return
        if kind == "point":
            on_point(payload)


def _stop(processes: list[Any], grace_s: float) -> None:
    """Stop the ranks (join, then SIGTERM, then SIGKILL) and kill their process groups."""
    end = time.monotonic() + grace_s
    for p in processes:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    for p in processes:
        kill_group(p.pid)  # anything a rank forked goes with it
        forget_child(p.pid)


# --------------------------------------------------------------------------- under torchrun
@dataclass(frozen=True)
class DistEnv:
    """The torchrun environment of this process."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    job: str | None = None  # the rendezvous (master address, port, run id): one per job

    @property
    def num_nodes(self) -> int:
        return max(1, math.ceil(self.world_size / max(1, self.local_world_size)))


def torchrun_env(environ: dict[str, str] | None = None) -> DistEnv | None:
    """The torchrun/Slurm-launched environment, or None when not launched with >1 rank."""
    env = os.environ if environ is None else environ
    try:
        world = int(env["WORLD_SIZE"])
        rank = int(env["RANK"])
    except (KeyError, ValueError):
        return None
    if world <= 1:
        return None
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    local_rank = int(env.get("LOCAL_RANK", rank % max(1, local_world)))
    job = ":".join(env.get(k, "") for k in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"))
    return DistEnv(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        job=f"torchrun:{job}:{world}",
    )


def run_torchrun(
    plan: Plan, denv: DistEnv, *, gpu: bool, on_point: Callable[[dict[str, Any]], None]
) -> None:
    """Run the plan on every rank of the torchrun job (env:// rendezvous)."""
    torch = import_torch()
    import torch.distributed as dist

    if gpu:
        torch.cuda.set_device(denv.local_rank)
        device = torch.device("cuda", denv.local_rank)
    else:
        device = torch.device("cpu")
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group(
            plan.backend, init_method="env://", timeout=datetime.timedelta(seconds=plan.timeout_s)
        )
    try:
        run_rank(plan, denv.rank, denv.world_size, device, lambda kind, p: on_point(p))
    finally:
        if owns_group:
            dist.destroy_process_group()


# ------------------------------------------------------------------------------ the probe
def run(ctx: ProbeContext, *, denv: DistEnv | None = None) -> None:
    """Measure the collectives locally (spawned ranks) or across the torchrun job."""
    denv = denv if denv is not None else torchrun_env()
    gpu = ctx.device.is_gpu
    backend = "nccl" if gpu else "gloo"
    timing = ctx.timing
    if denv is not None:
        world, num_nodes, mode = denv.world_size, denv.num_nodes, "torchrun"
    elif gpu:
        world, num_nodes, mode = ctx.device.count, 1, "spawn"
    else:
        world, num_nodes, mode = ctx.gloo_ranks, 1, "spawn"
    timeout_s = ctx.remaining_s(default=120.0 if ctx.quick else 900.0)
    plan = Plan(
        backend=backend,
        ops=OPS,
        sizes=tuple(sizes(gpu=gpu, quick=ctx.quick)),
        timing=timing,
        num_nodes=num_nodes,
        timeout_s=timeout_s,
    )
    rec = ctx.record(
        "collectives",
        PROBE_VERSION,
        backend=backend,
        library="rccl" if gpu and _is_rocm() else backend,
        device="cuda" if gpu else "cpu",
        ranks=world,
        num_nodes=num_nodes,
        launcher=mode,
    )
    if world < 2:
        rec.skip(
            f"only {world} {'GPU' if gpu else 'rank'}: collectives need at least 2 ranks"
            + (" (run under torchrun across nodes, or on a multi-GPU node)" if gpu else "")
        )
        return
    task = ctx.progress.task(
        f"collectives ({backend}, {world} ranks)", total=len(plan.ops) * len(plan.sizes)
    )

    def on_point(point: dict[str, Any]) -> None:
        rec.add(point)
        task.advance()
        ctx.point_done()

    devices = (
        list(range(ctx.device.count))
        if gpu and denv is None
        else ([denv.local_rank] if gpu and denv else [])
    )
    try:
        with ctx.power_sampling(rec, devices):
            if denv is not None:
                run_torchrun(plan, denv, gpu=gpu, on_point=on_point)
            else:
                run_local(plan, world, gpu=gpu, on_point=on_point, deadline_s=timeout_s)
    except RuntimeError as exc:
        rec.fail(str(exc))
        return
    _close(rec)


def _close(rec: ProbeRecorder) -> None:
    wrong = [
        f"{m['op']} {m['size_bytes']} B" for m in rec.measurements if m.get("correct") is False
    ]
    if wrong:
        rec.fail(f"incorrect results: {', '.join(wrong)}")
    else:
        rec.ok()


def _is_rocm() -> bool:
    torch = import_torch()
    return bool(getattr(torch.version, "hip", None))
