"""``gpuplan validate inference``: forecast every published serving run, report the error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    calibration_option,
    emit,
    info,
    simple_table,
    text_file_option,
)

HELP = """Forecast every published serving run shipped with gpuplan (TensorRT-LLM v0.9.0
performance tables: static-batch output tokens/s per GPU and batch-1 first-token latency
on A100, H100 and H200; the serving-benchmark runs of vLLM 0.5.4 / 0.6.0 and SGLang 0.3.0
on A100 and H100; and DeepSeek-R1 on 8 H200 under vLLM 0.8.4, SGLang 0.4.5 and
TensorRT-LLM 0.19: bursts scored on output throughput, mean TTFT and median TPOT, online
runs at a fixed rate on median TTFT and TPOT; and InferenceX's closed-loop concurrency
sweeps of DeepSeek-R1 on H200, B200, B300, MI300X, MI325X and MI355X under SGLang 0.5,
TensorRT-LLM 1.x and ATOM, scored on throughput and median/p99 TPOT and TTFT with no
constant fitted on them; and InferenceX's disaggregated fleets (separate prefill and
decode workers under NVIDIA Dynamo or SGLang PD, up to wide EP 32 on GB200/GB300 NVL72)
scored on fleet throughput and median TPOT and TTFT, also fitted on nothing; and
TensorRT-LLM 0.17's offline maximum-throughput tables (trtllm-bench: Llama 3.1 8B/70B/405B,
Mistral 7B, Mixtral 8x7B/8x22B on H200, H100, L40S and A100 at TP 1-8, fitted on
nothing); and NVIDIA NIM 1.8.0's published concurrency sweeps (Llama 3.3 70B on 2 H100 and
Llama 3.1 8B on one, fp8, 200/200 to 20,000/2,000 tokens, 1-250 requests in flight: mean
TTFT, inter-token latency and output tokens/s, fitted on nothing); and AWS's Trn1 latency
table (Transformers NeuronX 2.18, Llama 2/3 and Mistral, one request at a time: the GPU-fitted
default constants on Trainium, fitted on nothing); and InferenceX's runs
with MTP speculative decoding, at the default acceptance length and by the acceptance each
run implies (fitted on nothing) and compare like with like. Prints
coverage, median and p90 absolute percentage error, signed bias and how often the forecast
interval contains the published value, per source, per table, per metric, per engine
profile and overall.

Every row is scored with constants fitted WITHOUT it: by default without its model
(--scheme leave-one-model-out), or without its GPU (leave-one-gpu-out, the static-batch
table). An engine profile with >= 10 rows of its own is scored with its time scale fitted
on its other models' rows; one with fewer, with the pooled time scale of every engine's
other models; the LOEO column scores each profile with the constants of
the other engines alone (held out by engine).

\b
Examples:
  gpuplan validate inference
  gpuplan validate inference --scheme leave-one-gpu-out --rows
  gpuplan validate inference --format json > inference-validation.json
"""


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _by_gpu_engine(title: str, groups: dict[str, dict[str, Any]]):
    """Throughput, median TPOT and median TTFT errors per GPU and engine profile."""
    rows = []
    for g, m in groups.items():
        thr = m.get("throughput") or {}
        # median latencies where the source publishes them, else the means (NIM)
        tpot = m.get("tpot_median") or m.get("tpot_mean") or {}
        ttft = m.get("ttft_median") or m.get("ttft_mean") or {}
        rows.append(
            (
                g,
                thr.get("rows", 0),
                *(
                    _pct(x.get(k))
                    for x in (thr, tpot, ttft)
                    for k in ("median_abs_pct_error", "bias_pct")
                ),
            )
        )
    return simple_table(
        title, ["GPU / profile", "rows", "thr", "bias", "TPOT", "bias", "TTFT", "bias"], rows
    )


def _table(result: dict[str, Any], show_rows: bool):
    def draw(console) -> None:
        cols = ["rows", "forecast", "coverage", "median |err|", "p90 |err|", "bias", "in interval"]

        def line(name: str, s: dict[str, Any]) -> tuple:
            return (
                name,
                s["rows"],
                s["forecast"],
                f"{100 * s['coverage']:.0f}%",
                _pct(s.get("median_abs_pct_error")),
                _pct(s.get("p90_abs_pct_error")),
                _pct(s.get("bias_pct")),
                f"{100 * s['interval_coverage']:.0f}%" if "interval_coverage" in s else "-",
            )

        title = f"Inference forecast vs published runs ({result['scheme']}, held out)"
        rows = [
            line(k[:28] + ("..." if len(k) > 28 else ""), v)
            for k, v in result.get("by_source", {}).items()
        ]
        rows.append(line("OVERALL", result["overall"]))
        console.print(simple_table(title, ["source", *cols], rows))
        for key, label in (
            ("by_table", "table"),
            ("by_metric", "metric"),
            ("by_model", "model"),
            ("by_gpu", "GPU"),
        ):
            if result.get(key):
                console.print(
                    simple_table(None, [label, *cols], [line(k, v) for k, v in result[key].items()])
                )
                if key == "by_metric":
                    for name, what in result.get("metrics", {}).items():
                        console.print(f"  {name}: {what}")
        if result.get("profiles"):

            def med(sc: dict[str, Any] | None) -> str:
                return "-" if not sc else _pct(sc.get("median_abs_pct_error"))

            prow = []
            for name, p in result["profiles"].items():
                t = p["throughput"]
                prow.append(
                    (
                        name,
                        p["rows"],
                        _pct(t.get("median_abs_pct_error")),
                        _pct(t.get("p90_abs_pct_error")),
                        _pct(t.get("bias_pct")),
                        f"{100 * t['interval_coverage']:.0f}%" if "interval_coverage" in t else "-",
                        med(p.get("ttft")),
                        med(p.get("tpot")),
                        med(p.get("leave_one_engine_out")),
                    )
                )
            console.print(
                simple_table(
                    "Per engine profile: throughput |err| held out by model (med = median, "
                    "p90, bias, in = in interval); TTFT and TPOT median |err|; LOEO = median |err| "
                    "with only the other engines' constants",
                    [
                        "profile",
                        "rows",
                        "med",
                        "p90",
                        "bias",
                        "in",
                        "TTFT",
                        "TPOT",
                        "LOEO",
                    ],
                    prow,
                )
            )
            for name, p in result["profiles"].items():
                console.print(f"  {name}: {p['constants']}")

        def held_out_section(
            key: str, title: str, group_title: str, by: tuple[str, ...] = ()
        ) -> dict[str, Any] | None:
            """Print one held-out source's scores (by metric, then any ``by`` groups) and
            its by-GPU-and-profile table; returns the section, None when absent."""
            sec = result.get(key)
            if not sec or not sec.get("by_metric"):
                return None
            rows = [line(k, v) for k, v in sec["by_metric"].items()]
            for group in by:
                rows += [line(k, v) for k, v in sec[group].items()]
            console.print(simple_table(title, ["metric" if not by else "group", *cols], rows))
            console.print(_by_gpu_engine(group_title, sec["by_gpu_engine"]))
            console.print(f"  {sec['convention']}")
            return sec

        held_out_section(
            "sweeps",
            "Closed-loop concurrency sweeps (InferenceX, DeepSeek-R1), held out by "
            "source: fitted on nothing (intervals from the other sources)",
            "Sweeps by GPU and engine profile (median |err| and bias)",
        )
        spec = held_out_section(
            "speculative",
            "Speculative decoding (InferenceX MTP runs, DeepSeek-R1) at the default acceptance "
            "length, held out by source: fitted on nothing",
            "MTP runs by GPU and engine profile (median |err| and bias)",
        )
        if spec:
            console.print(f"  {spec['note']}")
            implied = [
                (
                    k,
                    f"{v['median']:.2f}" if v["median"] is not None else "-",
                    ", ".join(f"{g} {t:.2f}" for g, t in v["by_gpu_median"].items()),
                    f"{v['solved']}/{v['rows']}",
                )
                for k, v in spec["implied_acceptance"].items()
            ]
            console.print(
                simple_table(
                    "Acceptance length the MTP runs imply (tokens per step that reproduce "
                    "their throughput)",
                    ["profile, draft tokens", "median", "by GPU", "solved"],
                    implied,
                )
            )
            logo = spec["held_out_gpu_at_implied_acceptance"]
            console.print(
                simple_table(
                    "MTP throughput at the acceptance implied on the other GPUs (the step's "
                    "physics across GPUs)",
                    ["group", *cols[:-1]],
                    [line(k, v)[:-1] for k, v in logo.items()],
                )
            )
        disagg = held_out_section(
            "disaggregated",
            "Disaggregated prefill/decode fleets (InferenceX: Dynamo, SGLang PD; "
            "DeepSeek-R1), held out by source: fitted on nothing (intervals from the "
            "other sources)",
            "Disaggregated fleets by GPU and engine profile (median |err| and bias)",
        )
        if disagg and disagg["skipped"]:
            console.print(f"  not forecast: {len(disagg['skipped'])} rows (see --format json)")
        held_out_section(
            "offline",
            "Offline maximum throughput (TensorRT-LLM 0.17 trtllm-bench tables), held out "
            "by source (Mixtral: by model, for the vendor MoE factor)",
            "Offline tables by GPU and engine profile (median |err| and bias)",
            ("by_model", "by_tp"),
        )
        held_out_section(
            "nim",
            "NVIDIA NIM 1.8.0 concurrency sweeps (Llama 3.3 70B on 2 H100, Llama 3.1 8B on 1 "
            "H100, fp8), held out by source: fitted on nothing",
            "NIM sweeps by GPU and engine profile (median |err| and bias)",
        )
        neuron = held_out_section(
            "neuron",
            "AWS Trainium (trn1.32xlarge, Transformers NeuronX 2.18, one request at a time): "
            "the default constants, fitted on GPU engines, on a Neuron stack: fitted on nothing",
            "Neuron rows by accelerator and profile (median |err| and bias)",
        )
        if neuron and neuron["skipped"]:
            console.print(f"  not forecast: {len(neuron['skipped'])} rows (see --format json)")
        gaudi = held_out_section(
            "gaudi",
            "Intel Gaudi 2 and Gaudi 3 throughput tables (Intel Gaudi software 1.18, fp8, one "
            "batch per row): the default constants, fitted on GPU engines: fitted on nothing",
            "Gaudi rows by accelerator and profile (median |err| and bias)",
            ("by_model",),
        )
        if gaudi and gaudi["skipped"]:
            console.print(f"  not forecast: {len(gaudi['skipped'])} rows (see --format json)")
        if show_rows and result.get("rows"):
            console.print(
                simple_table(
                    "Rows",
                    ["run", "metric", "published", "forecast", "interval", "error"],
                    [
                        (
                            r["run_id"],
                            r["metric"],
                            f"{r['published']:.4g}",
                            "-" if r["forecast"] is None else f"{r['forecast']:.4g}",
                            "-"
                            if r["interval"] is None
                            else f"{r['interval'][0]:.4g} .. {r['interval'][1]:.4g}",
                            _pct(r["error_pct"]),
                        )
                        for r in result["rows"]
                    ],
                )
            )
        if result.get("skipped"):
            console.print(
                f"{len(result['skipped'])} rows not forecast: "
                + "; ".join(f"{r['run_id']}: {r['reason']}" for r in result["skipped"])
            )
        console.print(f"Convention: {result['convention']}.")

    return draw


def register(app: typer.Typer) -> None:
    """Add ``inference`` to the ``validate`` group."""

    @app.command("inference", help=HELP)
    def inference(
        data: Path | None = text_file_option(
            None, "--data", help="Published-runs CSV (default: the shipped table)."
        ),
        scheme: str = typer.Option(
            "leave-one-model-out", "--scheme", help="leave-one-model-out or leave-one-gpu-out."
        ),
        rows: bool = typer.Option(False, "--rows", help="Also list every row (table format)."),
        calibration: Path | None = calibration_option(
            "Calibration artifact (default: the shipped one)."
        ),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.forecast.validation_inference import validate_inference

        if fmt == Format.table:
            info(
                "forecasting the published runs, refitting the framework constants per held-out group ..."
            )
        result = validate_inference(
            data, scheme=scheme, artifact=str(calibration) if calibration else None
        )
        emit(result, fmt, _table(result, rows))
