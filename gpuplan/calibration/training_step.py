"""Training-step calibration: the ``train`` probe's measured block times, per (device, framework).

``gpuplan calibrate`` puts them into the artifact under the key ``training`` (DESIGN.md
3.2's fields are unchanged; an artifact without training runs has no such key)::

    "training": {<device>: {<framework>: {
        "basis": "measured", "inputs": [run_id, ...],
        "points": [{"run_id", "model", "block": {hidden, heads, kv_heads, head_dim,
                    ffn_hidden, gated_mlp}, "scale", "tp", "seq_len", "micro_batch",
                    "blocks", "attention_backend", "compute_dtype", "precision",
                    "compute_s": {"p10", "p50", "p90"},      # forward + backward, per block
                    "optimizer_s": {"p10", "p50", "p90"},    # AdamW step, per block
                    "peak_memory_bytes", "memory_method"}, ...]}}}

``<device>`` is the run's ``--device-id`` when it was given, else the device the probe ran
on (:func:`gpuplan.calibration.dataset.device_of`); ``<framework>`` the ``--framework``
label of the run (``pytorch-eager`` when none was given). The percentiles are numpy's
linear ones over the timed iterations (forward + backward of one iteration, divided by the
number of blocks).

The *factor* -- measured block time over the forecast's block time for the same shapes
on the same device -- is computed where the forecast is
(:func:`gpuplan.forecast.train_calibration.training_step_factor`): calibration sits below
the forecast in the layering, and a ratio taken against the forecast that applies it
stays right when the forecast's physics changes (the serving calibration does the same).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuplan.errors import SchemaError

#: framework label of a run that named none (the probe's own eager PyTorch blocks)
DEFAULT_FRAMEWORK = "pytorch-eager"
_BLOCK_KEYS = ("hidden", "heads", "kv_heads", "head_dim", "ffn_hidden")
#: other spellings of a framework label, mapped to the one the artifact keys by
FRAMEWORK_ALIASES = {
    "megatron-core": "megatron",
    "megatron-lm": "megatron",
    "mcore": "megatron",
    "pytorch": DEFAULT_FRAMEWORK,
    "eager": DEFAULT_FRAMEWORK,
}


def framework_key(name: str | None) -> str:
    """The artifact's key for a framework label (lower case, aliases folded).

    >>> framework_key("Megatron-Core"), framework_key(None)
    ('megatron', 'pytorch-eager')
    """
    n = str(name or DEFAULT_FRAMEWORK).strip().lower()
    return FRAMEWORK_ALIASES.get(n, n)


def _percentiles(values: list[float]) -> dict[str, float] | None:
    import numpy as np

    if not values:
        return None
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90)}


def training_points(docs: Iterable[Any], catalog: Any = None) -> dict[str, dict[str, Any]]:
    """The ``training`` section of the artifact from result documents (empty when no
    document has a usable ``train`` probe)."""
    from gpuplan.calibration.dataset import device_of

    out: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for probe in doc.probes:
            if probe.probe != "train" or probe.status != "ok":
                continue
            params = probe.params
            device = params.get("device_id") or device_of(doc, params, catalog)[0]
            framework = framework_key(params.get("framework"))
            for m in probe.measurements:
                blocks = int(m["blocks"])
                fwd = m["forward"]["samples_s"]
                bwd = m["backward"]["samples_s"]
                compute = _percentiles([(f + b) / blocks for f, b in zip(fwd, bwd, strict=True)])
                optim = _percentiles([t / blocks for t in m["optimizer"]["samples_s"]])
                if compute is None or optim is None:
                    continue
                entry = out.setdefault(device, {}).setdefault(
                    framework, {"basis": "measured", "inputs": [], "points": []}
                )
                if doc.run_id not in entry["inputs"]:
                    entry["inputs"].append(doc.run_id)
                entry["points"].append(
                    {
                        "run_id": doc.run_id,
                        "model": params.get("model"),
                        "block": dict(params["block"]),
                        "scale": int(params.get("scale") or 1),
                        "tp": int(m.get("tp") or params.get("tp") or 1),
                        "seq_len": int(m["seq_len"]),
                        "micro_batch": int(m["micro_batch"]),
                        "blocks": blocks,
                        "attention_backend": m.get("attention_backend"),
                        "compute_dtype": params.get("compute_dtype"),
                        "precision": str(params.get("precision") or "bf16"),
                        "compute_s": compute,
                        "optimizer_s": optim,
                        "peak_memory_bytes": m.get("peak_memory_bytes"),
                        "memory_method": m.get("memory_method"),
                    }
                )
    for frameworks in out.values():
        for entry in frameworks.values():
            entry["inputs"].sort()
            entry["points"].sort(key=lambda p: (p["run_id"], p["seq_len"], p["micro_batch"]))
    return {d: dict(sorted(f.items())) for d, f in sorted(out.items())}


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def validate_training(section: Any, *, where: str = "artifact") -> dict[str, Any]:
    """Check the ``training`` section's shape; each refusal names the field."""
    if not isinstance(section, dict):
        raise SchemaError(f"{where}: 'training' must be a JSON object")
    for device, frameworks in section.items():
        if not isinstance(frameworks, dict):
            raise SchemaError(f"{where}: training.{device} must be a JSON object")
        for framework, entry in frameworks.items():
            at = f"{where}: training.{device}.{framework}"
            if not isinstance(entry, dict) or not isinstance(entry.get("points"), list):
                raise SchemaError(f"{at} needs a 'points' list")
            for i, p in enumerate(entry["points"]):
                if not isinstance(p, dict):
                    raise SchemaError(f"{at}.points[{i}] must be a JSON object")
                for key in ("tp", "seq_len", "micro_batch", "scale"):
                    if not _positive_int(p.get(key)):
                        raise SchemaError(f"{at}.points[{i}].{key} must be a positive integer")
                block = p.get("block")
                if not isinstance(block, dict) or not all(
                    _positive_int(block.get(k)) for k in _BLOCK_KEYS
                ):
                    raise SchemaError(
                        f"{at}.points[{i}].block needs positive integers " + ", ".join(_BLOCK_KEYS)
                    )
                for key in ("compute_s", "optimizer_s"):
                    q = p.get(key)
                    if not isinstance(q, dict) or not all(
                        isinstance(q.get(k), (int, float))
                        and not isinstance(q.get(k), bool)
                        and q[k] > 0
                        for k in ("p10", "p50", "p90")
                    ):
                        raise SchemaError(
                            f"{at}.points[{i}].{key} needs p10, p50 and p90 in seconds (> 0)"
                        )
    return section
