"""Training forecast calibrated by the user's own training step (``probe --workload train``).

The artifact's ``training`` section (:mod:`gpuplan.calibration.training_step`) holds, per
device and framework, the measured forward + backward time of real transformer blocks and
their shapes. :func:`training_step_factor` forecasts the *same* blocks on the same device
with the training step model (:func:`gpuplan.forecast.training.evaluate_layouts`) and takes
measured over forecast:

* the forecast block is one layer of a dense decoder with the shapes that ran (after the
  CPU shrink, MoE and MLA approximations the probe recorded), the probe's TP size, micro-batch
  and sequence length, no pipeline, data or context parallelism, no recomputation, no
  sequence parallelism (the probe runs none), and the flash-attention path unless the probe's
  SDPA dispatched to the math kernel;
* its time per layer is the difference of a two-layer and a one-layer forecast of its
  ``compute`` + ``tp_comm`` terms: the embedding, output layer and loss cancel, and what is
  left is exactly what the probe timed (forward and backward of a block, with its TP
  all-reduces when TP > 1);
* the factor is the geometric mean over the points of ``measured p50 / forecast``, its
  interval from the smallest ``p10`` ratio to the largest ``p90`` ratio (the spread of the
  timed iterations and of the points), as the serving calibration does
  (:func:`gpuplan.forecast.inference.serving_factors`).

:func:`apply_training_step` puts the factor into the constants as ``compute_time_factor``
``[value, low, high]``; the step model multiplies each layout's per-micro-batch compute and
TP-communication time by it at the matching corner of its interval (so the pipeline bubble
and the overlap of data-parallel traffic follow), and the forecast's output carries
``calibration.training_step``. A factor is looked up for the forecast's framework first,
then for the probe's generic ``pytorch-eager`` blocks; without a ``training`` section
nothing changes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypedDict

from gpuplan.calibration.training_step import (
    DEFAULT_FRAMEWORK,
    framework_key,
    validate_training,
)
from gpuplan.numeric import JSONDict

if TYPE_CHECKING:
    from gpuplan.forecast.hardware import Hardware
    from gpuplan.forecast.model import ModelArch
    from gpuplan.forecast.training import Constants, FactorPoint, TrainingStepFactor

#: the constants key the step model reads (``forecast.training.evaluate_layouts``)
FACTOR_KEY = "compute_time_factor"
BASIS = (
    "measured: forward + backward of real transformer blocks (probe --workload train) over "
    "the forecast of the same blocks on this device; multiplies compute and TP-communication "
    "time"
)


class _BlockShape(TypedDict):
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int


class ProbeBlock(_BlockShape, total=False):
    """The shapes of the transformer block a training-step probe ran."""

    gated_mlp: bool


class ProbePoint(TypedDict, total=False):
    """One point of an artifact's ``training`` section (checked by
    :func:`gpuplan.calibration.training_step.validate_training`)."""

    run_id: str | None
    model: str | None
    scale: int
    tp: int
    seq_len: int
    micro_batch: int
    attention_backend: str | None
    precision: str | None
    block: ProbeBlock
    compute_s: dict[str, float]
    """``p10``, ``p50``, ``p90`` of the forward + backward time of one block."""
    optimizer_s: dict[str, float]


class BlockForecast(TypedDict):
    """The step model's time of one probe block (:func:`block_forecast`)."""

    compute_s: float
    optimizer_s: float


def _artifact_dict(artifact: object) -> JSONDict | None:
    if artifact is None:
        return None
    if isinstance(artifact, dict):
        return artifact
    from gpuplan.calibration import load_artifact

    return load_artifact(artifact)


def block_arch(block: ProbeBlock, layers: int) -> ModelArch:
    """A dense decoder of ``layers`` blocks with the probe's block shapes."""
    from gpuplan.forecast.model import ModelArch

    heads, kv = int(block["heads"]), int(block["kv_heads"])
    return ModelArch(
        name="probe-block",
        layers=layers,
        hidden=int(block["hidden"]),
        heads=heads,
        kv_heads=kv,
        head_dim=int(block["head_dim"]),
        ffn_hidden=int(block["ffn_hidden"]),
        vocab=8 * int(block["hidden"]),  # cancels in the two-minus-one-layer difference
        gated_mlp=bool(block.get("gated_mlp", True)),
        attention="mha" if kv == heads else ("mqa" if kv == 1 else "gqa"),
    )


def block_forecast(point: ProbePoint, hw: Hardware, constants: Constants) -> BlockForecast:
    """The step model's forward + backward time (``compute_s``, with TP communication) and
    Adam time (``optimizer_s``) of one probe block, per block, at the calibrated value."""
    import numpy as np

    from gpuplan.forecast.training import Framework, evaluate_layouts, layouts_from_dict

    c = {k: v for k, v in constants.items() if k != FACTOR_KEY}
    mb, tp = int(point["micro_batch"]), int(point["tp"])
    fw = Framework(
        name="probe",
        sequence_parallel=False,
        flash_attention=point.get("attention_backend") != "math",
        dp_overlap=False,
    )
    layouts = layouts_from_dict(
        dict(tp=tp, pp=1, cp=1, ep=1, dp=1, vp=1, micro_batch=mb, recompute=0, zero=0)
    )
    totals = []
    for layers in (1, 2):
        r = evaluate_layouts(
            block_arch(point["block"], layers),
            hw,
            layouts,
            seq_len=int(point["seq_len"]),
            global_batch=mb,
            precision=str(point.get("precision") or "bf16"),
            framework=fw,
            constants=c,
            with_memory=False,
        )
        b = r["breakdown_s"]
        totals.append(
            (
                float(np.asarray(b["compute"])[0, 0] + np.asarray(b["tp_comm"])[0, 0]),
                float(np.asarray(b["optimizer"])[0, 0]),
            )
        )
    return {
        "compute_s": totals[1][0] - totals[0][0],
        "optimizer_s": totals[1][1] - totals[0][1],
    }


def training_step_factor(
    artifact: object, hw: Hardware, framework: str | None, constants: Constants
) -> TrainingStepFactor | None:
    """Measured-over-forecast block-time factor of ``framework`` on ``hw.gpu_id``, or None.

    Returns
    -------
    dict or None
        ``factor``, ``low``, ``high``, ``device``, ``framework`` (asked), ``matched`` (the
        artifact's framework used), ``basis``, ``inputs`` and ``points`` (each with its
        ratios); ``applied: False`` with the reason when the device has training points
        of other frameworks only; None when the artifact has no training point on this
        device.

    Raises
    ------
    SchemaError
        The artifact's ``training`` section is malformed (the message names the field).
    """
    data = _artifact_dict(artifact)
    section = (data or {}).get("training")
    if not section:
        return None
    checked = validate_training(section)
    entries = checked.get(hw.gpu_id) or {}
    if not entries:
        return None
    asked = framework_key(framework)
    matched = asked if asked in entries else DEFAULT_FRAMEWORK
    entry = entries.get(matched)
    if entry is None:
        return {
            "applied": False,
            "device": hw.gpu_id,
            "framework": asked,
            "reason": f"no training-step probe of framework {asked!r} on {hw.gpu_id} (probed: "
            + ", ".join(sorted(entries))
            + "); probe with --framework "
            + asked,
        }
    points: list[FactorPoint] = []
    for p in entry["points"]:
        ref = block_forecast(p, hw, constants)
        ratios = {k: float(p["compute_s"][k]) / ref["compute_s"] for k in ("p10", "p50", "p90")}
        points.append(
            {
                "run_id": p.get("run_id"),
                "model": p.get("model"),
                "scale": p["scale"],
                "tp": p["tp"],
                "seq_len": p["seq_len"],
                "micro_batch": p["micro_batch"],
                "attention_backend": p.get("attention_backend"),
                "measured_compute_per_block_s": float(p["compute_s"]["p50"]),
                "forecast_compute_per_block_s": ref["compute_s"],
                "ratio": ratios,
                "measured_optimizer_per_block_s": float(p["optimizer_s"]["p50"]),
                "forecast_optimizer_per_block_s": ref["optimizer_s"],
            }
        )
    value = math.exp(sum(math.log(pt["ratio"]["p50"]) for pt in points) / len(points))
    out: TrainingStepFactor = {
        "applied": True,
        "factor": value,
        "low": min(value, min(pt["ratio"]["p10"] for pt in points)),
        "high": max(value, max(pt["ratio"]["p90"] for pt in points)),
        "device": hw.gpu_id,
        "framework": asked,
        "matched": matched,
        "basis": BASIS
        + (
            f" (generic {DEFAULT_FRAMEWORK} blocks: no probe with --framework {asked})"
            if matched != asked
            else ""
        ),
        "inputs": list(entry.get("inputs", [])),
        "points": points,
    }
    if any(pt["scale"] > 1 for pt in points):
        out["warning"] = (
            "shrunk CPU blocks (scale > 1): the factor is a CPU's, not this GPU's; probe on the "
            "GPU for a real calibration"
        )
    return out


def apply_training_step(
    artifact: object, hw: Hardware, framework: str | None, constants: Constants
) -> tuple[Constants, TrainingStepFactor | None]:
    """The constants with the training-step factor (unchanged without one) and the
    ``calibration.training_step`` summary (None without a training section for the device)."""
    factor = training_step_factor(artifact, hw, framework, constants)
    if factor is None or not factor.get("applied"):
        return constants, factor
    return {**constants, FACTOR_KEY: [factor["factor"], factor["low"], factor["high"]]}, factor
