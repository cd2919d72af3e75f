"""What a result file may record about its environment (shared with the results service).

Result files are uploaded and pooled, so they carry only what explains a measurement:
the variables that tune the communication libraries, thread pools and device visibility.
Everything else in the environment (tokens, paths, user names) is dropped. The same
allowlist is applied by the results service on upload (``gpuplan.service``), so a file
written by an older or hand-edited client cannot smuggle more in.

``hostname`` is recorded only when the user asks for it (``--record-hostname``); the
machine is identified by :func:`gpuplan.probes.inventory.machine_id`, a salted hash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Exact variable names that may be recorded.
ENV_ALLOWLIST_NAMES: frozenset[str] = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "OMP_PROC_BIND",
        "OMP_PLACES",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "TORCH_NCCL_AVOID_RECORD_STREAMS",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "GROUP_WORLD_SIZE",
        "SLURM_JOB_NUM_NODES",
        "SLURM_NTASKS",
        "SLURM_GPUS_PER_NODE",
    }
)

#: Prefixes of variable names that may be recorded (communication-library tuning).
ENV_ALLOWLIST_PREFIXES: tuple[str, ...] = (
    "NCCL_",
    "RCCL_",
    "FI_EFA_",
    "FI_PROVIDER",
    "UCX_TLS",
    "GLOO_SOCKET_IFNAME",
)

#: Even an allowed name is dropped when it looks like a secret.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH|COOKIE|SESSION)", re.IGNORECASE)

#: The allowlist as one constant: exact names and name prefixes.
ENV_ALLOWLIST: dict[str, tuple[str, ...]] = {
    "names": tuple(sorted(ENV_ALLOWLIST_NAMES)),
    "prefixes": ENV_ALLOWLIST_PREFIXES,
}


def env_allowed(name: str) -> bool:
    """Whether the environment variable ``name`` may be recorded in a result file.

    >>> env_allowed("NCCL_IB_HCA"), env_allowed("AWS_SECRET_ACCESS_KEY"), env_allowed("NCCL_TOKEN")
    (True, False, False)
    """
    if _SECRET.search(name):
        return False
    return name in ENV_ALLOWLIST_NAMES or name.startswith(ENV_ALLOWLIST_PREFIXES)


def filter_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowed subset of ``environ``, sorted by name."""
    return {k: str(environ[k]) for k in sorted(environ) if env_allowed(k)}
