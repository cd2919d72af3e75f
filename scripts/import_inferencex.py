"""Write ``gpuplan/forecast/data/inference_sweep_runs.csv`` from an InferenceX API snapshot.

InferenceX (SemiAnalysis, formerly InferenceMAX) benchmarks open serving engines nightly on
many accelerators with one client: its copy of vLLM's ``benchmark_serving.py`` with
``--dataset-name random --random-range-ratio 0.8 --ignore-eos --request-rate inf
--max-concurrency C --num-prompts 10*C`` (``benchmarks/benchmark_lib.sh`` and the
``benchmarks/single_node/fixed_seq_len/dsr1_*.sh`` launch scripts of SemiAnalysisAI/InferenceX).
The app's API snapshot (``packages/app/cypress/fixtures/api/benchmarks.json`` of
SemiAnalysisAI/InferenceX-app; the copy read here is the fork vngcloud/InferenceX-app at
7fe6d62ad57a3df061be692e86578c7111d880c7, 2026-08-15) holds the latest run of each
configuration with its GitHub Actions run URL.

Kept: single-node, aggregated (no disaggregated prefill) DeepSeek-R1 runs without
speculative decoding, i.e. what one replica of ``gpuplan forecast infer`` describes.
The launch flags that change the physics (KV-cache dtype, the prefill chunk, the
scheduler's request-poll interval and decode passes per turn, the memory fraction) are those of
the launch scripts at SemiAnalysisAI/InferenceX 843c6254ff69b567f772f6a5fd97675af3d04431.

Disaggregated runs (``--disaggregated``): the same snapshot's DeepSeek-R1 runs with separate
prefill and decode workers (NVIDIA Dynamo with TensorRT-LLM or SGLang, and AMD's MoRI
SGLang PD disaggregation), without speculative decoding, written to
``inference_disagg_runs.csv``. A worker's GPUs are the snapshot's ``num_*_gpu`` over its
``*_num_workers``; a worker with data-parallel attention is the wide-EP layout over its GPUs
(TP 1, EP = its GPUs), else TP over its GPUs with the snapshot's EP. Their launch recipes are
not in the snapshot, so the KV cache is FP8 (16-bit for SGLang on Hopper, as the single-node
scripts) and the prefill chunk 16,384 tokens (the srt-slurm recipes of the repository use
8,192-24,576), the memory fraction the engine default; each row's notes say so. Output
tokens/s: ``output_tput_per_gpu`` times the decode GPUs, the basis the snapshot divides by
(conc / mean e2e latency x mean answer length agrees with it within a few percent).

Speculative runs (``--speculative``): the same snapshot's single-node aggregated DeepSeek-R1
runs with MTP speculative decoding, written to ``inference_spec_runs.csv`` with the draft
tokens of their launch scripts (``dsr1_*_mtp.sh``: SGLang ``--speculative-num-steps`` 2 on
NVIDIA, 3 on AMD; TensorRT-LLM ``num_nextn_predict_layers`` 3, 1 with attention DP; ATOM
``--num-speculative-tokens`` 3). Their prompts are random tokens (with the chat template),
on which InferenceX says draft acceptance is low and not representative; the acceptance
length is not in the snapshot. ATOM's FP4 MTP script gives no draft-token count: skipped.
A run whose published output rate is more than 2x away from what its own median TTFT and
TPOT give a closed loop of its concurrency is left out, and said on stderr (one MTP run:
ATOM FP8 1k/1k at 512, 202 tokens/s published against 8,228).

Usage: ``python scripts/import_inferencex.py benchmarks.json > .../inference_sweep_runs.csv``,
``python scripts/import_inferencex.py --disaggregated benchmarks.json >
.../inference_disagg_runs.csv`` and ``python scripts/import_inferencex.py --speculative
benchmarks.json > .../inference_spec_runs.csv``
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

SNAPSHOT = (
    "packages/app/cypress/fixtures/api/benchmarks.json @ vngcloud/InferenceX-app "
    "7fe6d62ad57a3df061be692e86578c7111d880c7 (fork of SemiAnalysisAI/InferenceX-app; "
    "InferenceX API snapshot)"
)
SOURCE = "https://github.com/SemiAnalysisAI/InferenceX (InferenceX nightly serving benchmarks)"
RETRIEVED = "2026-12-02"
SCRIPTS = "SemiAnalysisAI/InferenceX 843c6254 benchmarks/single_node/fixed_seq_len"

GPU = {
    "h100": "H100 SXM5 80GB",
    "gb200": "GB200 (one Blackwell GPU of a GB200 NVL72)",
    "gb300": "GB300 (one Blackwell Ultra GPU of a GB300 NVL72)",
    "h200": "H200 SXM 141GB",
    "b200": "B200 SXM 180GB (HGX/DGX B200)",
    "b300": "B300 SXM 288GB (HGX/DGX B300, Blackwell Ultra)",
    "mi300x": "Instinct MI300X",
    "mi325x": "Instinct MI325X",
    "mi355x": "Instinct MI355X",
}
ENGINE = {"sglang": "sglang@0.5", "trt": "trtllm@1.2", "atom": "atom@0.1"}
DISAGG_ENGINE = {
    "dynamo-trt": "trtllm@1.2",
    "dynamo-sglang": "sglang@0.5",
    "mori-sglang": "sglang@0.5",
}
DISAGG_FRAMEWORK = {
    "dynamo-trt": "NVIDIA Dynamo with TensorRT-LLM workers",
    "dynamo-sglang": "NVIDIA Dynamo with SGLang workers",
    "mori-sglang": "SGLang PD disaggregation with AMD MoRI KV transfer",
}
DISAGG_CHUNK = 16384
FRAMEWORK = {
    "sglang": "SGLang 0.5.x (lmsysorg/sglang images)",
    "trt": "TensorRT-LLM 1.1-1.3 rc, PyTorch backend (trtllm-serve)",
    "atom": "AMD ATOM 0.1 (rocm/atom images)",
}


@dataclass(frozen=True)
class Launch:
    """The launch flags of a run that change the physics, read off its launch script."""

    script: str
    kv_precision: str
    #: prefill chunk / per-iteration token budget
    chunk: int
    #: SGLang --scheduler-recv-interval (1: the scheduler takes requests every iteration)
    recv_interval: int = 1
    #: SGLang --mem-fraction-static (of all memory, weights and KV pool) or TensorRT-LLM
    #: kv_cache_config.free_gpu_memory_fraction (of the memory left after the model loads);
    #: None: the engine's default
    memory_fraction: float | None = None
    memory_fraction_of: str = ""
    #: SGLang --num-continuous-decode-steps: decode passes run back to back between two
    #: scheduler turns
    decode_steps: int = 1


def launch(
    hw: str, fw: str, prec: str, tp: int, isl: int, osl: int, conc: int, dpa: bool
) -> Launch:
    """The flags of the run's launch script (``dsr1_{prec}_{hw}[_trt|_atom].sh``)."""
    script = f"dsr1_{prec}_{hw}" + {"sglang": "", "trt": "_trt", "atom": "_atom"}[fw] + ".sh"
    if fw == "trt":
        # MAX_NUM_TOKENS = max(8192, ceil((CONC + ISL + 64) / 64) * 64), KV cache dtype fp8,
        # free_gpu_memory_fraction 0.8 (B200; 0.75 at 8k/1k on TP4), 0.75 (H200)
        chunk = max(8192, -(-(conc + isl + 64) // 64) * 64)
        frac = 0.75 if hw == "h200" or (prec == "fp8" and tp == 4 and isl == 8192) else 0.8
        return Launch(script, "fp8", chunk, memory_fraction=frac, memory_fraction_of="free")
    if fw == "atom":
        # ATOM's vLLM-style default step budget and memory use; --kv_cache_dtype fp8
        return Launch(script, "fp8", 16384)
    if hw == "h200":  # flashinfer attention, KV cache in the checkpoint's 16-bit dtype
        return Launch(script, "bf16", 32768, memory_fraction=0.82, memory_fraction_of="static")
    if hw in ("mi300x", "mi325x"):  # --num-continuous-decode-steps=4
        return Launch(script, "fp8", 131072, 1, 0.8, "static", decode_steps=4)
    if hw == "mi355x":  # fp8: 196608-token chunks, 8 decode steps a turn; fp4: 131072, 4
        chunk, steps = (196608, 8) if prec == "fp8" else (131072, 4)
        return Launch(script, "fp8", chunk, 1, 0.8, "static", decode_steps=steps)
    # B200/B300 (--kv-cache-dtype fp8_e4m3): the scheduler polls for requests every 10
    # decode passes, every 30 at CONC >= 16 (every pass with attention DP)
    recv = 1 if dpa else (30 if conc >= 16 else 10)
    if prec == "fp4":  # --chunked-prefill-size 16384 (32768 with attention DP)
        chunk = 32768 if dpa else 16384
        return Launch(script, "fp8", chunk, recv, 0.85, "static")
    if tp == 4:  # fp8 on four GPUs: 8192-token chunks, 95% of memory, recv every 10
        return Launch(script, "fp8", 8192, 10, 0.95, "static")
    return Launch(script, "fp8", 32768, recv, 0.82, "static")


def launch_mtp(
    hw: str, fw: str, prec: str, tp: int, isl: int, osl: int, conc: int, dpa: bool
) -> tuple[Launch, int] | None:
    """The flags of an MTP run's launch script (``dsr1_{prec}_{hw}[_trt|_atom]_mtp.sh``) and
    its draft tokens; None where the script does not say how many."""
    base = launch(hw, fw, prec, tp, isl, osl, conc, dpa)
    script = base.script.removesuffix(".sh") + "_mtp.sh"
    if fw == "trt":
        # MTP 3 (1 with attention DP); MAX_NUM_TOKENS = ((MTP+1) * MAX_BATCH_SIZE + ISL + 64
        # + 63) / 64 * 64 with MAX_BATCH_SIZE = CONC (CONC / 8 on FP8, / 4 on FP4 with DP)
        k = 1 if dpa else 3
        per = (8 if prec == "fp8" else 4) if dpa else 1
        batch = conc if conc < per else conc // per
        chunk = (((k + 1) * batch + isl + 64 + 63) // 64) * 64
        frac = 0.75 if hw == "h200" else (0.7 if dpa and prec == "fp8" else 0.8)
        return Launch(script, "fp8", chunk, memory_fraction=frac, memory_fraction_of="free"), k
    if fw == "atom":
        if prec != "fp8":  # --method mtp without --num-speculative-tokens
            return None
        return Launch(script, "fp8", base.chunk), 3
    if hw in ("mi325x", "mi355x"):  # EAGLE --speculative-num-steps 3
        if hw == "mi355x" and prec == "fp4":  # 196608-token chunks, 32768 at 8k/1k above 32
            chunk = 32768 if (isl == 8192 and osl == 1024 and conc > 32) else 196608
            return Launch(script, "fp8", chunk, 1, 0.8, "static", decode_steps=4), 3
        return Launch(
            script, base.kv_precision, base.chunk, 1, 0.8, "static", decode_steps=base.decode_steps
        ), 3
    if hw in ("b200", "b300") and prec == "fp8":  # 16384-token chunks, 82% of memory
        return Launch(script, "fp8", 16384, base.recv_interval, 0.82, "static"), 2
    return Launch(
        script,
        base.kv_precision,
        base.chunk,
        base.recv_interval,
        base.memory_fraction,
        base.memory_fraction_of,
        base.decode_steps,
    ), 2


def _provenance(r: dict, rid: str, framework: str) -> dict[str, object]:
    """The leading columns of a row: its id, where it comes from and what ran it."""
    return {
        "run_id": rid,
        "source": SOURCE,
        "source_locator": f"{SNAPSHOT}; run {r['run_url']}",
        "retrieved": RETRIEVED,
        "run_date": r["date"],
        "framework": f"{framework}; image {r.get('image') or 'not recorded'}",
    }


def rows(snapshot: list[dict], speculative: bool = False) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    method = "mtp" if speculative else "none"
    for r in snapshot:
        if r["model"] != "dsr1" or r["disagg"] or r["is_multinode"] or r["spec_method"] != method:
            continue
        if r["hardware"] not in GPU or r["framework"] not in ENGINE:
            continue
        m = r["metrics"]
        hw, fw, prec = r["hardware"], r["framework"], r["precision"]
        tp, ep, dpa = int(r["decode_tp"]), int(r["decode_ep"]), bool(r["decode_dp_attention"])
        isl, osl, conc = int(r["isl"]), int(r["osl"]), int(r["conc"])
        # one node runs the replica on its tp GPUs (attention DP included); the snapshot's
        # num_decode_gpu reads tp * ep on expert-parallel runs while its per-GPU figures
        # divide by tp: conc / median TPOT bounds the output rate and agrees with tp
        gpus = tp
        if int(r["num_decode_gpu"]) not in (tp, tp * ep):
            raise SystemExit(f"unexpected GPU count in {r['run_url']}")
        out_per_gpu = m.get("output_tput_per_gpu")
        basis = "output_tput_per_gpu"
        if out_per_gpu is None:  # older runs: total tokens/s; both lengths are drawn alike
            out_per_gpu = m["tput_per_gpu"] * osl / (isl + osl)
            basis = "tput_per_gpu * osl / (isl + osl)"
        draft = 0
        if speculative:
            got = launch_mtp(hw, fw, prec, tp, isl, osl, conc, dpa)
            if got is None:
                continue
            fl, draft = got
        else:
            fl = launch(hw, fw, prec, tp, isl, osl, conc, dpa)
        rid = f"ix_{hw}_{fw}_{prec}_tp{tp}_ep{ep}{'_dpa' if dpa else ''}_{isl}-{osl}_c{conc}"
        if speculative:
            rid += "_mtp"
        # a closed loop of conc slots emits about conc answers per answer's latency: a
        # published rate far from that contradicts the run's own latencies (a recording
        # error), so the row is left out and said
        answer = osl * (1 + 0.8) / 2
        expect = conc * answer / (m["median_ttft"] + (answer - 1) * m["median_tpot"])
        if not 0.5 <= out_per_gpu * gpus / expect <= 2.0:
            print(
                f"left out {rid}: {out_per_gpu * gpus:.0f} output tokens/s published, "
                f"{expect:.0f} from its own TTFT and TPOT",
                file=sys.stderr,
            )
            continue
        if rid in seen:
            continue
        seen.add(rid)
        out.append(
            {
                **_provenance(r, rid, FRAMEWORK[fw]),
                "engine": ENGINE[fw],
                "model": "deepseek-v3",
                "precision": prec,
                "kv_precision": fl.kv_precision,
                "gpu_type": GPU[hw],
                "num_gpus": gpus,
                "tp": tp,
                "ep": ep,
                "dp_attention": int(dpa),
                "input_len": isl,
                "output_len": osl,
                "random_range_ratio": 0.8,
                "max_concurrency": conc,
                "num_requests": 10 * conc,
                "max_num_batched_tokens": fl.chunk,
                "scheduler_recv_interval": fl.recv_interval,
                "memory_fraction": "" if fl.memory_fraction is None else fl.memory_fraction,
                "memory_fraction_of": fl.memory_fraction_of,
                "decode_steps_per_schedule": fl.decode_steps,
                **({"spec_draft_tokens": draft} if speculative else {}),
                "out_tokens_per_s_total": round(out_per_gpu * gpus, 3),
                "tpot_median_ms": round(m["median_tpot"] * 1e3, 4),
                "ttft_median_ms": round(m["median_ttft"] * 1e3, 3),
                "tpot_p99_ms": round(m["p99_tpot"] * 1e3, 4),
                "ttft_p99_ms": round(m["p99_ttft"] * 1e3, 3),
                "notes": (
                    f"DeepSeek-R1 (architecture of DeepSeek-V3); output tokens/s from {basis}; "
                    f"launch flags of {SCRIPTS}/{fl.script}"
                    + (
                        f"; MTP with {draft} draft tokens, prompts of random tokens (acceptance "
                        "length not published)"
                        if speculative
                        else ""
                    )
                ),
            }
        )
    return sorted(out, key=lambda x: str(x["run_id"]))


def _pool(r: dict, side: str) -> tuple[int, int, int, bool] | None:
    """(workers, tp, ep, attention DP) of a run's prefill or decode workers; None when the
    snapshot gives no worker count."""
    workers, gpus = int(r[f"{side}_num_workers"]), int(r[f"num_{side}_gpu"])
    if workers < 1 or gpus % workers:
        return None
    per = gpus // workers
    if r[f"{side}_dp_attention"]:
        return workers, 1, per, True
    return workers, per, min(int(r[f"{side}_ep"]), per), False


def disagg_rows(snapshot: list[dict]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    for r in snapshot:
        if r["model"] != "dsr1" or not r["disagg"] or r["spec_method"] != "none":
            continue
        if r["hardware"] not in GPU or r["framework"] not in DISAGG_ENGINE:
            continue
        m = r["metrics"]
        pre, dec = _pool(r, "prefill"), _pool(r, "decode")
        if pre is None or dec is None or m.get("output_tput_per_gpu") is None:
            continue
        hw, fw, prec = r["hardware"], r["framework"], r["precision"]
        isl, osl, conc = int(r["isl"]), int(r["osl"]), int(r["conc"])
        kv = "bf16" if hw in ("h100", "h200") and "sglang" in fw else "fp8"

        def tag(p: tuple[int, int, int, bool]) -> str:
            return f"{p[0]}x" + (f"dep{p[2]}" if p[3] else f"tp{p[1]}ep{p[2]}")

        rid = f"ixd_{hw}_{fw}_{prec}_p{tag(pre)}_d{tag(dec)}_{isl}-{osl}_c{conc}"
        if rid in seen:
            continue
        seen.add(rid)
        out.append(
            {
                **_provenance(r, rid, DISAGG_FRAMEWORK[fw]),
                "engine": DISAGG_ENGINE[fw],
                "model": "deepseek-v3",
                "precision": prec,
                "kv_precision": kv,
                "gpu_type": GPU[hw],
                "prefill_workers": pre[0],
                "prefill_tp": pre[1],
                "prefill_ep": pre[2],
                "prefill_dp_attention": int(pre[3]),
                "decode_workers": dec[0],
                "decode_tp": dec[1],
                "decode_ep": dec[2],
                "decode_dp_attention": int(dec[3]),
                "num_gpus": int(r["num_prefill_gpu"]) + int(r["num_decode_gpu"]),
                "input_len": isl,
                "output_len": osl,
                "random_range_ratio": 0.8,
                "max_concurrency": conc,
                "num_requests": 10 * conc,
                "prefill_chunk_tokens": DISAGG_CHUNK,
                "out_tokens_per_s_total": round(
                    m["output_tput_per_gpu"] * int(r["num_decode_gpu"]), 3
                ),
                "tpot_median_ms": round(m["median_tpot"] * 1e3, 4),
                "ttft_median_ms": round(m["median_ttft"] * 1e3, 3),
                "tpot_p99_ms": round(m["p99_tpot"] * 1e3, 4),
                "ttft_p99_ms": round(m["p99_ttft"] * 1e3, 3),
                "notes": (
                    "DeepSeek-R1 (architecture of DeepSeek-V3); output tokens/s from "
                    "output_tput_per_gpu x num_decode_gpu; snapshot layout prefill "
                    f"tp{r['prefill_tp']} ep{r['prefill_ep']} dpa{int(r['prefill_dp_attention'])}"
                    f", decode tp{r['decode_tp']} ep{r['decode_ep']} "
                    f"dpa{int(r['decode_dp_attention'])}; launch recipe not in the snapshot: KV "
                    f"{kv}, prefill chunk {DISAGG_CHUNK} and the engine's memory fraction assumed"
                ),
            }
        )
    return sorted(out, key=lambda x: str(x["run_id"]))


def main(argv: list[str]) -> int:
    disagg = "--disaggregated" in argv
    spec = "--speculative" in argv
    argv = [a for a in argv if a not in ("--disaggregated", "--speculative")]
    if len(argv) != 1 or (disagg and spec):
        print(
            "usage: import_inferencex.py [--disaggregated | --speculative] benchmarks.json",
            file=sys.stderr,
        )
        return 2
    data = json.loads(Path(argv[0]).read_text())
    out = disagg_rows(data) if disagg else rows(data, speculative=spec)
    w = csv.DictWriter(sys.stdout, fieldnames=list(out[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
