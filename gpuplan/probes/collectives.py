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

import contextlib
import datetime
import functools
import math
import os
import queue as queue_mod
import re
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.probes.base import ProbeContext, ProbeRecorder, import_torch
from gpuplan.probes.procs import become_probe_child, forget_child, kill_group, register_child
from gpuplan.probes.timing import TimingConfig, WallTimer, measure
from gpuplan.units import BUSBW_FACTORS as BUSBW_FACTORS  # the one nccl-tests table
from gpuplan.units import busbw_factor

PROBE_VERSION = 1

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def bandwidths(op: str, size_bytes: int, time_s: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for one collective of ``size_bytes`` that took ``time_s``.

    >>> bandwidths("all_reduce", 1_000_000, 0.001, 2)
    (1000000000.0, 1000000000.0)
    """
    algbw = size_bytes / time_s
    return algbw, algbw * busbw_factor(op, ranks)


def sizes(*, gpu: bool, quick: bool) -> list[int]:
    """Buffer sizes: on GPUs 1 KiB to 1 GiB by x4 then 2, 4 and 8 GiB (inter-node peaks need
    the largest ones, as in nccl-tests' ``-e 8G``/``16G`` sweeps; quick: x16 to 1 GiB); on
    CPUs 4 KiB to 64 MiB (quick 1 MiB). Sizes that do not fit in memory are dropped at run
    time (:func:`fits`).

    >>> [s >> 20 for s in sizes(gpu=True, quick=False)[-4:]]
    [1024, 2048, 4096, 8192]
    >>> [s >> 10 for s in sizes(gpu=True, quick=True)]
    [1, 16, 256, 4096, 65536, 1048576]
    """
    if gpu:
        lo, hi, step = 1 << 10, 1 << 30, 16 if quick else 4
    else:
        lo, hi, step = 4 << 10, (1 << 20) if quick else (64 << 20), 16 if quick else 4
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= step
    if gpu and not quick:
        out += [2 << 30, 4 << 30, 8 << 30]
    return out


@dataclass(frozen=True)
class Case:
    """One variant of a collective: op, element type, in-place or not.

    ``inplace`` follows nccl-tests: the output *is* the input (all-reduce, broadcast), the
    input is this rank's slice of the output (all-gather) or the output this rank's slice
    of the input (reduce-scatter). torch's all-reduce and broadcast are in-place only;
    all-to-all is out-of-place only.
    """

    op: str
    dtype: str = "float32"
    inplace: bool = False

    @property
    def label(self) -> str:
        return f"{self.op} {self.dtype}{' in-place' if self.inplace else ''}"


_INPLACE_ONLY = ("all_reduce", "broadcast")


def default_case(op: str, dtype: str = "float32") -> Case:
    return Case(op, dtype, inplace=op in _INPLACE_ONLY)


def cases(*, gpu: bool, quick: bool) -> tuple[Case, ...]:
    """The variants measured: bf16 (training traffic) for every op, fp32 all-reduce
    (gradients kept in fp32), and in-place all-gather/reduce-scatter (what FSDP/ZeRO run)
    in the default sweep. On CPUs (gloo) fp32 for every op plus a bf16 all-reduce."""
    if not gpu:
        return (*(default_case(op) for op in OPS), default_case("all_reduce", "bfloat16"))
    out = [default_case(op, "bfloat16") for op in OPS] + [default_case("all_reduce", "float32")]
    if not quick:
        out += [Case("all_gather", "bfloat16", True), Case("reduce_scatter", "bfloat16", True)]
    return tuple(out)


#: bytes of buffers per byte of ``size`` an op allocates on one rank (out-of-place keeps
#: input and output), plus the check's slices (:data:`_CHECK_ROWS`)
def buffer_bytes(case: Case, size_bytes: int, ranks: int) -> int:
    """Bytes one rank allocates for ``case`` at ``size_bytes`` (nccl-tests sizes).

    >>> buffer_bytes(Case("all_gather", "bfloat16", False), 8 << 30, 8) >> 30
    9
    >>> buffer_bytes(Case("all_reduce", "bfloat16", True), 8 << 30, 8) >> 30
    8
    """
    if case.op in _INPLACE_ONLY:
        return size_bytes
    if case.op == "all_to_all":
        return 2 * size_bytes
    return size_bytes if case.inplace else size_bytes + size_bytes // ranks


def fits(case: Case, size_bytes: int, ranks: int, free_bytes: int | None) -> bool:
    """Whether ``case`` at ``size_bytes`` leaves half of ``free_bytes`` for the rest."""
    return free_bytes is None or buffer_bytes(case, size_bytes, ranks) <= free_bytes // 2


@dataclass(frozen=True)
class Plan:
    """What every rank runs (the same on all ranks, or the collectives deadlock)."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    timing: TimingConfig
    num_nodes: int
    timeout_s: float
    cases: tuple[Case, ...] | None = None  # None: every op of ``ops`` in float32
    nccl_log_dir: str | None = None  # NCCL_DEBUG_FILE folder (algorithm and NVLS, GPU only)

    def all_cases(self) -> tuple[Case, ...]:
        return self.cases if self.cases is not None else tuple(default_case(op) for op in self.ops)


# ------------------------------------------------------------------------ one rank's work
#: a row of the check patterns; every buffer is viewed as (-1, 8) rows or (ranks, chunk)
_ROW = 8
#: rows compared at a time, so that checking an 8 GiB buffer needs no 8 GiB temporary
_CHECK_ROWS = 1 << 22


def _tag(q: int, j: int, n: int) -> float:
    """An all-to-all tag for chunk j of rank q: small integers, exact in bf16 (< 256)."""
    return float((q * n + j) % 97 + 1)


class _Collective:
    """Buffers of one case at one size, with a check pattern whose result is exact.

    Patterns are small integers, exact in bfloat16 as in float32 for any number of ranks,
    and are written by broadcasting rows, never with an index tensor of the buffer's length
    (``arange`` of 2^31 int32 elements overflows, and an int64 one would need 8 bytes per
    element). ``count`` is a multiple of ``8 * n`` elements.
    """

    def __init__(
        self,
        torch: Any,
        dist: Any,
        op: str,
        count: int,
        n: int,
        rank: int,
        device: Any,
        *,
        dtype: str = "float32",
        inplace: bool | None = None,
    ):
        self.torch, self.dist, self.op, self.n, self.rank = torch, dist, op, n, rank
        self.inplace = op in _INPLACE_ONLY if inplace is None else inplace
        dt = getattr(torch, dtype)
        chunk = count // n
        if op in _INPLACE_ONLY:
            self.inp = torch.zeros(count, dtype=dt, device=device)
            self.out = self.inp
        elif op == "all_gather":
            self.out = torch.zeros(chunk * n, dtype=dt, device=device)
            self.inp = (
                self.out[rank * chunk : (rank + 1) * chunk]
                if self.inplace
                else torch.zeros(chunk, dtype=dt, device=device)
            )
        elif op == "reduce_scatter":
            self.inp = torch.zeros(chunk * n, dtype=dt, device=device)
            self.out = (
                self.inp[rank * chunk : (rank + 1) * chunk]
                if self.inplace
                else torch.zeros(chunk, dtype=dt, device=device)
            )
        elif op == "all_to_all":
            if self.inplace:
                raise ValueError("all_to_all is out-of-place only")
            self.inp = torch.zeros(chunk * n, dtype=dt, device=device)
            self.out = torch.zeros(chunk * n, dtype=dt, device=device)
        else:
            raise ValueError(f"unknown collective {op}")
        self.chunk = chunk
        self.count = count
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        # bound once: the timed loop calls this, with no lambda or lookup per call
        self.call: Callable[[], Any] = {
            "all_reduce": functools.partial(dist.all_reduce, self.inp),
            "broadcast": functools.partial(dist.broadcast, self.inp, 0),
            "all_gather": functools.partial(ag, self.out, self.inp),
            "reduce_scatter": functools.partial(rs, self.out, self.inp),
            "all_to_all": functools.partial(dist.all_to_all_single, self.out, self.inp),
        }[op]

    @property
    def size_bytes(self) -> int:
        return self.count * self.inp.element_size()

    def _equal_rows(self, t2d: Any, row: Any) -> bool:
        """Every row of ``t2d`` equals ``row`` (compared a slice of rows at a time)."""
        for start in range(0, t2d.shape[0], _CHECK_ROWS):
            if not bool((t2d[start : start + _CHECK_ROWS] == row).all()):
                return False
        return True

    def check(self) -> bool:
        """Fill a pattern, run once, verify this rank's output; buffers zeroed after."""
        torch, n, r, chunk = self.torch, self.n, self.rank, self.chunk
        dev, dt = self.inp.device, self.inp.dtype
        j8 = torch.arange(_ROW, device=dev)
        if self.op == "all_reduce":
            # one-hot rows: x_r[i] = [i % 8 == r % 8]; the sum counts the ranks r = i (mod 8)
            self.inp.view(-1, _ROW).copy_((j8 == r % _ROW).to(dt).expand(self.count // _ROW, _ROW))
            self.call()
            want = torch.tensor(
                [sum(1 for q in range(n) if q % _ROW == j) for j in range(_ROW)],
                dtype=dt,
                device=dev,
            )
            ok = self._equal_rows(self.out.view(-1, _ROW), want)
        elif self.op == "broadcast":
            self.inp.fill_(42.0 if r == 0 else 0.0)
            self.call()
            ok = self._equal_rows(
                self.out.view(-1, _ROW), torch.full((_ROW,), 42.0, dtype=dt, device=dev)
            )
        elif self.op == "all_gather":
            self.out.zero_()
            self.inp.fill_(float(r % 64 + 1))
            self.call()
            ok = all(
                self._equal_rows(
                    self.out[q * chunk : (q + 1) * chunk].view(-1, _ROW),
                    torch.full((_ROW,), float(q % 64 + 1), dtype=dt, device=dev),
                )
                for q in range(n)
            )
        elif self.op == "reduce_scatter":
            # chunk j of rank q holds [q % 8 == j % 8]; rank r receives the count of such q
            for j in range(n):
                self.inp[j * chunk : (j + 1) * chunk].fill_(1.0 if r % _ROW == j % _ROW else 0.0)
            self.call()
            want_r = float(sum(1 for q in range(n) if q % _ROW == r % _ROW))
            ok = self._equal_rows(
                self.out.view(-1, _ROW), torch.full((_ROW,), want_r, dtype=dt, device=dev)
            )
        else:  # all_to_all: chunk j of rank q holds tag(q, j); rank r receives tag(q, r) from q
            for j in range(n):
                self.inp[j * chunk : (j + 1) * chunk].fill_(_tag(r, j, n))
            self.call()
            ok = all(
                self._equal_rows(
                    self.out[q * chunk : (q + 1) * chunk].view(-1, _ROW),
                    torch.full((_ROW,), _tag(q, r, n), dtype=dt, device=dev),
                )
                for q in range(n)
            )
        self.inp.zero_()
        self.out.zero_()
        return bool(ok)


def element_count(size_bytes: int, element_bytes: int, world: int) -> int:
    """Elements of a ``size_bytes`` buffer, rounded down to a multiple of ``8 * world`` (the
    check's rows and one chunk per rank), at least one row per rank; Python ints, so sizes
    past 2^31 elements are exact.

    >>> element_count(8 << 30, 2, 8) == (8 << 30) // 2
    True
    >>> element_count(4100, 4, 3)
    1008
    """
    unit = _ROW * world
    return max(unit, (size_bytes // element_bytes) // unit * unit)


def free_memory_bytes(device: Any) -> int | None:
    """Free memory for buffers on this rank's device (None where unknown)."""
    torch = import_torch()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    from gpuplan.probes.inventory import available_memory_bytes

    return available_memory_bytes()


def run_rank(
    plan: Plan,
    rank: int,
    world: int,
    device: Any,
    emit: Callable[[str, Any], None],
) -> None:
    """Run the plan on an initialised process group; rank 0 ``emit``s every point.

    Durations are averaged over the ranks (nccl-tests' default ``-a 1``), outside the timed
    loop; the slowest rank's are kept too (``rank_max_samples_s``).
    """
    torch = import_torch()
    import torch.distributed as dist

    gpu = device.type == "cuda"
    flag = torch.zeros(1, dtype=torch.float64, device=device)

    def reduce(x: float, op: Any) -> float:
        flag.fill_(x)
        dist.all_reduce(flag, op=op)
        return float(flag.item())

    def reduce_avg(x: float) -> float:
        return reduce(x, dist.ReduceOp.SUM) / world

    def all_ok(ok: bool) -> bool:
        return reduce(1.0 if ok else 0.0, dist.ReduceOp.MIN) > 0.5

    # every rank must skip the same sizes: the smallest free memory decides
    free = free_memory_bytes(device)
    free_min = None if free is None else int(reduce(float(free), dist.ReduceOp.MIN))
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else None
    timer = WallTimer(sync=sync)  # nccl-tests: host clock around the loop, after a sync
    local: list[float] = []  # this rank's own loop durations, for the slowest-rank figure

    def timed_loop(fn: Callable[[], Any], loops: int) -> float:
        duration = timer(fn, loops)
        local.append(duration)
        return duration

    for case in plan.all_cases():
        elem = torch.empty((), dtype=getattr(torch, case.dtype)).element_size()
        for size in plan.sizes:
            count = element_count(size, elem, world)
            if not fits(case, count * elem, world, free_min):
                continue
            coll = _Collective(
                torch,
                dist,
                case.op,
                count,
                world,
                rank,
                device,
                dtype=case.dtype,
                inplace=case.inplace,
            )
            correct = all_ok(coll.check())
            local.clear()
            timed = measure(coll.call, timed_loop, plan.timing, reduce=reduce_avg)
            slowest = torch.tensor(
                local[-len(timed.samples_s) :], dtype=torch.float64, device=device
            )
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rank_max = slowest.tolist()
            correct = all_ok(coll.check()) and correct
            size_bytes = coll.size_bytes
            del coll
            if gpu:
                torch.cuda.empty_cache()
            if rank == 0:
                algbw, busbw = bandwidths(case.op, size_bytes, timed.median_s, world)
                emit(
                    "point",
                    {
                        "op": case.op,
                        "size_bytes": size_bytes,
                        "dtype": case.dtype,
                        "inplace": case.inplace,
                        "ranks": world,
                        "num_nodes": plan.num_nodes,
                        "scope": "inter" if plan.num_nodes > 1 else "intra",
                        **timed.as_dict(),
                        "time_over_ranks": "avg",
                        "rank_max_samples_s": [m / timed.loops for m in rank_max],
                        "algbw_bytes_per_s": algbw,
                        "busbw_bytes_per_s": busbw,
                        "correct": correct,
                    },
                )
    if gpu:
        torch.cuda.synchronize(device)


# ------------------------------------------------------------ NCCL's own account of a run
#: NCCL's algorithm and protocol numbers (src/include/device.h of NCCL 2.19-2.23; newer
#: versions print the names): numbers are read with these tables
NCCL_ALGOS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
NCCL_PROTOS = ("LL", "LL128", "SIMPLE")
_NCCL_OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
}
_TUNING = re.compile(r"NCCL INFO (\w+): +(\d+) Bytes -> Algo (\w+) proto (\w+)")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")


def nccl_debug_env(log_dir: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that make NCCL log its per-collective algorithm choice (the TUNING
    subsystem, printed by rank 0) and NVLS support (INIT) to one file per process.

    Nothing is set when the user chose ``NCCL_DEBUG`` already (their setting wins).
    """
    if environ.get("NCCL_DEBUG"):
        return {}
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,TUNING",
        "NCCL_DEBUG_FILE": str(Path(log_dir) / "nccl.%h.%p.log"),
    }


def _name(table: tuple[str, ...], value: str) -> str:
    return table[int(value)] if value.isdigit() and int(value) < len(table) else value.upper()


def parse_nccl_log(text: str) -> dict[str, Any]:
    """Algorithm and protocol NCCL chose per (op, bytes), and whether NVLS was available.

    Reads the lines of NCCL's ``src/enqueue.cc`` ("AllReduce: 4096 Bytes -> Algo RING proto
    LL channel..." and, in older versions, "... -> Algo 1 proto 0 time 12.3") and of the
    NVLS set-up. ``choices[(op, bytes)]`` is the most frequent (algorithm, protocol).

    >>> log = "\\n".join([
    ...     "h:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0",
    ...     "h:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo 1 proto 0 time 12.5",
    ...     "h:1:1 [0] NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto Simple channel",
    ... ])
    >>> out = parse_nccl_log(log)
    >>> out["nvls_available"], out["choices"][("all_reduce", 4096)]
    (True, ('RING', 'LL'))
    >>> out["choices"][("all_reduce", 268435456)]
    ('NVLS', 'SIMPLE')
    """
    counts: dict[tuple[str, int], dict[tuple[str, str], int]] = {}
    nvls: bool | None = None
    for line in text.splitlines():
        m = _TUNING.search(line)
        if m:
            op = _NCCL_OPS.get(m.group(1))
            if op is None:
                continue
            choice = (_name(NCCL_ALGOS, m.group(3)), _name(NCCL_PROTOS, m.group(4)))
            per = counts.setdefault((op, int(m.group(2))), {})
            per[choice] = per.get(choice, 0) + 1
            continue
        n = _NVLS.search(line)
        if n:
            nvls = (n.group(1) is None) or bool(nvls)
    choices = {key: max(per.items(), key=lambda kv: kv[1])[0] for key, per in counts.items()}
    return {"choices": choices, "nvls_available": nvls}


def annotate_with_nccl(rec: ProbeRecorder, log_dir: Path) -> None:
    """Stamp each point with NCCL's algorithm/protocol and the probe with NVLS support."""
    text = ""
    for path in sorted(log_dir.glob("nccl.*.log")):
        with contextlib.suppress(OSError):
            text += path.read_text(errors="replace") + "\n"
    if not text:
        rec.params["nccl_algorithms"] = "not recorded (no NCCL log)"
        return
    parsed = parse_nccl_log(text)
    rec.params["nvls_available"] = parsed["nvls_available"]
    seen: set[str] = set()
    for m in rec.measurements:
        choice = parsed["choices"].get((m["op"], m["size_bytes"]))
        if choice is not None:
            m["nccl_algorithm"], m["nccl_protocol"] = choice
            seen.add(choice[0])
    rec.params["nccl_algorithms"] = sorted(seen)
    rec.params["nvls_used"] = any(a.startswith("NVLS") for a in seen)


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
        if plan.nccl_log_dir:
            os.environ.update(nccl_debug_env(plan.nccl_log_dir, os.environ))
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
        finished = False
        try:
            run_rank(plan, local_rank, world, device, emit if local_rank == 0 else _drop)
            finished = True
        finally:
            close_group(dist, barrier=finished)
        if local_rank == 0:
            emit("done", None)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # reported to the parent, which records the probe failed
        emit("error", (local_rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=5)))


def _drop(kind: str, payload: Any) -> None:
    return None


def close_group(dist: Any, *, barrier: bool) -> None:
    """Destroy the default process group, first meeting every rank at a barrier when this
    rank finished its work (``barrier``); after a failure it is destroyed at once, since a
    barrier would wait on ranks that may never come (the hang pytorch/torchtitan PR 1342
    avoids by not tearing down after a failure at all).

    Without the barrier a rank that finishes first tears its connections down and exits
    while a peer is still finishing: gloo ranks launched by torchrun then died now and
    then at interpreter exit ("terminate called without an active exception", SIGABRT)
    after a complete run.
    """
    try:
        if barrier:
            dist.barrier()
    finally:
        dist.destroy_process_group()


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
    if owns_group and plan.nccl_log_dir:
        os.environ.update(nccl_debug_env(plan.nccl_log_dir, os.environ))
    if owns_group:
        dist.init_process_group(
            plan.backend, init_method="env://", timeout=datetime.timedelta(seconds=plan.timeout_s)
        )
    finished = False
    try:
        run_rank(plan, denv.rank, denv.world_size, device, lambda kind, p: on_point(p))
        finished = True
    finally:
        if owns_group:
            close_group(dist, barrier=finished)


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
    timeout_s = ctx.remaining_s(default=120.0 if ctx.quick else 1800.0)
    log_dir: Path | None = None
    if gpu and world >= 2:
        from gpuplan.probes.scratch import make_scratch_dir

        with contextlib.suppress(OSError):
            log_dir = make_scratch_dir(
                Path(ctx.out_dir), machine_id=ctx.machine_id, run_id=ctx.run_id
            )
    variants = cases(gpu=gpu, quick=ctx.quick)
    plan = Plan(
        backend=backend,
        ops=tuple(dict.fromkeys(c.op for c in variants)),
        sizes=tuple(sizes(gpu=gpu, quick=ctx.quick)),
        timing=timing,
        num_nodes=num_nodes,
        timeout_s=timeout_s,
        cases=variants,
        nccl_log_dir=str(log_dir) if log_dir is not None else None,
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
        time_over_ranks="avg (nccl-tests -a 1); rank_max_samples_s: the slowest rank",
        cases=[c.label for c in variants],
    )
    if world < 2:
        rec.skip(
            f"only {world} {'GPU' if gpu else 'rank'}: collectives need at least 2 ranks"
            + (" (run under torchrun across nodes, or on a multi-GPU node)" if gpu else "")
        )
        return
    task = ctx.progress.task(
        f"collectives ({backend}, {world} ranks)", total=len(variants) * len(plan.sizes)
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
    finally:
        if log_dir is not None:
            with contextlib.suppress(Exception):
                annotate_with_nccl(rec, log_dir)
            import shutil

            shutil.rmtree(log_dir, ignore_errors=True)
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
