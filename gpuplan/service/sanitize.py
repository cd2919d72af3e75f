"""What may leave a node: strip environment secrets and host names from a result document.

The probe records only an allowlist of environment variables (DESIGN.md 3.1), but a file can
be edited, produced by an older or foreign tool, or carry names that identify a site. Both
the client (before sending) and the server (on receipt) pass every document through
:func:`sanitize_document`, which is idempotent, so the content hash of an upload is the
same whichever side computed it.

Rules:

* ``env``: keep a key only if the probe's allowlist admits it, and drop it anyway when its
  name looks like a credential (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*KEY*`` ...);
* host names: unless the uploader opts in (``--include-hostname``), ``host.hostname`` is
  removed, environment variables that name hosts (``MASTER_ADDR``, ``SLURM_NODELIST`` ...)
  or whose value equals the host name are dropped, and a ``host.machine_id`` that contains
  the host name is replaced by a stable pseudonym (``m-`` + 16 hex digits of its sha256),
  so runs of one machine still group together.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

# Used only until gpuplan.probes exposes its allowlist (see _probe_allowlist).
_FALLBACK_ALLOWED_PREFIXES = (
    "NCCL_",
    "CUDA_",
    "NVIDIA_",
    "CUBLAS_",
    "CUDNN_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "RCCL_",
    "TORCH_",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "GLOO_",
    "UCX_",
    "FI_",
    "GPUPLAN_",
)
_FALLBACK_ALLOWED_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT")

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH|SESSION|COOKIE|SIGNATURE|_KEY$|^KEY",
    re.IGNORECASE,
)
HOST_ENV_KEYS = frozenset(
    {
        "HOSTNAME",
        "HOST",
        "MASTER_ADDR",
        "NODENAME",
        "SLURMD_NODENAME",
        "SLURM_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_SUBMIT_HOST",
        "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_TOPOLOGY_ADDR",
        "NCCL_COMM_ID",
        "PMIX_HOSTNAME",
        "K8S_NODE_NAME",
        "NODE_NAME",
    }
)


def _probe_allowlist() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(allowed prefixes, allowed exact keys) from gpuplan.probes when it defines them."""
    try:
        from gpuplan import probes
    except ImportError:  # pragma: no cover - gpuplan.probes is part of the package
        probes = None  # type: ignore[assignment]
    allow = getattr(probes, "ENV_ALLOWLIST", None)
    if allow:
        items = tuple(str(x) for x in allow)
        prefixes = tuple(x[:-1] if x.endswith("*") else x for x in items if x.endswith(("_", "*")))
        keys = tuple(x for x in items if not x.endswith(("_", "*")))
        return prefixes, keys
    return _FALLBACK_ALLOWED_PREFIXES, _FALLBACK_ALLOWED_KEYS


def env_key_allowed(key: str) -> bool:
    """True when ``key`` is on the probe's allowlist and does not look like a credential."""
    prefixes, keys = _probe_allowlist()
    if _SECRET_NAME.search(key):
        return False
    return key in keys or key.startswith(prefixes)


@dataclass
class SanitizeReport:
    """What :func:`sanitize_document` removed (keys only: never the values)."""

    env_removed: list[str] = field(default_factory=list)
    hostname_removed: bool = False
    machine_id_pseudonymised: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "env_removed": self.env_removed,
            "hostname_removed": self.hostname_removed,
            "machine_id_pseudonymised": self.machine_id_pseudonymised,
        }


def pseudonym(machine_id: str) -> str:
    return "m-" + hashlib.sha256(machine_id.encode()).hexdigest()[:16]


def sanitize_document(
    doc: dict[str, Any], *, keep_hostname: bool = False
) -> tuple[dict[str, Any], SanitizeReport]:
    """A copy of ``doc`` without environment secrets and (unless kept) host names.

    ``doc`` is a decoded result document; anything that is not shaped like one is returned
    unchanged for the schema validation to reject with a precise message.
    """
    report = SanitizeReport()
    if not isinstance(doc, dict):
        return doc, report
    out = copy.deepcopy(doc)
    host = out.get("host") if isinstance(out.get("host"), dict) else None
    hostname = host.get("hostname") if host else None
    hostname = hostname if isinstance(hostname, str) and hostname.strip() else None

    env = out.get("env")
    if isinstance(env, dict):
        kept: dict[str, Any] = {}
        for key, value in env.items():
            k = str(key)
            drop = not env_key_allowed(k)
            if not keep_hostname and not drop:
                drop = k.upper() in HOST_ENV_KEYS or (
                    hostname is not None
                    and isinstance(value, str)
                    and hostname.lower() in value.lower()
                )
            if drop:
                report.env_removed.append(k)
            else:
                kept[key] = value
        out["env"] = kept
    if host is not None and not keep_hostname:
        if "hostname" in host and host.get("hostname") is not None:
            host["hostname"] = None
            report.hostname_removed = True
        mid = host.get("machine_id")
        if hostname and isinstance(mid, str) and hostname.lower() in mid.lower():
            host["machine_id"] = pseudonym(mid)
            report.machine_id_pseudonymised = True
    report.env_removed.sort()
    return out, report


def canonical_json(doc: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces, UTF-8) used for the content hash."""
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def content_sha256(doc: Any) -> str:
    """sha256 of :func:`canonical_json` (hex)."""
    return hashlib.sha256(canonical_json(doc)).hexdigest()
