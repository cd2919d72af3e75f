"""Every catalog model, accelerator and precision goes through the forecasts without a crash.

A deterministic sweep, not a random one (``test_cli_properties.py`` draws odd arguments):
``forecast infer`` and ``forecast train`` run in-process through the console script's own
entry point (:func:`gpuplan.cli.main.main`) on pairs that visit every catalog model, every
accelerator and every precision the commands take. Each run either answers (exit 0, JSON
whose numbers obey the physics below) or refuses in one line (exit 2): never a traceback.

The physical bounds every answer must keep:
- a dense model's decode step reads every weight the GPU holds at least once, so TPOT is
  at least the weight bytes per GPU over the catalog's HBM bandwidth (Williams et al.,
  "Roofline", CACM 2009: time >= bytes / bandwidth);
- a training step cannot beat the chip's dense peak: MFU in (0, 1];
- what fits in memory is no larger than the device (the forecast says it fits);
- every interval holds its central value.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.cli.main import main

INFER_PRECISIONS = ("bf16", "fp16", "fp8", "int8", "w8a16", "int4", "fp4")
TRAIN_PRECISIONS = ("bf16", "fp8", "fp4")
#: stride through the accelerator list (coprime with its length, so every GPU comes up)
STRIDE = 7


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def _pairs(precisions: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(model, gpu, precision) visiting every model, every GPU and every precision."""
    cat = get_catalog()
    models = [m.id for m in cat.models]
    gpus = [g.id for g in cat.gpus]
    stride = STRIDE if math.gcd(STRIDE, len(gpus)) == 1 else 1
    n = 2 * max(len(models), len(gpus))
    return [
        (models[k % len(models)], gpus[(k * stride) % len(gpus)], precisions[k % len(precisions)])
        for k in range(n)
    ]


def _refusal_is_one_line(err: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, "exit 2 with nothing on stderr"
    assert lines[-1].startswith("gpuplan: error: "), lines[-1]
    assert sum(ln.startswith("gpuplan: error: ") for ln in lines) == 1, err
    assert "Traceback" not in err, err


def _finite_positive(d: dict[str, Any], *keys: str) -> None:
    for k in keys:
        v = d[k]
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, (k, v)


def _interval_holds(d: dict[str, Any]) -> None:
    for k, (lo, hi) in d["intervals"].items():
        v = d.get(k)
        if isinstance(v, (int, float)) and lo is not None and hi is not None:
            assert lo <= v * (1 + 1e-9) and v <= hi * (1 + 1e-9), (k, lo, v, hi)


def _answer(args: list[str]) -> dict[str, Any] | None:
    """The JSON answer of ``args``, or ``None`` where gpuplan refused them (exit 2) in one
    line; anything else (a traceback, another exit code) fails the test."""
    rc, out, err = _run([*args, "--format", "json"])
    assert rc in (0, 2), (args, rc, err[-400:])
    if rc == 2:
        _refusal_is_one_line(err)
        return None
    answer: dict[str, Any] = json.loads(out)
    return answer


def test_forecast_infer_over_the_catalog() -> None:
    cat = get_catalog()
    answered = 0
    pairs = _pairs(INFER_PRECISIONS)
    for model, gpu, precision in pairs:
        args = ["forecast", "infer", "--model", model, "--gpu", gpu, "--precision", precision]
        d = _answer(args)
        if d is None:
            continue
        answered += 1
        _finite_positive(d, "ttft_s", "tpot_s", "throughput_output_tokens_per_s")
        assert d["fits_in_memory"] is True, args
        mem = d["memory_breakdown_bytes"]
        assert mem["total"] <= mem["capacity"], (args, mem)
        _interval_holds(d)
        arch = cat.model(model)
        if not arch.is_moe:  # dense: every weight is read each step
            bandwidth = cat.gpu(gpu).memory_bandwidth_bytes_per_s
            floor = mem["weights"] / bandwidth
            assert d["tpot_s"] >= floor, (args, d["tpot_s"], floor)
    # the sweep exercises the forecast, not only its refusals (7 in 10 answer today)
    assert answered >= len(pairs) // 2, (answered, len(pairs))


def test_forecast_train_over_the_catalog() -> None:
    answered = 0
    pairs = _pairs(TRAIN_PRECISIONS)
    for model, gpu, precision in pairs:
        args = ["forecast", "train", "--model", model, "--gpu", gpu, "--precision", precision]
        d = _answer([*args, "--gpus", "64"])
        if d is None:
            continue
        answered += 1
        _finite_positive(d, "step_time_s", "tokens_per_s", "mfu")
        assert d["mfu"] <= 1.0, (args, d["mfu"])
        assert d["fits_in_memory"] is True, args
        assert d["memory_per_gpu_bytes"] <= d["memory_capacity_bytes"], args
    assert answered >= len(pairs) // 3, (answered, len(pairs))


@pytest.mark.parametrize("command", ["infer", "train"])
def test_the_sweep_visits_every_model_gpu_and_precision(command: str) -> None:
    cat = get_catalog()
    precisions = INFER_PRECISIONS if command == "infer" else TRAIN_PRECISIONS
    pairs = _pairs(precisions)
    assert {m for m, _, _ in pairs} == {m.id for m in cat.models}
    assert {g for _, g, _ in pairs} == {g.id for g in cat.gpus}
    assert {p for _, _, p in pairs} == set(precisions)
