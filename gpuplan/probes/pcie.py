"""Host-device bandwidth probe: pinned and pageable copies, both directions, per GPU.

Pinned (page-locked) host memory is copied by the GPU's DMA engines directly; pageable
memory goes through a staging buffer in the driver, so it is slower and depends on the
CPU. Each GPU is measured on its own, because the NUMA placement of its PCIe root differs
(CUDA C++ Best Practices Guide, "Pinned Memory"). On CPUs there is nothing to measure and
the probe is recorded as ``skipped``.

``bytes_per_s`` = bytes copied / median time of one copy (one direction). The size curve
is measured on GPU 0; the other GPUs at the largest size only (where the link, not the
launch overhead, sets the rate), which keeps the default sweep of an 8-GPU node short.
"""

from __future__ import annotations

from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.timing import measure

PROBE_VERSION = 1


def sizes(*, quick: bool) -> list[int]:
    """Copy sizes in bytes: 1 MiB to 256 MiB (quick) or 1 GiB (default), x4 steps."""
    top = 256 << 20 if quick else 1 << 30
    out, size = [], 1 << 20
    while size <= top:
        out.append(size)
        size *= 4
    return out


def run(ctx: ProbeContext) -> None:
    torch = import_torch()
    if not ctx.device.is_gpu:
        rec = ctx.record("pcie", PROBE_VERSION, device="cpu")
        rec.skip("no GPU: host-device bandwidth needs an accelerator")
        return
    curve = sizes(quick=ctx.quick)
    per_gpu = [curve] + [[curve[-1]]] * (ctx.device.count - 1)
    task = ctx.progress.task("pcie", total=sum(len(p) for p in per_gpu) * 4)
    for index, points in enumerate(per_gpu):
        device = torch.device("cuda", index)
        rec = ctx.record("pcie", PROBE_VERSION, device=str(device))
        timer = timer_for(ctx.device, index)
        with torch.cuda.device(index), ctx.power_sampling(rec, [index]):
            for size in points:
                gpu_buf = torch.empty(size, dtype=torch.uint8, device=device)
                for memory in ("pinned", "pageable"):
                    host = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
                    host.fill_(1)
                    for direction in ("h2d", "d2h"):
                        ctx.check_deadline()
                        if direction == "h2d":

                            def fn(g=gpu_buf, h=host, nb=memory == "pinned"):
                                return g.copy_(h, non_blocking=nb)
                        else:

                            def fn(g=gpu_buf, h=host, nb=memory == "pinned"):
                                return h.copy_(g, non_blocking=nb)

                        timed = measure(fn, timer, ctx.timing)
                        rec.add(
                            {
                                "direction": direction,
                                "memory": memory,
                                "size_bytes": size,
                                **timed.as_dict(),
                                "bytes_per_s": size / timed.median_s,
                            }
                        )
                        task.advance()
                        ctx.point_done()
                    del host
                del gpu_buf
        torch.cuda.empty_cache()
        rec.ok()
