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

Usage: ``python scripts/import_inferencex.py benchmarks.json > .../inference_sweep_runs.csv``
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
    "h200": "H200 SXM 141GB",
    "b200": "B200 SXM 180GB (HGX/DGX B200)",
    "b300": "B300 SXM 288GB (HGX/DGX B300, Blackwell Ultra)",
    "mi300x": "Instinct MI300X",
    "mi325x": "Instinct MI325X",
    "mi355x": "Instinct MI355X",
}
ENGINE = {"sglang": "sglang@0.5", "trt": "trtllm@1.2", "atom": "atom@0.1"}
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
        return Launch(script, "bf16", 32768, memory_fraction=0.82, memory_fraction_of="total")
    if hw in ("mi300x", "mi325x"):  # --num-continuous-decode-steps=4
        return Launch(script, "fp8", 131072, 1, 0.8, "total", decode_steps=4)
    if hw == "mi355x":  # fp8: 196608-token chunks, 8 decode steps a turn; fp4: 131072, 4
        chunk, steps = (196608, 8) if prec == "fp8" else (131072, 4)
        return Launch(script, "fp8", chunk, 1, 0.8, "total", decode_steps=steps)
    # B200/B300 (--kv-cache-dtype fp8_e4m3): the scheduler polls for requests every 10
    # decode passes, every 30 at CONC >= 16 (every pass with attention DP)
    recv = 1 if dpa else (30 if conc >= 16 else 10)
    if prec == "fp4":  # --chunked-prefill-size 16384 (32768 with attention DP)
        chunk = 32768 if dpa else 16384
        return Launch(script, "fp8", chunk, recv, 0.85, "total")
    if tp == 4:  # fp8 on four GPUs: 8192-token chunks, 95% of memory, recv every 10
        return Launch(script, "fp8", 8192, 10, 0.95, "total")
    return Launch(script, "fp8", 32768, recv, 0.82, "total")


def rows(snapshot: list[dict]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    for r in snapshot:
        if r["model"] != "dsr1" or r["disagg"] or r["is_multinode"] or r["spec_method"] != "none":
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
        fl = launch(hw, fw, prec, tp, isl, osl, conc, dpa)
        rid = f"ix_{hw}_{fw}_{prec}_tp{tp}_ep{ep}{'_dpa' if dpa else ''}_{isl}-{osl}_c{conc}"
        if rid in seen:
            continue
        seen.add(rid)
        out.append(
            {
                "run_id": rid,
                "source": SOURCE,
                "source_locator": f"{SNAPSHOT}; run {r['run_url']}",
                "retrieved": RETRIEVED,
                "run_date": r["date"],
                "framework": f"{FRAMEWORK[fw]}; image {r.get('image') or 'not recorded'}",
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
                "out_tokens_per_s_total": round(out_per_gpu * gpus, 3),
                "tpot_median_ms": round(m["median_tpot"] * 1e3, 4),
                "ttft_median_ms": round(m["median_ttft"] * 1e3, 3),
                "tpot_p99_ms": round(m["p99_tpot"] * 1e3, 4),
                "ttft_p99_ms": round(m["p99_ttft"] * 1e3, 3),
                "notes": (
                    f"DeepSeek-R1 (architecture of DeepSeek-V3); output tokens/s from {basis}; "
                    f"launch flags of {SCRIPTS}/{fl.script}"
                ),
            }
        )
    return sorted(out, key=lambda x: str(x["run_id"]))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: import_inferencex.py benchmarks.json", file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text())
    out = rows(data)
    w = csv.DictWriter(sys.stdout, fieldnames=list(out[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
