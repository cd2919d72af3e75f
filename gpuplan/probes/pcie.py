"""Host-device bandwidth probe: per GPU with NUMA-local host memory, bidirectional, all GPUs at once.

Pinned (page-locked) host memory is copied by the GPU's DMA engines directly; pageable
memory goes through a staging buffer in the driver, so it is slower and depends on the
CPU (CUDA C++ Best Practices Guide, "Pinned Memory"). On CPUs there is nothing to measure
and the probe is recorded as ``skipped``.

NUMA placement (as nvbandwidth does it: it binds the thread to the GPU's CPUs with
``nvmlDeviceSetCpuAffinity`` before it allocates host memory, github.com/NVIDIA/nvbandwidth
``common.h``): before a GPU's host buffers are allocated, the thread is bound with
``os.sched_setaffinity`` to the CPUs of the GPU's NUMA node (``/sys/bus/pci/devices/<bus>/
numa_node`` and ``/sys/devices/system/node/nodeN/cpulist``; sysfs, so it works the same on
NVIDIA and AMD), so that the pages are first touched, and therefore placed, on that node; the
binding is undone afterwards. Whether it succeeded, and why not, is in the record's
``params.numa`` (a node that reports no NUMA node, a cgroup that excludes the node's CPUs ...).

Three records:

* ``pcie`` (one per GPU): ``bytes_per_s`` = bytes copied / median time of one copy, one
  direction, pinned and pageable. The size curve is measured on GPU 0; the other GPUs at the
  largest size only (where the link, not the launch overhead, sets the rate);
* ``pcie_concurrent``, ``mode: bidirectional`` (per GPU, pinned, largest size): a host-to-device
  and a device-to-host copy in flight together on two streams (nvbandwidth's
  ``host_to_device_bidirectional_memcpy_ce`` pairs the directions the same way);
  ``bytes_per_s`` counts both directions, ``vs_alone`` divides it by the sum of the two
  one-direction figures (1.0: the link is full duplex);
* ``pcie_concurrent``, ``mode: all_gpus`` (pinned, largest size, each direction): every GPU
  copies its own NUMA-local buffer at once (nvbandwidth's ``all_to_host``/``host_to_all``
  tests); ``bytes_per_s`` is the node's aggregate, ``vs_alone`` divides it by the sum of the
  GPUs' figures alone (below 1.0: a shared PCIe switch, root complex or host memory limits).

Keeping the concurrent figures in their own record leaves the ``pcie`` record what
calibration has always fitted (one direction, one GPU).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.nics import node_cpus, pci_numa_node
from gpuplan.probes.timing import WallTimer, measure

PROBE_VERSION = 2  # 2: params.numa (NUMA binding of the host buffers)
CONCURRENT_VERSION = 1

#: Where sysfs is read from (tests point it at a fake tree).
SYSFS_ROOT: Path | str = "/"


def sizes(*, quick: bool) -> list[int]:
    """Copy sizes in bytes: 1 MiB to 256 MiB (quick) or 1 GiB (default), x4 steps."""
    top = 256 << 20 if quick else 1 << 30
    out, size = [], 1 << 20
    while size <= top:
        out.append(size)
        size *= 4
    return out


def planned_budget(quick: bool, gpus: int, timing: Any) -> Any:
    """The suite's plan (gpuplan.probes.budget): the one-direction sweep (4 copies x the sizes
    on GPU 0, the largest on the others), a bidirectional point per GPU, 2 all-GPU points."""
    from gpuplan.probes.budget import SETUP_S, ProbeBudget, point_s

    if gpus == 0:
        return ProbeBudget("pcie", 0.0, 0, "skipped without a GPU")
    one_way = 4 * (len(sizes(quick=quick)) + gpus - 1)
    concurrent = gpus + (2 if gpus > 1 else 0)
    return ProbeBudget(
        "pcie",
        SETUP_S + (one_way + concurrent) * point_s(timing),
        one_way + concurrent,
        "4 copies x the sizes on GPU 0 and the largest on the others; per GPU both ways at "
        "once; all GPUs at once each way",
    )


@dataclass(frozen=True)
class NumaBinding:
    """Where a GPU's host buffers were allocated from."""

    pci_bus_id: str | None
    numa_node: int | None
    bound: bool
    cpus: int | None  # CPUs the thread was bound to
    reason: str | None  # why it was not bound

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def numa_bound(bus_id: str | None, root: Path | str = "/") -> Iterator[NumaBinding]:
    """Bind the calling thread to the CPUs of the PCI device's NUMA node while the block runs.

    Only CPUs this process may use (its cgroup cpuset / taskset) are taken; the previous
    affinity is restored on the way out. Nothing is bound, and ``reason`` says why, when the
    node or its CPUs cannot be read or the binding is refused.
    """
    node, why = pci_numa_node(bus_id, root)
    if node is None:
        yield NumaBinding(bus_id, None, False, None, why)
        return
    cpus, why = node_cpus(node, root)
    if cpus is None:
        yield NumaBinding(bus_id, node, False, None, why)
        return
    try:
        before = os.sched_getaffinity(0)
    except (AttributeError, OSError) as exc:
        yield NumaBinding(bus_id, node, False, None, f"CPU affinity unavailable ({exc})")
        return
    allowed = cpus & before
    if not allowed:
        yield NumaBinding(
            bus_id,
            node,
            False,
            0,
            f"none of NUMA node {node}'s CPUs is allowed to this process (cgroup or taskset)",
        )
        return
    try:
        os.sched_setaffinity(0, allowed)
    except OSError as exc:
        yield NumaBinding(bus_id, node, False, None, f"sched_setaffinity refused: {exc}")
        return
    try:
        yield NumaBinding(bus_id, node, True, len(allowed), None)
    finally:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, before)


def gpu_bus_id(ctx: ProbeContext, index: int) -> str | None:
    """PCI bus id of torch device ``index``: the inventory row (matched by UUID/PCI), else torch."""
    from gpuplan.probes.base import accelerator_for

    acc = accelerator_for(ctx.accelerators, index)
    if acc and acc.get("pci_bus_id"):
        return str(acc["pci_bus_id"])
    with contextlib.suppress(Exception):
        from gpuplan.probes.inventory import torch_devices

        bus = torch_devices(import_torch())[index]["pci_bus_id"]
        return str(bus) if bus else None
    return None


def _drop_cached_pinned(torch: Any) -> None:
    """Free torch's cached pinned blocks, so that a new buffer is allocated under the binding."""
    fn = getattr(getattr(torch, "_C", None), "_host_emptyCache", None)
    if fn is not None:
        with contextlib.suppress(Exception):
            fn()


def run(ctx: ProbeContext) -> None:
    torch = import_torch()
    if not ctx.device.is_gpu:
        rec = ctx.record("pcie", PROBE_VERSION, device="cpu")
        rec.skip("no GPU: host-device bandwidth needs an accelerator")
        return
    curve = sizes(quick=ctx.quick)
    top = curve[-1]
    n = ctx.device.count
    per_gpu = [curve] + [[top]] * (n - 1)
    concurrent_points = n + (2 if n > 1 else 0)
    task = ctx.progress.task("pcie", total=sum(len(p) for p in per_gpu) * 4 + concurrent_points)
    alone: dict[tuple[int, str], float] = {}  # (gpu, direction) -> pinned B/s at the top size
    bindings: dict[int, NumaBinding] = {}
    for index, points in enumerate(per_gpu):
        device = torch.device("cuda", index)
        bus = gpu_bus_id(ctx, index)
        with numa_bound(bus, SYSFS_ROOT) as binding:
            bindings[index] = binding
            rec = ctx.record("pcie", PROBE_VERSION, device=str(device), numa=binding.as_dict())
            if not binding.bound:
                rec.warn(f"host memory not bound to the GPU's NUMA node: {binding.reason}")
            _drop_cached_pinned(torch)
            timer = timer_for(ctx.device, index)
            with torch.cuda.device(index), ctx.power_sampling(rec, [index]):
                for size in points:
                    gpu_buf = torch.empty(size, dtype=torch.uint8, device=device)
                    for memory in ("pinned", "pageable"):
                        host = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
                        host.fill_(1)
                        for direction in ("h2d", "d2h"):
                            ctx.check_deadline()
                            fn = _copy_fn(gpu_buf, host, direction, memory == "pinned")
                            timed = measure(fn, timer, ctx.timing)
                            bps = size / timed.median_s
                            if memory == "pinned" and size == top:
                                alone[(index, direction)] = bps
                            rec.add(
                                {
                                    "direction": direction,
                                    "memory": memory,
                                    "size_bytes": size,
                                    **timed.as_dict(),
                                    "bytes_per_s": bps,
                                }
                            )
                            task.advance()
                            ctx.point_done()
                        del host
                    del gpu_buf
                rec.ok()
                _bidirectional(ctx, torch, index, top, binding, alone, task)
        torch.cuda.empty_cache()
    if n > 1:
        _all_gpus(ctx, torch, top, alone, task)


def _copy_fn(gpu_buf: Any, host: Any, direction: str, non_blocking: bool) -> Any:
    if direction == "h2d":
        return lambda: gpu_buf.copy_(host, non_blocking=non_blocking)
    return lambda: host.copy_(gpu_buf, non_blocking=non_blocking)


def _bidirectional(
    ctx: ProbeContext,
    torch: Any,
    index: int,
    size: int,
    binding: NumaBinding,
    alone: dict[tuple[int, str], float],
    task: Any,
) -> None:
    """H2D and D2H in flight together on two streams of GPU ``index`` (pinned, NUMA-local)."""
    device = torch.device("cuda", index)
    rec = ctx.record(
        "pcie_concurrent",
        CONCURRENT_VERSION,
        device=str(device),
        mode="bidirectional",
        numa=binding.as_dict(),
    )
    ctx.check_deadline()
    up_dev = torch.empty(size, dtype=torch.uint8, device=device)
    down_dev = torch.empty(size, dtype=torch.uint8, device=device)
    up_host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    down_host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    up_host.fill_(1)
    s_up, s_down = torch.cuda.Stream(device=device), torch.cuda.Stream(device=device)

    def both() -> None:
        current = torch.cuda.current_stream(device)
        s_up.wait_stream(current)
        s_down.wait_stream(current)
        with torch.cuda.stream(s_up):
            up_dev.copy_(up_host, non_blocking=True)
        with torch.cuda.stream(s_down):
            down_host.copy_(down_dev, non_blocking=True)
        current.wait_stream(s_up)
        current.wait_stream(s_down)

    timed = measure(both, timer_for(ctx.device, index), ctx.timing)
    bps = 2 * size / timed.median_s
    ref = [alone.get((index, d)) for d in ("h2d", "d2h")]
    rec.add(
        {
            "mode": "bidirectional",
            "direction": "both",
            "memory": "pinned",
            "devices": [index],
            "size_bytes": size,
            "bytes_moved": 2 * size,
            **timed.as_dict(),
            "bytes_per_s": bps,
            "vs_alone": bps / (ref[0] + ref[1]) if ref[0] and ref[1] else None,
        }
    )
    task.advance()
    ctx.point_done()
    rec.ok()


def _all_gpus(
    ctx: ProbeContext, torch: Any, size: int, alone: dict[tuple[int, str], float], task: Any
) -> None:
    """Every GPU copies its own NUMA-local pinned buffer at once, each direction."""
    n = ctx.device.count
    rec = ctx.record("pcie_concurrent", CONCURRENT_VERSION, device="all", mode="all_gpus")
    devices = [torch.device("cuda", i) for i in range(n)]
    gpu_bufs, host_bufs, streams, numa = [], [], [], []
    _drop_cached_pinned(torch)
    for i, device in enumerate(devices):
        with numa_bound(gpu_bus_id(ctx, i), SYSFS_ROOT) as binding:
            numa.append(binding.as_dict())
            host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            host.fill_(1)
        host_bufs.append(host)
        gpu_bufs.append(torch.empty(size, dtype=torch.uint8, device=device))
        streams.append(torch.cuda.Stream(device=device))
    rec.params["numa"] = numa

    def sync_all() -> None:
        for device in devices:
            torch.cuda.synchronize(device)

    for direction in ("h2d", "d2h"):
        ctx.check_deadline()

        def all_at_once(direction: str = direction) -> None:
            for g, h, s in zip(gpu_bufs, host_bufs, streams, strict=True):
                with torch.cuda.stream(s):
                    if direction == "h2d":
                        g.copy_(h, non_blocking=True)
                    else:
                        h.copy_(g, non_blocking=True)

        timed = measure(all_at_once, WallTimer(sync=sync_all), ctx.timing)
        bps = n * size / timed.median_s
        ref = [alone.get((i, direction)) or 0.0 for i in range(n)]
        rec.add(
            {
                "mode": "all_gpus",
                "direction": direction,
                "memory": "pinned",
                "devices": list(range(n)),
                "size_bytes": size,
                "bytes_moved": n * size,
                **timed.as_dict(),
                "bytes_per_s": bps,
                "vs_alone": bps / sum(ref) if all(ref) else None,
            }
        )
        task.advance()
        ctx.point_done()
    rec.ok()
