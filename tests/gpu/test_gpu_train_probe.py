"""The training-step probe on a real CUDA/ROCm device (marker `gpu`: skipped without one).

Full-size blocks of a catalog model (no CPU shrink) in bfloat16 autocast, one rank; the
physical bound -- training FLOPs of the block's GEMMs over its forward + backward time at
most the catalog's dense bf16 peak -- comes from the catalog row.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuplan.catalogs import get_catalog  # noqa: E402
from gpuplan.probes import train  # noqa: E402
from gpuplan.probes.base import ProbeContext, resolve_device  # noqa: E402
from gpuplan.probes.inventory import catalog_gpu  # noqa: E402

pytestmark = pytest.mark.gpu


def test_full_size_block_on_the_gpu():
    device = resolve_device("cuda")
    row = get_catalog().model("llama3.1-8b")
    shape, notes = train.block_shape_from_catalog(row)
    ctx = ProbeContext(
        device=device,
        quick=True,
        workload=dict(
            model=row.id, shape=shape.as_dict(), approximations=notes, seq_len=2048, blocks=1
        ),
    )
    train.run(ctx)
    [rec] = ctx.recorders
    assert rec.status == "ok", rec.error
    assert rec.params["scale"] == 1 and rec.params["block"] == shape.as_dict()
    [m] = rec.measurements
    assert m["memory_method"] == "torch.cuda.max_memory_allocated"
    # fp32 weights + grads + two AdamW moments of one block at least
    assert m["peak_memory_bytes"] >= 16 * m["params_per_block"]
    assert m["attention_backend"] in ("flash", "efficient", "cudnn")
    gpu = catalog_gpu(torch.cuda.get_device_name(0))
    if gpu is not None:
        peak = gpu.peak_flops_per_s("bf16")
        gemm_flops = 6.0 * m["params_per_block"] * m["tokens"]  # fwd 2PT + bwd 4PT
        achieved = gemm_flops / (m["forward_per_block_s"] + m["backward_per_block_s"])
        assert achieved <= peak
