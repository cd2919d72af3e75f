"""``gpuplan forecast train``: step time, MFU, memory, layout and cluster size of a training run."""

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
    number_option,
    simple_table,
    sixteen_bit_default,
    warn,
)

HELP = """Forecast a pre-training run: step time, throughput, MFU, memory per GPU and the
parallel layout; with --tokens the time to train and GPU-hours; with --tokens and
--target-days the smallest cluster that meets the date.

Any parallel size left out (--tp --pp --cp --ep --vp --micro-batch --recompute --zero) is
searched over every valid value; layouts that do not fit in memory are pruned.

--framework picks the framework profile whose constants were fitted on that framework's
published runs (default from the chip and layout; the output says framework_basis and
whether the profile is fitted or falls back to the pooled constants).

\b
Examples:
  gpuplan forecast train --model llama3.1-405b --gpu h100 --gpus 16384 --tokens 15.6e12
  gpuplan forecast train --model llama3.1-70b --gpu h100 --gpus 1024 --tp 8 --pp 4 --top 5
  gpuplan forecast train --model llama3.1-8b --gpu a100-80gb --tokens 2e12 --target-days 30
  gpuplan forecast train --model llama3.1-8b --gpu h100 --gpus 256 --fsdp --framework torchtitan
  gpuplan forecast train --model llama3.3-70b --gpu h100 --gpus 8 --seq-len 4096 \\
      --global-batch 32 --lora-rank 16 --fsdp --framework torchtitan
  gpuplan forecast train --model deepseek-v3 --gpu h100 --gpus 256 --pp 4 --ep 64 --zero 2 \\
      --ep-kernels deepep --seq-len 4096 --global-batch 512
  gpuplan forecast train --model llama3.1-8b --gpu h100 --gpus 64 --seq-len 131072 --cp 8 \\
      --cp-comm a2a --cp-layout zigzag --global-batch 64
  gpuplan forecast train --layers 32 --hidden 4096 --heads 32 --ffn-hidden 11008 \\
      --vocab 32000 --gpu h100 --gpus 64 --seq-len 4096 --format json
"""


def _table(result: dict[str, Any]):
    def draw(console) -> None:
        par = result["parallelism"]
        lo, hi = result["step_time_interval_s"]
        rows = [
            ("model", result["model"]),
            ("GPU", f"{result['num_gpus']} x {result['gpu']} ({result['precision']})"),
            (
                "layout",
                "tp {tp} pp {pp} cp {cp} ep {ep} dp {dp} vp {vp}, micro-batch {micro_batch}, "
                "recompute {recompute}, zero {zero}".format(**par),
            ),
            *(
                [
                    (
                        "to buy",
                        f"{result['purchase_units']} units of {result['purchase_unit']} GPUs = "
                        f"{result['gpus_purchased']} GPUs ({result['gpus_idle']} idle in this job)",
                    )
                ]
                if result.get("gpus_idle")
                else []
            ),
            ("global batch", f"{result['global_batch']} x {result['seq_len']} tokens"),
            *(
                [
                    (
                        "fine-tuning",
                        f"LoRA rank {ft['rank']} on {ft['modules']} projections, "
                        f"{ft['trainable_params'] / 1e6:.4g}M trainable parameters, base frozen",
                    )
                ]
                if (ft := result.get("fine_tuning"))
                else []
            ),
            (
                "framework",
                f"{result['framework']} ({result['framework_basis']}; profile "
                f"{result['framework_profile']}: {result['profile_basis']})",
            ),
            (
                "step time",
                f"{fmt_duration(result['step_time_s'])}  [{fmt_duration(lo)} .. {fmt_duration(hi)}]",
            ),
            ("tokens/s per GPU", f"{result['tokens_per_s_per_gpu']:.4g}"),
            (
                "MFU / HFU",
                f"{result['mfu']:.1%} / {result['hfu']:.1%}" if result["mfu"] is not None else "-",
            ),
            ("model TFLOP/s per GPU", f"{result['model_tflops_per_gpu']:.4g}"),
            (
                "memory per GPU",
                f"{fmt_bytes(result['memory_per_gpu_bytes'])} of "
                f"{fmt_bytes(result['memory_capacity_bytes'])}"
                + ("" if result["fits_in_memory"] else "  (DOES NOT FIT)"),
            ),
        ]
        if result.get("time_to_train_s") is not None:
            tlo, thi = result["intervals"]["time_to_train_s"]
            rows.append(
                (
                    "time to train",
                    f"{fmt_duration(result['time_to_train_s'])}  "
                    f"[{fmt_duration(tlo)} .. {fmt_duration(thi)}]",
                )
            )
            rows.append(("GPU-hours", fmt_si(result["gpu_hours"], "GPU-h")))
        step_cal = (result.get("calibration") or {}).get("training_step")
        if step_cal:  # probe --workload train (forecast/train_calibration.py)
            rows.append(
                (
                    "training-step calibration",
                    f"compute x {step_cal['factor']:.4g} [{step_cal['low']:.4g} .. "
                    f"{step_cal['high']:.4g}] ({step_cal['matched']} blocks on {step_cal['device']})"
                    if step_cal.get("applied")
                    else f"not applied: {step_cal['reason']}",
                )
            )
        console.print(simple_table("Training forecast", ["", "value"], rows))
        br = result["breakdown_s"]
        total = result["step_time_s"]
        console.print(
            simple_table(
                "Step time breakdown",
                ["part", "seconds", "share"],
                [(k, f"{v:.4g}", f"{v / total:.1%}") for k, v in br.items()],
            )
        )
        mem = result["memory_breakdown_bytes"]
        console.print(
            simple_table(
                "Memory per GPU", ["part", "size"], [(k, fmt_bytes(v)) for k, v in mem.items()]
            )
        )
        if result.get("runners_up"):
            console.print(
                simple_table(
                    "Runners-up",
                    [
                        "tp",
                        "pp",
                        "cp",
                        "ep",
                        "dp",
                        "vp",
                        "mb",
                        "recompute",
                        "zero",
                        "step",
                        "MFU",
                        "memory",
                    ],
                    [
                        (
                            r["parallelism"]["tp"],
                            r["parallelism"]["pp"],
                            r["parallelism"]["cp"],
                            r["parallelism"]["ep"],
                            r["parallelism"]["dp"],
                            r["parallelism"]["vp"],
                            r["parallelism"]["micro_batch"],
                            r["parallelism"]["recompute"],
                            r["parallelism"]["zero"],
                            fmt_duration(r["step_time_s"]),
                            f"{r['mfu']:.1%}" if r["mfu"] is not None else "-",
                            fmt_bytes(r["memory_per_gpu_bytes"]),
                        )
                        for r in result["runners_up"]
                    ],
                )
            )
        if result.get("to_fit"):
            console.print("To fit: " + "; ".join(result["to_fit"]))

    return draw


def _check_platform(gpu: str, *, node: str | None, instance: str | None) -> None:
    """``--node``/``--instance`` must carry the GPU asked for: their NICs set the scale-out
    bandwidth, and another accelerator's platform would silently change the forecast."""
    if node is None and instance is None:
        return
    from gpuplan.catalogs import get_catalog
    from gpuplan.errors import InputError

    cat = get_catalog()
    gpu_row = cat.gpu(gpu)
    for flag, name, find, rows in (
        ("--node", node, cat.node, cat.nodes),
        ("--instance", instance, cat.instance, cat.instances),
    ):
        if name is None:
            continue
        row = find(name)
        if row.accelerator_id != gpu_row.id:
            carriers = sorted(r.id for r in rows if r.accelerator_id == gpu_row.id)
            raise InputError(
                f"{flag} {row.id} carries {row.accelerator_id}, not the --gpu {gpu_row.id} asked for",
                hint=(
                    f"{flag} ids with {gpu_row.id}: {', '.join(carriers)}"
                    if carriers
                    else f"no catalog {flag[2:]} carries {gpu_row.id}; omit {flag}"
                ),
            )


def register(app: typer.Typer) -> None:
    """Add ``train`` to the ``forecast`` group."""

    @app.command("train", help=HELP)
    def train(
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
        shared_experts: int | None = number_option(
            None, "--shared-experts", help="Shared experts per MoE layer.", bound="non_negative"
        ),
        first_dense_layers: int | None = number_option(
            None,
            "--first-dense-layers",
            help="Leading dense layers of an MoE.",
            bound="non_negative",
        ),
        gated_mlp: bool = model_opts.GATED_MLP_OPTION,
        tied_embeddings: bool = typer.Option(
            False, "--tied-embeddings", help="Input and output embeddings shared."
        ),
        seq_len: int = number_option(8192, "--seq-len", help="Tokens per sequence."),
        global_batch: int | None = number_option(
            None, "--global-batch", help="Sequences per step.", maximum=limits.MAX_BATCH_SEQUENCES
        ),
        global_batch_tokens: float | None = number_option(
            None,
            "--global-batch-tokens",
            help="Tokens per step (default 16Mi = 2^24, Llama 3 405B).",
            maximum=limits.MAX_BATCH_TOKENS,
        ),
        gpu: str = typer.Option(
            ..., "--gpu", "-g", help="Catalog GPU name or alias (h100, a100-80gb, mi300x...)."
        ),
        gpus: int | None = number_option(
            None,
            "--gpus",
            "-n",
            help="Number of GPUs (omit with --target-days).",
            maximum=limits.MAX_GPUS,
        ),
        tp: int | None = number_option(None, "--tp", help="Tensor parallel size."),
        pp: int | None = number_option(None, "--pp", help="Pipeline stages."),
        cp: int | None = number_option(None, "--cp", help="Context parallel size."),
        ep: int | None = number_option(None, "--ep", help="Expert parallel size."),
        vp: int | None = number_option(
            None, "--vp", help="Interleaved (virtual) stages per pipeline rank."
        ),
        micro_batch: int | None = number_option(
            None, "--micro-batch", help="Sequences per micro-batch."
        ),
        recompute: str | None = typer.Option(
            None, "--recompute", help="Activation recompute: none|selective|full."
        ),
        zero: int | None = number_option(
            None, "--zero", help="ZeRO stage 0-3 (1 = distributed optimizer).", bound="non_negative"
        ),
        fsdp: bool = typer.Option(False, "--fsdp", help="PyTorch FSDP (ZeRO-3, no pipeline)."),
        framework: str | None = typer.Option(
            None,
            "--framework",
            help=(
                "Framework profile: megatron|nemo|torchtitan|fsdp|deepspeed|maxtext|neuronx "
                "(default from the chip and layout: TPU maxtext, Trainium neuronx, "
                "--fsdp/--zero 3 with tp=pp=1 fsdp, else megatron; nemo shares megatron's)."
            ),
        ),
        ep_overlap: str | None = typer.Option(
            None,
            "--ep-overlap",
            help=(
                "MoE all-to-all overlap: none (Megatron default) | 1f1b-overlap | dualpipe "
                "(DeepSeek-V3's schedule: the all-to-all hides behind the other micro-batch)."
            ),
        ),
        ep_kernels: str | None = typer.Option(
            None,
            "--ep-kernels",
            help=(
                "MoE all-to-all kernels: auto (default: deepep with --ep-overlap dualpipe, "
                "else nccl) | nccl (every top-k copy sent) | deepep (FP8 dispatch, one copy "
                "per target node at the NIC's line rate, e.g. Megatron-core "
                "--moe-enable-deepep or NeMo AutoModel)."
            ),
        ),
        lora_rank: int | None = number_option(
            None,
            "--lora-rank",
            help=(
                "Fine-tune LoRA adapters of this rank (e.g. 16), base weights frozen: no "
                "weight gradients, optimizer or gradient reduction for them; where the "
                "adapters go: --lora-modules."
            ),
        ),
        lora_modules: str | None = typer.Option(
            None,
            "--lora-modules",
            help=(
                "With --lora-rank: all (every linear projection; default) | attention "
                "(q, k, v, o; MLPerf's Llama 2 70B LoRA) | qkv (NeMo 1.x's default)."
            ),
        ),
        # -- optimizer state dtypes and fine-grained recompute (issue 15, memory) --
        optimizer_dtype: str | None = typer.Option(
            None,
            "--optimizer-dtype",
            help="Adam moments: fp32 (default, Megatron mixed precision) | bf16.",
        ),
        master_weights: str | None = typer.Option(
            None,
            "--master-weights",
            help="Optimizer master weights: fp32 (default) | bf16 | none (update in place).",
        ),
        recompute_modules: str | None = typer.Option(
            None,
            "--recompute-modules",
            help=(
                "With --recompute selective, also recompute (comma list): layernorm, "
                "mla_up_proj, moe_act (Megatron-core --recompute-modules)."
            ),
        ),
        moe_act_cache: str | None = typer.Option(
            None,
            "--moe-act-cache",
            help="Dtype of the experts' cached activation inputs: bf16 (default) | fp8.",
        ),
        memory_headroom: float | None = typer.Option(
            None,
            "--memory-headroom",
            help="Share of HBM to keep free, 0-1 (default 0: fit up to the capacity).",
        ),
        hsdp_shard_size: int | None = typer.Option(
            None,
            "--hsdp-shard-size",
            help="With --fsdp: shard over groups of N data-parallel ranks (HSDP).",
        ),
        # -- end of the optimizer/recompute block --
        cp_comm: str | None = typer.Option(
            None,
            "--cp-comm",
            help=(
                "Context-parallel exchange: ring (ring attention, K/V passed around the CP "
                "ring; default) | a2a (DeepSpeed-Ulysses all-to-all, cp <= KV heads)."
            ),
        ),
        cp_layout: str | None = typer.Option(
            None,
            "--cp-layout",
            help=(
                "Causal sequence split over CP ranks: zigzag (2cp chunks, balanced; "
                "default) | contiguous (the last rank sets the pace)."
            ),
        ),
        precision: str | None = typer.Option(
            None,
            "--precision",
            help=(
                "bf16|fp16|fp8|mxfp8|fp4 (nvfp4/mxfp4)|int8, where the chip has it. Default "
                "bf16, fp16 on a GPU without bf16 (V100, T4)."
            ),
        ),
        tokens: float | None = number_option(
            None,
            "--tokens",
            help="Total training tokens (e.g. 15.6e12).",
            maximum=limits.MAX_TOKENS,
        ),
        target_days: float | None = number_option(
            None, "--target-days", help="Deadline: find the smallest cluster."
        ),
        top: int = number_option(
            1, "--top", help="Also return the next best layouts (runners_up)."
        ),
        calibration: Path | None = calibration_option(),
        node: str | None = typer.Option(
            None, "--node", help="Catalog node type (sets the scale-out bandwidth)."
        ),
        instance: str | None = typer.Option(
            None, "--instance", help="Catalog cloud instance (sets the scale-out bandwidth)."
        ),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.cli._common import progress
        from gpuplan.forecast.train import forecast_training

        arch = dict(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            ffn_hidden=ffn_hidden,
            vocab=vocab,
            experts=experts,
            top_k=top_k,
            moe_ffn_hidden=moe_ffn_hidden,
            shared_experts=shared_experts,
            first_dense_layers=first_dense_layers,
        )
        from gpuplan.cli._model import model_argument

        model_arg = model_argument(
            model, model_file, arch, gated_mlp=gated_mlp, tied_embeddings=tied_embeddings
        )
        _check_platform(gpu, node=node, instance=instance)
        precision = sixteen_bit_default(precision, gpu)
        par = {
            k: v
            for k, v in dict(
                tp=tp,
                pp=pp,
                cp=cp,
                ep=ep,
                vp=vp,
                micro_batch=micro_batch,
                recompute=recompute,
                zero=zero,
            ).items()
            if v is not None
        }
        artifact = None
        if calibration is not None:
            from gpuplan.calibration import load_artifact

            artifact = load_artifact(calibration)
        with progress(enabled=target_days is not None and fmt == Format.table) as bar:
            task = bar.add_task("cluster sizes", total=None)

            def tick(n: int, res: Any) -> None:
                bar.update(task, advance=1, description=f"cluster size {n} GPUs")

            result = forecast_training(
                model_arg,
                gpu=gpu,
                num_gpus=gpus,
                seq_len=seq_len,
                global_batch=global_batch,
                global_batch_tokens=global_batch_tokens,
                precision=precision,
                parallelism=par,
                tokens=tokens,
                target_days=target_days,
                top=top,
                artifact=artifact,
                fsdp=fsdp,
                ep_overlap=ep_overlap,
                ep_kernels=ep_kernels,
                lora_rank=lora_rank,
                lora_modules=lora_modules,
                optimizer_dtype=optimizer_dtype,
                master_weights=master_weights,
                recompute_modules=recompute_modules,
                moe_act_cache=moe_act_cache,
                memory_headroom=memory_headroom,
                hsdp_shard_size=hsdp_shard_size,
                framework_name=framework,
                cp_comm=cp_comm,
                cp_layout=cp_layout,
                node=node,
                instance=instance,
                progress=tick,
            )
        for note in result.get("notes") or []:
            warn(note)
        if not result["fits_in_memory"]:
            warn(
                "the layout does not fit in GPU memory; to fit: "
                + "; ".join(result.get("to_fit", []))
            )
        emit(result, fmt, _table(result))
