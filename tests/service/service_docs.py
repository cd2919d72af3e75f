"""Result documents for the service tests (realistic shapes, seeded values)."""

from __future__ import annotations

import copy
import json
import random
import uuid
from pathlib import Path
from typing import Any

H100_NAME = "NVIDIA H100 80GB HBM3"


def make_doc(
    *,
    seed: int = 0,
    run_id: str | None = None,
    accelerator: str = H100_NAME,
    machine_id: str | None = None,
    hostname: str | None = None,
    matmul_flops_per_s: float | None = None,
    membw_bytes_per_s: float | None = None,
    pcie_bytes_per_s: float = 5.0e10,
    matmul_dtype: str = "bfloat16",
    samples: int = 5,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A realistic result document (schema v1) with matmul, membw, pcie and collectives.

    Figures are typical of an H100 SXM trial node (about 70 % of the bf16 peak, 90 % of the
    HBM bandwidth) with seeded noise; tests that need an implausible value pass it.
    """
    rng = random.Random(seed)
    rid = run_id or str(uuid.UUID(int=rng.getrandbits(128), version=4))
    mm = (
        matmul_flops_per_s if matmul_flops_per_s is not None else 6.9e14 * (1 + 0.02 * rng.random())
    )
    bw = membw_bytes_per_s if membw_bytes_per_s is not None else 3.0e12 * (1 + 0.01 * rng.random())

    def timing(median: float) -> dict[str, Any]:
        return {
            "loops": 10,
            "warmup_s": [median * 1.3],
            "samples_s": [median * (1 + 0.01 * rng.random()) for _ in range(samples)],
        }

    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    return {
        "schema_version": 1,
        "run_id": rid,
        "started_at": f"2025-03-{1 + seed % 28:02d}T10:00:00Z",
        "ended_at": f"2025-03-{1 + seed % 28:02d}T10:05:00Z",
        "gpuplan_version": "0.1.0",
        "host": {
            "machine_id": machine_id or f"mid-{seed:04d}",
            "hostname": hostname,
            "cpu_model": "Intel Xeon Platinum 8480+",
            "cpu_count": 224,
            "memory_bytes": 2 * 10**12,
            "accelerators": [
                {"name": accelerator, "memory_bytes": 80 * 2**30, "pcie_gen": 5, "pcie_width": 16}
            ]
            * 8,
            "driver_version": "550.54.15",
            "cuda_version": "12.4",
            "torch_version": "2.4.0",
        },
        "argv": ["gpuplan", "probe", "--quick"],
        "env": env
        if env is not None
        else {"NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
        "probes": [
            {
                "probe": "matmul",
                "probe_version": 1,
                "status": "ok",
                "params": {"dtype": matmul_dtype, "device": "cuda:0"},
                "measurements": [
                    {
                        "shape": {"m": m, "n": n, "k": k},
                        **timing(2 * m * n * k / mm),
                        "flops_per_s": mm * (0.9 if m == 4096 else 1.0),
                        "correct": True,
                    }
                    for m, n, k in shapes
                ],
            },
            {
                "probe": "membw",
                "probe_version": 1,
                "status": "ok",
                "params": {"device": "cuda:0"},
                "measurements": [
                    {
                        "op": "copy",
                        "size_bytes": size,
                        "bytes_moved": 2 * size,
                        **timing(2 * size / bw),
                        "bytes_per_s": bw,
                    }
                    for size in (2**28, 2**30)
                ],
            },
            {
                "probe": "pcie",
                "probe_version": 1,
                "status": "ok",
                "params": {"device": "cuda:0"},
                "measurements": [
                    {
                        "direction": d,
                        "memory": "pinned",
                        "size_bytes": 2**28,
                        **timing(2**28 / 5.0e10),
                        "bytes_per_s": pcie_bytes_per_s * (1 - 0.02 * rng.random()),
                    }
                    for d in ("h2d", "d2h")
                ],
            },
            {
                "probe": "collectives",
                "probe_version": 1,
                "status": "ok",
                "params": {"device": "cuda", "backend": "nccl"},
                "measurements": [
                    {
                        "op": "all_reduce",
                        "size_bytes": size,
                        "ranks": 8,
                        **timing(size / 3.6e11),
                        "algbw_bytes_per_s": 2.1e11 * (1 + 0.01 * rng.random()),
                        "busbw_bytes_per_s": 3.6e11 * (1 + 0.01 * rng.random()),
                        "correct": True,
                    }
                    for size in (2**20, 2**30)
                ],
            },
        ],
    }


def write_doc(directory: Path, doc: dict[str, Any]) -> Path:
    """Write a document as ``gpuplan probe`` would (one file per run)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{doc['run_id'][:8]}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def deep(doc: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(doc)
