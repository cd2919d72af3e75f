"""``gpuplan forecast infer``: latency, throughput, KV cache, memory and fleet size of serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan import limits
from gpuplan.cli import _model as model_opts
from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    calibration_option,
    emit,
    fmt_bytes,
    fmt_duration,
    fmt_si,
    info,
    number_option,
    simple_table,
    sixteen_bit_default,
    warn,
)

HELP = """Forecast serving a model: time to first token (TTFT), time per output token (TPOT),
output throughput, KV cache per token, memory per GPU and the largest batch that fits.
With --qps and SLO targets, the number of replicas and GPUs that keep TTFT and TPOT inside
the targets, from a discrete-event simulation of continuous batching under Poisson
arrivals, comparing TP degrees, batch caps and (with --gpu a,b,c) GPU types.

Lengths are fixed, or lognormal when a p99 is given (--input-tokens-p99). Every number is
calibrated from the device model (gpuplan calibrate) plus framework constants fitted on
published TensorRT-LLM runs (gpuplan validate inference shows their held-out error).

\b
Examples:
  gpuplan forecast infer --model llama3.1-8b --gpu h100 --input-tokens 1024 --output-tokens 256
  gpuplan forecast infer --model llama3.3-70b --gpu h100 --precision fp8 --max-throughput
  gpuplan forecast infer --model llama3.3-70b --gpu h100 --qps 20 --input-tokens 2048 \\
      --output-tokens 256 --ttft-slo-s 1 --tpot-slo-s 0.05 --format json
  gpuplan forecast infer --model mixtral-8x7b --gpu h100,h200,a100 --qps 50 \\
      --input-tokens 1000 --input-tokens-p99 6000 --ttft-slo-s 2 --tpot-slo-s 0.1
  gpuplan forecast infer --model llama3.1-8b --gpu all --qps 20 --ttft-slo-s 1 \
      --tpot-slo-s 0.05                          # every catalog accelerator, cheapest first
  gpuplan forecast infer --model llama3-70b --gpu h100 --tp 4 --engine vllm@0.5.4 --batch 64
  gpuplan forecast infer --model deepseek-r1 --gpu h200 --tp 8 --precision fp8 --engine sglang@0.5 \\
      --concurrency 64 --input-tokens 1024 --output-tokens 1024 --min-length-ratio 0.8
  gpuplan forecast infer --model deepseek-v3 --gpu h100 --precision fp8     # 2 nodes, PP 2
  gpuplan forecast infer --model deepseek-v3 --gpu h100 --precision fp8 --nodes 4
  gpuplan forecast infer --model deepseek-v3 --gpu h100 --precision fp8 --ep 16  # wide EP
  gpuplan forecast infer --model llama3.3-70b --gpu h100 --qps 20 --ttft-slo-s 1 \\
      --tpot-slo-s 0.05 --disaggregate
  gpuplan forecast infer --model deepseek-r1 --gpu b200 --tp 8 --precision fp8 --concurrency 16 \\
      --spec-tokens 3 --spec-acceptance 2.6        # MTP, your server's acceptance length
  gpuplan forecast infer --model llama3.3-70b --gpu h100 --tp 4 --batch 8 --spec-tokens 4 \\
      --spec-acceptance 2.4 --spec-draft-model llama3.2-1b       # a separate draft model
"""


def _warn_released_precision(model: str, precision: str) -> None:
    """Say so when the catalog model was released at another precision than the one
    forecast (DeepSeek-R1 at the bf16 default: twice the weights of its fp8 checkpoint, so
    16 H200 in two nodes where the released model serves on one 8-GPU node)."""
    from gpuplan.catalogs.catalog import get_catalog
    from gpuplan.errors import NotFoundError

    try:
        row = get_catalog().model(model)
    except NotFoundError:
        return  # the forecast itself reports the unknown name
    said = row.released_precision_note(precision)
    if said is not None:
        warn(f"{said} (pass {row.released_precision_hint('--precision')})")


def _default_lengths(
    model: Any, input_tokens: int | None, output_tokens: int | None
) -> tuple[int, int]:
    """The lengths to forecast: the given ones, and the defaults for those not given.

    A default prompt is shortened, with a note, so that it and the answer fit the model's
    context: GPT-J 6B and Falcon 180B have 2,048 tokens, where 2,048 + 256 used to stop the
    command with an error on its defaults. Lengths the user gave are never changed (the
    forecast refuses them when they do not fit)."""
    from gpuplan.forecast.inference import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS

    out = DEFAULT_OUTPUT_TOKENS if output_tokens is None else output_tokens
    if input_tokens is not None:
        return input_tokens, out
    max_ctx: int | None = None
    if isinstance(model, str):
        from gpuplan.catalogs.catalog import get_catalog
        from gpuplan.errors import NotFoundError

        try:
            max_ctx = get_catalog().model(model).max_context
        except NotFoundError:
            return DEFAULT_INPUT_TOKENS, out  # the forecast reports the unknown name
    elif isinstance(model, dict) and model.get("max_context"):
        max_ctx = int(model["max_context"])
    if max_ctx and DEFAULT_INPUT_TOKENS + out > max_ctx and max_ctx > out:
        info(
            f"note: --input-tokens defaults to {max_ctx - out} here, so that prompt and "
            f"answer fit the model's {max_ctx}-token context"
        )
        return max_ctx - out, out
    return DEFAULT_INPUT_TOKENS, out


def _tokens_per_s(x: float) -> str:
    """A rate in whole tokens/s, or three significant digits below 100 (a 64-GPU replica
    of a 671B model on L4 makes 0.27 tokens/s per GPU, not 0).

    >>> _tokens_per_s(2331.6), _tokens_per_s(0.2688), _tokens_per_s(17.04)
    ('2,332', '0.269', '17')
    """
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _lengths_text(d: Any) -> str:
    """One request-length distribution of the JSON (``LengthDist.describe``) in a few words:
    ``1024``, ``819-1024 uniform``, ``mean 1000, p99 3000 lognormal``."""
    if not isinstance(d, dict):
        return "-"
    kind = d.get("kind")
    if kind == "uniform":
        return f"{d['low']}-{d['high']} uniform"
    if kind == "lognormal":
        by = (d.get("fixed_by") or ["mean", "p99"])[-1]
        return f"mean {d['mean']:g}, {by} {d[by]:g} lognormal"
    if kind == "trace":
        return f"trace of {d['requests']} (mean {d['mean']:.0f}, p99 {d['p99']:g})"
    return f"{d['mean']:g}"


def _table(r: dict[str, Any]):
    def draw(console) -> None:
        iv = r.get("intervals", {})

        def with_iv(key: str, fmt) -> str:
            v = r.get(key)
            band = iv.get(key)
            if v is None:
                return "-"
            return f"{fmt(v)}  [{fmt(band[0])} .. {fmt(band[1])}]" if band else fmt(v)

        layout = f"tp {r['tp']} x pp {r['pp']}" + (f" (ep {r['ep']})" if r.get("ep", 1) > 1 else "")
        if r.get("dp_attention"):
            layout = f"wide EP {r['ep']} (attention data-parallel x {r['dp_attention']})"
        rows = [
            ("model", f"{r['model']['id']} at {r['precision']}"),
            ("GPU", f"{r['gpu']}, {layout} = {r['gpus_per_replica']} GPU(s) per replica"),
        ]
        if r.get("input_tokens") is not None:
            rows.append(
                (
                    "tokens in / out",
                    f"{_lengths_text(r['input_tokens'])} / {_lengths_text(r.get('output_tokens'))}",
                )
            )
        mn = r.get("multi_node") or r.get("cross_node_tp")
        if mn:
            rows.append(("nodes per replica", f"{mn['nodes']}: {mn['note']}"))
        if r.get("pcie_tp"):
            rows.append(("tensor parallel", r["pcie_tp"]["note"]))
        dis = r.get("disaggregated")
        if dis and dis.get("num_gpus"):
            rows.append(
                (
                    "disaggregated",
                    f"{dis['prefill']['replicas']} prefill + {dis['decode']['replicas']} decode "
                    f"replicas = {dis['num_gpus']} GPUs (P:D GPUs {dis['prefill_decode_gpu_ratio']:.2g}); "
                    f"{dis['verdict']}",
                )
            )
        elif dis:
            rows.append(("disaggregated", dis.get("reason", "-")))
        if r.get("replicas") is not None:
            price = f", {fmt_si(r['usd_per_hour'], 'USD/h')}" if r.get("usd_per_hour") else ""
            rows.append(("fleet", f"{r['replicas']} replicas = {r['num_gpus']} GPUs{price}"))
            load = r["load"]
            pct = load["slo_percentile"]
            rows.append(
                (
                    "load",
                    f"{load['qps']:g} req/s ({load['qps_per_replica']:.3g} per replica), batch cap {load['batch_cap']}",
                )
            )
            rows.append(
                (
                    f"TTFT {pct}",
                    with_iv("ttft_s", fmt_duration)
                    + (f"  (SLO {fmt_duration(load['ttft_slo_s'])})" if load["ttft_slo_s"] else ""),
                )
            )
            rows.append(
                (
                    f"TPOT {pct}",
                    with_iv("tpot_s", fmt_duration)
                    + (f"  (SLO {fmt_duration(load['tpot_slo_s'])})" if load["tpot_slo_s"] else ""),
                )
            )
        else:
            rows.append(
                ("batch", f"{r['batch']} ({r['batching']} batching; max {r['max_batch']} fits)")
            )
            rows.append(("TTFT", with_iv("ttft_s", fmt_duration)))
            rows.append(("TPOT", with_iv("tpot_s", fmt_duration)))
        sp = r.get("speculative")
        if sp:
            step = (
                f"; a step {fmt_duration(sp['step_s'])} (verify {fmt_duration(sp['verify_pass_s'])}"
                f", draft {fmt_duration(sp['draft_pass_s'])} each)"
                if sp.get("step_s")
                else ""
            )
            by = f" from {sp['draft_model']}" if sp.get("draft_model") else ""
            if sp.get("tree_width"):
                by += (
                    f" in a tree {sp['tree_width']} wide, {sp['verify_tokens']} verified per "
                    "sequence"
                )
            if sp.get("draft_weights_bytes_per_gpu") is not None:
                by += (
                    f" (TP {sp['draft_tp']}: {fmt_bytes(sp['draft_weights_bytes_per_gpu'])} "
                    f"weights and {fmt_bytes(sp['draft_kv_cache_bytes_per_token_per_gpu'])} "
                    "KV per token on each GPU)"
                )
            rows.append(
                (
                    "speculative decoding",
                    f"{sp['draft_tokens']} draft tokens{by}, {sp['acceptance_length']:.2f} "
                    f"tokens per step{step}",
                )
            )
        rows += [
            (
                "output tokens/s (replica)",
                with_iv("throughput_output_tokens_per_s", _tokens_per_s),
            ),
            (
                "output tokens/s per GPU",
                with_iv("throughput_output_tokens_per_s_per_gpu", _tokens_per_s),
            ),
            (
                "KV cache per token",
                f"{fmt_bytes(r['kv_cache_bytes_per_token'])} (model), {fmt_bytes(r['kv_cache_bytes_per_token_per_gpu'])} per GPU"
                + (
                    f", + {fmt_bytes(r['kv_cache_window_bytes_per_sequence'])} per sequence "
                    "at most in the local (sliding-window or chunked) layers (model)"
                    if r.get("kv_cache_window_bytes_per_sequence")
                    else ""
                ),
            ),
            (
                "memory per GPU",
                f"{fmt_bytes(r['memory_per_gpu_bytes'])} of {fmt_bytes(r['memory_breakdown_bytes']['capacity'])}"
                + ("" if r["fits_in_memory"] else "  (DOES NOT FIT)"),
            ),
            ("bottleneck", r["bottleneck"]),
            ("calibration basis", str(r.get("basis"))),
        ]
        prof = r.get("engine_profile") or {}
        if prof.get("name"):
            rows.append(
                (
                    "engine profile",
                    f"{prof['name']} ({prof.get('constants')})"
                    + (f"; {prof['resolution']}" if prof.get("resolution") else ""),
                )
            )
        console.print(simple_table("Inference forecast", ["", "value"], rows))
        if r.get("breakdown_s"):
            br = r["breakdown_s"]
            parts = [k for k in br["decode_step"] if k != "total"]
            console.print(
                simple_table(
                    "Time breakdown",
                    ["phase", *parts, "total"],
                    [
                        (
                            name,
                            *(fmt_duration(br[ph][k]) for k in parts),
                            fmt_duration(br[ph]["total"]),
                        )
                        for name, ph in (
                            ("first token", "first_token"),
                            ("decode step", "decode_step"),
                        )
                    ],
                )
            )
        loop = r.get("closed_loop")
        if loop:
            console.print(
                simple_table(
                    f"Closed-loop client: {loop['concurrency']} requests in flight "
                    f"({loop['requests']} simulated)",
                    ["", "p50", "p90", "p99", "mean"],
                    [
                        (
                            name,
                            *(
                                fmt_duration(loop[f"{key}_{q}_s"])
                                for q in ("p50", "p90", "p99", "mean")
                            ),
                        )
                        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"))
                    ]
                    + [
                        (
                            "output tokens/s",
                            f"{loop['throughput_output_tokens_per_s']:,.0f}",
                            f"{loop['requests_per_s']:.3g} requests/s",
                            "",
                            "",
                        )
                    ],
                )
            )
        if r.get("candidates"):
            console.print(
                simple_table(
                    f"Layouts compared (cheapest first, by {r.get('ranked_by', 'num_gpus')})",
                    ["GPU", "tp", "batch cap", "replicas", "GPUs", "USD/h", "note"],
                    [
                        (
                            c.get("gpu"),
                            c.get("tp", "-"),
                            c.get("max_batch", "-"),
                            c.get("replicas", "-"),
                            c.get("num_gpus", "-"),
                            f"{c['usd_per_hour']:.0f}" if c.get("usd_per_hour") else "-",
                            c.get("reason")
                            or (
                                "simulated"
                                if c.get("verified_by_simulation")
                                else "analytic estimate"
                            ),
                        )
                        for c in r["candidates"][:12]
                    ],
                )
            )
            if r.get("unpriced_gpus"):
                console.print(
                    f"no catalog price for {', '.join(r['unpriced_gpus'])}: ranked after the "
                    "priced layouts, by GPU count (add an instance price with "
                    "'gpuplan catalog import-prices FILE.csv')"
                )

    return draw


def register(app: typer.Typer) -> None:
    """Add ``infer`` to the ``forecast`` group."""

    @app.command("infer", help=HELP)
    def infer(
        model: str | None = model_opts.MODEL_OPTION,
        model_file: Path | None = model_opts.MODEL_FILE_OPTION,
        layers: int | None = model_opts.LAYERS_OPTION,
        hidden: int | None = model_opts.HIDDEN_OPTION,
        heads: int | None = model_opts.HEADS_OPTION,
        kv_heads: int | None = model_opts.KV_HEADS_OPTION,
        head_dim: int | None = model_opts.HEAD_DIM_OPTION,
        ffn_hidden: int | None = model_opts.FFN_HIDDEN_OPTION,
        vocab: int | None = model_opts.VOCAB_OPTION,
        experts: int | None = model_opts.EXPERTS_OPTION,
        top_k: int | None = model_opts.TOP_K_OPTION,
        moe_ffn_hidden: int | None = model_opts.MOE_FFN_HIDDEN_OPTION,
        gated_mlp: bool = model_opts.GATED_MLP_OPTION,
        gpu: str = typer.Option(
            "h100",
            "--gpu",
            "-g",
            help="Catalog GPU; with --qps a comma list to compare (h100,h200,a100), or 'all'.",
        ),
        tp: int | None = number_option(
            None,
            "--tp",
            help="Tensor parallel size (default: smallest that fits; searched with --qps).",
        ),
        pp: int = number_option(1, "--pp", help="Pipeline stages per replica."),
        ep: int = number_option(
            1,
            "--ep",
            help=(
                "Expert parallel size (MoE), inside the TP group; with --tp 1, or alone and "
                "larger than a node: wide EP, attention data-parallel on every GPU."
            ),
        ),
        precision: str | None = typer.Option(
            None,
            "--precision",
            "-p",
            help=(
                "bf16|fp16|fp8|int8|w8a16|int4|fp4 (weights; KV follows): int8 is W8A8, "
                "w8a16 and int4 weight-only with 16-bit math; awq, gptq, w4a16, w8a8, nvfp4 "
                "and fp8_dynamic are read as their equivalents. Default bf16, fp16 on a GPU "
                "without bf16 (V100, T4)."
            ),
        ),
        kv_precision: str | None = typer.Option(
            None, "--kv-precision", help="KV-cache dtype override: bf16|fp16|fp8|int8."
        ),
        input_tokens: int | None = number_option(
            None,
            "--input-tokens",
            help="Prompt length (mean when a p99 is given). Default 2048, less for a model "
            "whose context is shorter than 2048 + the answer.",
        ),
        input_tokens_p99: float | None = number_option(
            None, "--input-tokens-p99", help="p99 prompt length: lognormal lengths."
        ),
        output_tokens: int | None = number_option(
            None, "--output-tokens", help="Answer length (mean when a p99 is given). Default 256."
        ),
        output_tokens_p99: float | None = number_option(
            None, "--output-tokens-p99", help="p99 answer length: lognormal lengths."
        ),
        min_length_ratio: float | None = number_option(
            None,
            "--min-length-ratio",
            help="Uniform lengths from this fraction of --input-tokens / --output-tokens up "
            "to them, as a serving benchmark's random dataset: SGLang bench_serving and vLLM "
            "benchmark_serving --random-range-ratio R (InferenceX runs 0.8) are R; vLLM's "
            "'vllm bench serve' ratio b is --input-tokens L(1+b) with (1-b)/(1+b).",
        ),
        batch: int | None = number_option(
            None, "--batch", "-b", help="Concurrent requests (with --qps: the batch cap)."
        ),
        max_throughput: bool = typer.Option(
            False, "--max-throughput", help="Use the batch with the highest throughput that fits."
        ),
        concurrency: int | None = number_option(
            None,
            "--concurrency",
            "-c",
            help="Also simulate a closed-loop client of this many requests in flight "
            "(benchmark_serving --max-concurrency, genai-perf --concurrency): TTFT/TPOT "
            "p50/p90/p99 and throughput. Sets --batch.",
        ),
        batching: str = typer.Option(
            "continuous", "--batching", help="continuous (in-flight, chunked prefill) or static."
        ),
        qps: float | None = number_option(
            None, "--qps", help="Load in requests per second: size the fleet."
        ),
        ttft_slo_s: float | None = number_option(
            None, "--ttft-slo-s", help="Time-to-first-token target, seconds."
        ),
        tpot_slo_s: float | None = number_option(
            None, "--tpot-slo-s", help="Time-per-output-token target, seconds."
        ),
        slo_percentile: str = typer.Option(
            "p99", "--slo-percentile", help="Percentile the targets apply to: p50|p90|p95|p99."
        ),
        engine: str = typer.Option(
            "modern",
            "--engine",
            help=(
                "Serving engine profile: modern (default), trtllm, vllm, sglang, or a version "
                "such as trtllm@0.9, trtllm@0.19, trtllm@1.2, vllm@0.5.4, vllm@0.6.0, "
                "vllm@0.8.4, sglang@0.3.0, sglang@0.4.5, sglang@0.5, atom@0.1 "
                "(vllm = vllm@0.6.0). vllm@0.5.4 has a time scale "
                "fitted on its own published runs; the others with published runs "
                "(fewer than 10 throughput runs) the pooled one; the JSON's "
                "engine_profile.constants says which. Engines whose MoE runs Triton "
                "fused_moe (vLLM <= 0.8, SGLang <= 0.4) take the MoE factor on MoE models. "
                "Any other release of these families (vllm@0.10.1, 'TensorRT-LLM 1.0.0') "
                "runs on the profile of the nearest release at or below it, and "
                "engine_profile.resolution says so; 'vLLM V1' and 'vLLM V0' name vLLM's "
                "engine generations (vllm@0.8.4, vllm@0.6.0)."
            ),
        ),
        allow_cross_node_tp: bool = typer.Option(
            False,
            "--allow-cross-node-tp",
            help=(
                "Let --tp span more GPUs than one scale-up domain (e.g. --tp 16 on 8-GPU H100 "
                "nodes); the all-reduces then cross the scale-out fabric and the result says so."
            ),
        ),
        nodes: int | None = number_option(
            None,
            "--nodes",
            help=(
                "Nodes per replica: TP inside each node, pipeline stages across the nodes "
                "(default: one node, or the fewest nodes that hold a model too big for one)."
            ),
        ),
        node_gpus: int | None = number_option(
            None,
            "--node-gpus",
            help=(
                "GPUs per machine you will run on (a cloud instance's count, e.g. 1 for "
                "Azure NC40ads_H100_v5, 4 for g6e.12xlarge): TP stays inside one machine and "
                "an NVLink pair or PCIe server larger than it is cut to it (default: the "
                "GPU's own server; gpuplan plan passes each option's)."
            ),
        ),
        disaggregate: bool = typer.Option(
            False,
            "--disaggregate",
            help=(
                "With --qps: also size separate prefill and decode pools (DistServe/Splitwise) "
                "with the KV transfer between them, and compare with the co-located fleet."
            ),
        ),
        spec_tokens: int | None = number_option(
            None,
            "--spec-tokens",
            help=(
                "Speculative decoding: draft tokens per step (SGLang --speculative-num-steps, "
                "vLLM num_speculative_tokens, TensorRT-LLM num_nextn_predict_layers), from an "
                "MTP or EAGLE head; TPOT and throughput per emitted token."
            ),
            maximum=16,
        ),
        spec_acceptance: float | None = number_option(
            None,
            "--spec-acceptance",
            help=(
                "Tokens a speculative step emits on average, the bonus token included (the "
                "acceptance length your engine logs: SGLang 'accept len', vLLM 'Mean "
                "acceptance length'). Default: a DeepSeek MTP head's published acceptance."
            ),
        ),
        spec_draft_layers: float | None = number_option(
            None,
            "--spec-draft-layers",
            help="Depth of the draft head in target layers (default 1: MTP, EAGLE).",
        ),
        spec_tree_width: int | None = number_option(
            None,
            "--spec-tree-width",
            help=(
                "A draft tree: tokens kept per sequence at each draft step after the first "
                "(SGLang --speculative-eagle-topk; default 1, a chain); needs "
                "--spec-verify-tokens and --spec-acceptance."
            ),
            maximum=16,
        ),
        spec_verify_tokens: int | None = number_option(
            None,
            "--spec-verify-tokens",
            help=(
                "Tokens per sequence the verification pass checks (SGLang "
                "--speculative-num-draft-tokens; default --spec-tokens + 1)."
            ),
            maximum=257,
        ),
        spec_draft_model: str | None = typer.Option(
            None,
            "--spec-draft-model",
            help=(
                "A separate draft model instead of a draft head (catalog id, e.g. "
                "llama3.2-1b for Llama 3.x; vLLM's draft_model method): its passes, prompt "
                "pass, weights and KV cache are priced; needs --spec-acceptance."
            ),
        ),
        seed: int = number_option(
            0, "--seed", help="Seed of the simulated request stream.", bound="non_negative"
        ),
        requests: int = number_option(
            2000,
            "--requests",
            help="Requests simulated per replica count tried.",
            maximum=limits.MAX_SIM_REQUESTS,
        ),
        calibration: Path | None = calibration_option(),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.forecast.inference import forecast_inference
        from gpuplan.forecast.inference_arch import canonical_precision
        from gpuplan.forecast.speculative import speculation

        spec = speculation(
            spec_tokens,
            spec_acceptance,
            spec_draft_layers,
            spec_draft_model,
            spec_tree_width,
            spec_verify_tokens,
        )
        arch = {
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            "ffn_hidden": ffn_hidden,
            "vocab": vocab,
            "experts": experts,
            "top_k": top_k,
            "moe_ffn_hidden": moe_ffn_hidden,
        }
        from gpuplan.cli._model import model_argument

        m = model_argument(model, model_file, arch, gated_mlp=gated_mlp)
        precision = canonical_precision(sixteen_bit_default(precision, gpu))
        if model:
            from gpuplan.catalogs.names import checkpoint_precision

            stated = checkpoint_precision(model)
            if stated is not None and stated != precision.strip().lower():
                warn(
                    f"the model name {model!r} says {stated} weights; forecasting "
                    f"{precision} (pass --precision {stated} to match)"
                )
            elif stated is None:
                _warn_released_precision(model, precision)
        input_tokens, output_tokens = _default_lengths(m, input_tokens, output_tokens)
        from gpuplan.forecast.serving import LengthDist

        # the lengths' own check, before any progress line (the scenario's uses it too)
        LengthDist.from_options(input_tokens, input_tokens_p99, min_ratio=min_length_ratio)
        LengthDist.from_options(
            output_tokens, output_tokens_p99, min_ratio=min_length_ratio, option="output-tokens"
        )
        ticks = {"n": 0}

        def tick() -> None:
            ticks["n"] += 1
            if fmt == Format.table:
                info(f"  simulated candidate {ticks['n']} ...")

        if qps is not None and concurrency is None and fmt == Format.table:
            info(
                "sizing: analytic search over GPUs x TP x batch cap, then discrete-event simulation ..."
            )
        result = forecast_inference(
            model=m,
            gpu=gpu,
            tp=tp,
            pp=pp,
            ep=ep,
            precision=precision,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            batch=batch,
            max_throughput=max_throughput,
            qps=qps,
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
            slo_percentile=slo_percentile,
            artifact=str(calibration) if calibration else None,
            kv_precision=kv_precision,
            input_tokens_p99=input_tokens_p99,
            output_tokens_p99=output_tokens_p99,
            min_length_ratio=min_length_ratio,
            batching=batching,
            engine=engine,
            allow_cross_node_tp=allow_cross_node_tp,
            nodes=nodes,
            disaggregate=disaggregate,
            node_gpus=node_gpus,
            seed=seed,
            num_requests=requests,
            progress=tick,
            concurrency=concurrency,
            speculation=spec,
        )
        for said in result.get("caveats") or ():
            warn(said)
        if qps is not None and ttft_slo_s is None and tpot_slo_s is None:
            from gpuplan.forecast.serving import THROUGHPUT_ONLY_NOTE

            load = result.get("load") or {}
            pct = load.get("slo_percentile", slo_percentile)
            at = (
                f"; at this size TTFT {pct} is {fmt_duration(result['ttft_s'])} and TPOT {pct} "
                f"is {fmt_duration(result['tpot_s'])}"
                if result.get("replicas") is not None
                else ""
            )
            warn(
                f"{THROUGHPUT_ONLY_NOTE}{at} (pass --ttft-slo-s and --tpot-slo-s to size for latency)"
            )
        if not result["fits_in_memory"]:
            warn(
                f"batch {result['batch']} needs {fmt_bytes(result['memory_per_gpu_bytes'])} per GPU, "
                f"more than fits; the largest batch that fits is {result['max_batch']}"
            )
        emit(result, fmt, _table(result))
