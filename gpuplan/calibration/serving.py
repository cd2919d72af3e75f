"""Serving calibration: the ``serve`` probe's measured latencies, per (device, engine).

``gpuplan calibrate`` puts them into the artifact under the new key ``serving`` (DESIGN.md
3.2's fields are unchanged)::

    "serving": {<device>: {<engine>: {
        "basis": "measured", "inputs": [run_id, ...],
        "points": [{"run_id", "catalog_model", "served_model", "tp", "precision",
                    "concurrency", "input_tokens", "output_tokens", "completed",
                    "ttft_s": {"p10", "p50", "p90"}, "tpot_s": {"p10", "p50", "p90"},
                    "output_throughput_tokens_per_s",
                    "speculative": {"draft_tokens", "acceptance_length", and for a draft
                    tree "tree_width", "verify_tokens"} (when the server ran speculative
                    decoding and said so)}, ...]}}}

``<device>`` is the run's ``--device-id`` when it was given, else the device the probe ran
on (:func:`gpuplan.calibration.dataset.device_of`); ``<engine>`` the engine profile the run
named (``vllm@0.6.0`` ...). Levels stopped part-way by Ctrl-C are left out, and so are
levels that ran speculative decoding of a draft length the server did not name (the probe
warned and said to pass ``--spec-tokens``).

The *factors* -- measured over forecast TTFT and TPOT at each measured concurrency,
summarised with an interval -- are computed where the forecast is
(:func:`gpuplan.forecast.inference.serving_factors`): calibration sits below the forecast
in the layering and cannot run it, and a ratio taken against the forecast that applies it
stays right when the forecast's physics changes. Here the percentiles of each level come
from the raw per-request values the probe kept (numpy's linear percentiles, as vLLM's
``benchmark_serving`` reports them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuplan.errors import SchemaError

#: engine recorded for a serve run that named none (the forecast's default profile)
DEFAULT_ENGINE = "modern"


def _percentiles(values: list[float]) -> dict[str, float] | None:
    import numpy as np

    if not values:
        return None
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90)}


def serving_points(docs: Iterable[Any], catalog: Any = None) -> dict[str, dict[str, Any]]:
    """The ``serving`` section of the artifact from result documents (empty when no
    document has a usable ``serve`` probe)."""
    from gpuplan.calibration.dataset import device_of

    out: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for probe in doc.probes:
            if probe.probe != "serve" or probe.status not in ("ok", "interrupted"):
                continue
            params = probe.params
            device = params.get("device_id") or device_of(doc, params, catalog)[0]
            engine = str(params.get("engine") or DEFAULT_ENGINE)
            for m in probe.measurements:
                if m.get("interrupted"):
                    continue
                good = [r for r in m.get("requests", []) if r.get("ok")]
                ttft = _percentiles([r["ttft_s"] for r in good if r.get("ttft_s") is not None])
                tpot = _percentiles([r["tpot_s"] for r in good if r.get("tpot_s") is not None])
                if ttft is None or tpot is None:
                    continue
                spec = m.get("speculative")
                if isinstance(spec, dict) and not spec.get("draft_tokens"):
                    # speculative, but the draft length unknown: no forecast to compare with
                    continue
                entry = out.setdefault(device, {}).setdefault(
                    engine, {"basis": "measured", "inputs": [], "points": []}
                )
                if doc.run_id not in entry["inputs"]:
                    entry["inputs"].append(doc.run_id)
                extra = (
                    {
                        "speculative": {
                            "draft_tokens": int(spec["draft_tokens"]),
                            "acceptance_length": float(spec["acceptance_length"]),
                            # a draft tree's shape (SGLang), when the server ran one
                            **{
                                key: int(spec[key])
                                for key in ("tree_width", "verify_tokens")
                                if spec.get(key) and (spec.get("tree_width") or 1) > 1
                            },
                        }
                    }
                    if isinstance(spec, dict) and spec.get("draft_tokens")
                    else {}
                )
                entry["points"].append(
                    {
                        "run_id": doc.run_id,
                        "catalog_model": params.get("catalog_model"),
                        "served_model": params.get("model"),
                        "tp": int(params.get("tp") or 1),
                        "precision": str(params.get("precision") or "bf16"),
                        "concurrency": int(m["concurrency"]),
                        "input_tokens": int(m["input_tokens"]),
                        "output_tokens": int(m["output_tokens"]),
                        "completed": len(good),
                        "ttft_s": ttft,
                        "tpot_s": tpot,
                        "output_throughput_tokens_per_s": float(
                            m["output_throughput_tokens_per_s"]
                        ),
                        **extra,
                    }
                )
    for engines in out.values():
        for entry in engines.values():
            entry["inputs"].sort()
            entry["points"].sort(key=lambda p: (p["run_id"], p["concurrency"]))
    return {d: dict(sorted(e.items())) for d, e in sorted(out.items())}


def validate_serving(section: Any, *, where: str = "artifact") -> dict[str, Any]:
    """Check the ``serving`` section's shape; each refusal names the field."""
    if not isinstance(section, dict):
        raise SchemaError(f"{where}: 'serving' must be a JSON object")
    for device, engines in section.items():
        if not isinstance(engines, dict):
            raise SchemaError(f"{where}: serving.{device} must be a JSON object")
        for engine, entry in engines.items():
            at = f"{where}: serving.{device}.{engine}"
            if not isinstance(entry, dict) or not isinstance(entry.get("points"), list):
                raise SchemaError(f"{at} needs a 'points' list")
            for i, p in enumerate(entry["points"]):
                for key in ("concurrency", "input_tokens", "output_tokens"):
                    v = p.get(key) if isinstance(p, dict) else None
                    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                        raise SchemaError(f"{at}.points[{i}].{key} must be a positive integer")
                spec = p.get("speculative")
                if spec is not None:
                    k = spec.get("draft_tokens") if isinstance(spec, dict) else None
                    tau = spec.get("acceptance_length") if isinstance(spec, dict) else None
                    if (
                        not isinstance(k, int)
                        or isinstance(k, bool)
                        or k <= 0
                        or not isinstance(tau, (int, float))
                        or not 1.0 <= tau <= k + 1
                    ):
                        raise SchemaError(
                            f"{at}.points[{i}].speculative needs draft_tokens (a positive "
                            "integer) and acceptance_length in [1, draft_tokens + 1]"
                        )
                    for key in ("tree_width", "verify_tokens"):
                        v = spec.get(key)
                        if v is not None and (
                            isinstance(v, bool) or not isinstance(v, int) or v < 1
                        ):
                            raise SchemaError(
                                f"{at}.points[{i}].speculative.{key} must be a positive integer"
                            )
                for key in ("ttft_s", "tpot_s"):
                    q = p.get(key)
                    if not isinstance(q, dict) or not all(
                        isinstance(q.get(k), (int, float)) and q[k] > 0
                        for k in ("p10", "p50", "p90")
                    ):
                        raise SchemaError(
                            f"{at}.points[{i}].{key} needs p10, p50 and p90 in seconds (> 0)"
                        )
    return section
