"""What may leave a node: strip environment secrets and host names from a result document.

The probe records only an allowlist of environment variables (DESIGN.md 3.1), but a file can
be edited, produced by an older or foreign tool, or carry names that identify a site. Both
the client (before sending) and the server (on receipt) pass every document through
:func:`sanitize_document`, which is idempotent, so the content hash of an upload is the
same whichever side computed it.

Rules:

* ``env``: keep a key only if the probe's allowlist admits it
  (:data:`gpuplan.results.privacy.ENV_ALLOWLIST`, the same rule ``gpuplan probe`` applies
  when it records the environment), which also drops names that look like credentials
  (``*TOKEN*``, ``*SECRET*``, ``*PASS*``, ``*KEY*`` ...);
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
from dataclasses import dataclass, field
from typing import Any

from gpuplan.results.privacy import env_allowed

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


def env_key_allowed(key: str) -> bool:
    """The probe's own rule (:func:`gpuplan.results.privacy.env_allowed`): on the allowlist of
    communication-library and device-visibility variables, and not named like a credential."""
    return env_allowed(key)


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
