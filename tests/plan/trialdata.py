"""A synthetic trial-node probe run (an H100 node), for tests only.

There is no GPU on the test machines, so the GPU measurements a trial node would produce
are made up here (clearly labelled ``source``-less test data, never shipped): it is the
one edge of the plan that cannot be exercised for real on CPU. The values only need to be
plausible; the tests compare the plan's arithmetic against them, not against hardware.
"""

from __future__ import annotations

from pathlib import Path

from gpuplan.results.schema import ResultDocument
from gpuplan.results.store import save_result

GPU_POWER_W = 610.0
MEMBW_BYTES_PER_S = 2.9e12
FIO_READ_BYTES_PER_S = 6.5e9
FIO_WRITE_BYTES_PER_S = 3.1e9
MATMUL = [  # (m, n, k, flops/s)
    (1024, 1024, 1024, 3.1e14),
    (4096, 4096, 4096, 6.4e14),
    (8192, 8192, 8192, 7.0e14),
    (8192, 1024, 8192, 5.2e14),
]


def trial_document(
    started_at: str = "2026-11-30T10:00:00Z", run_id: str | None = None
) -> ResultDocument:
    import uuid

    return ResultDocument.model_validate(
        {
            "schema_version": 1,
            "run_id": run_id or str(uuid.uuid4()),
            "started_at": started_at,
            "ended_at": started_at,
            "gpuplan_version": "test",
            "host": {
                "machine_id": "test-h100-node",
                "hostname": "trial",
                "accelerators": [{"name": "NVIDIA H100 80GB HBM3", "catalog_id": "h100-sxm5-80gb"}],
            },
            "probes": [
                {
                    "probe": "matmul",
                    "probe_version": 1,
                    "status": "ok",
                    "params": {"dtype": "bfloat16", "device": "cuda:0"},
                    "measurements": [
                        {
                            "shape": {"m": m, "n": n, "k": k},
                            "flops_per_s": fl,
                            "spec_flops_per_s": 989e12,
                            "correct": True,
                            "samples_s": [2 * m * n * k / fl] * 3,
                        }
                        for m, n, k, fl in MATMUL
                    ],
                    "power_w": {"median": GPU_POWER_W, "max": 690.0, "samples": 40},
                },
                {
                    "probe": "membw",
                    "probe_version": 1,
                    "status": "ok",
                    "params": {"device": "cuda:0"},
                    "measurements": [
                        {"op": "copy", "size_bytes": 2**30, "bytes_per_s": MEMBW_BYTES_PER_S},
                        {"op": "copy", "size_bytes": 2**20, "bytes_per_s": 1.1e12},
                    ],
                },
                {
                    "probe": "storage",
                    "probe_version": 1,
                    "status": "ok",
                    "params": {"path": "/scratch"},
                    "measurements": [
                        {
                            "rw": "read",
                            "block_size_bytes": 2**20,
                            "iodepth": 32,
                            "numjobs": 4,
                            "bw_bytes_per_s": FIO_READ_BYTES_PER_S,
                        },
                        {
                            "rw": "randread",
                            "block_size_bytes": 4096,
                            "iodepth": 32,
                            "numjobs": 4,
                            "bw_bytes_per_s": 2.0e9,
                        },
                        {
                            "rw": "write",
                            "block_size_bytes": 2**20,
                            "iodepth": 32,
                            "numjobs": 4,
                            "bw_bytes_per_s": FIO_WRITE_BYTES_PER_S,
                        },
                    ],
                },
                {"probe": "pcie", "probe_version": 1, "status": "failed", "error": "test: not run"},
            ],
        }
    )


def write_trial_results(root: Path) -> Path:
    """Save the synthetic run under ``root`` (a results/ folder); returns the file."""
    return save_result(trial_document(), root)
