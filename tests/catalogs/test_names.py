"""Name resolution: every GPU name in the published tables, short CLI names, errors."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog, name_key
from gpuplan.errors import NotFoundError

# Every distinct `gpu_type` of published/training_runs.csv and published/inference_runs.csv,
# and every `hardware` of published/microbench.csv that names an accelerator (copied from the
# shared data folder, which tests must not read), with the catalog id it must resolve to.
PUBLISHED_GPU_NAMES: dict[str, str] = {
    # training_runs.csv gpu_type
    "A100-40GB": "a100-sxm4-40gb",
    "A100-80GB": "a100-sxm4-80gb",
    "A100-SXM4-80GB (Selene DGX A100)": "a100-sxm4-80gb",
    "A100-SXM4-80GB (Selene)": "a100-sxm4-80gb",
    "H100-80GB": "h100-sxm5-80gb",
    "H100-SXM5-80GB (DGX H100)": "h100-sxm5-80gb",
    # inference_runs.csv gpu_type
    "A100 (SXM, 80GB assumed)": "a100-sxm4-80gb",
    "H100 SXM 80GB": "h100-sxm5-80gb",
    "H200 SXM 141GB": "h200-sxm-141gb",
    # microbench.csv hardware
    "A100 node (8x, NVLink 3 / NVSwitch)": "a100-sxm4-80gb",
    "A100 x8": "a100-sxm4-80gb",
    "A100 x8 per node, IB 200Gb x4 (dual port)": "a100-sxm4-80gb",
    "A100-SXM4-40GB": "a100-sxm4-40gb",
    "A100-SXM4-40GB, 2x Xeon 8358, 4x HDR IB per server": "a100-sxm4-40gb",
    "AMD MI300X": "mi300x",
    "AMD MI300X node (8x)": "mi300x",
    "AMD MI325X": "mi325x",
    "AMD MI355X": "mi355x",
    "B200 (AWS P6-B200)": "b200-sxm-180gb",
    "B200 node (AWS p6-b200.48xlarge)": "b200-sxm-180gb",
    "H100 80GB": "h100-sxm5-80gb",
    "H100 80GB HBM3": "h100-sxm5-80gb",
    "H100 80GB HBM3 (8 ranks on one host)": "h100-sxm5-80gb",
    "H100 80GB HBM3 (host 2x Xeon Platinum 8470)": "h100-sxm5-80gb",
    "H100 80GB HBM3 SXM5": "h100-sxm5-80gb",
    "H100 80GB HBM3 SXM5 (Voltage Park node)": "h100-sxm5-80gb",
    "H100 node (NVLS) / NDR 400G NIC": "h100-sxm5-80gb",
    "Intel Gaudi 2": "gaudi2",
    "Intel Gaudi 3": "gaudi3",
    "MI300X (Dell XE9680, 2x Xeon 8462Y+), ROCm 6.4.1": "mi300x",
    "NVIDIA A100 PCIe": "a100-pcie-80gb",
    "NVIDIA A100 SXM": "a100-sxm4-80gb",
    "NVIDIA B200 SXM": "b200-sxm-180gb",
    "NVIDIA B300 SXM": "b300-sxm-288gb",
    "NVIDIA GB200 SXM": "gb200-gpu-186gb",
    "GB200 192GB (NVL72)": "gb200-gpu-186gb",  # TensorRT-LLM perf-table name
    "NVIDIA H100 SXM": "h100-sxm5-80gb",
    # names the brief and NVML/ROCm report
    "H100-SXM5-80GB": "h100-sxm5-80gb",
    "B200 (DGX B200)": "b200-sxm-180gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA H200": "h200-sxm-141gb",
    "AMD Instinct MI300X": "mi300x",
    "nvidia_h100_sxm": "h100-sxm5-80gb",
    "NVIDIA B300 SXM6 AC": "b300-sxm-288gb",
    "NVIDIA H200 141GB HBM3e": "h200-sxm-141gb",
    "AMD Instinct MI300X VF": "mi300x",
    "NVIDIA A800-SXM4-80GB": "a800-sxm4-80gb",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-blackwell-server",
}

# microbench.csv rows whose `hardware` is not an accelerator: must not resolve to one.
NOT_ACCELERATORS = [
    "2x Intel Xeon Platinum 8470 (H100 host)",
    "Meta Tectonic (7,500 SSD servers, 240 PB)",
    "Samsung SSD 980 PRO 2TB NVMe (PCIe4, local)",
]


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_GPU_NAMES.items()))
def test_published_gpu_names_resolve(name: str, expected: str) -> None:
    assert get_catalog().gpu(name).id == expected


@pytest.mark.parametrize("name", NOT_ACCELERATORS)
def test_non_accelerator_hardware_does_not_resolve(name: str) -> None:
    with pytest.raises(NotFoundError):
        get_catalog().gpu(name)


@pytest.mark.parametrize(
    ("short", "expected"),
    [
        ("h100", "h100-sxm5-80gb"),
        ("H100", "h100-sxm5-80gb"),
        ("h200", "h200-sxm-141gb"),
        ("a100", "a100-sxm4-80gb"),
        ("b200", "b200-sxm-180gb"),
        ("mi300x", "mi300x"),
        ("tpu-v5p", "tpu-v5p"),
        ("trn2", "trainium2"),
        ("gb200", "gb200-gpu-186gb"),
    ],
)
def test_short_cli_names(short: str, expected: str) -> None:
    assert get_catalog().gpu(short).id == expected


def test_case_and_separators_do_not_matter() -> None:
    cat = get_catalog()
    variants = ["H100_SXM5_80GB", "h100 sxm5 80gb", "H100-Sxm5-80Gb", "(H100) SXM5 80GB"]
    assert {cat.gpu(v).id for v in variants} == {"h100-sxm5-80gb"}
    assert name_key("H100-SXM5-80GB") == name_key("h100 sxm5 80gb")


def test_unknown_name_lists_closest_ids() -> None:
    with pytest.raises(NotFoundError, match="unknown GPU/accelerator 'H1000'") as info:
        get_catalog().gpu("H1000")
    assert "h100" in (info.value.hint or "")


def test_ambiguous_name_lists_the_candidates() -> None:
    with pytest.raises(NotFoundError, match="ambiguous") as info:
        get_catalog().gpu("Intel Gaudi 2/3")
    assert "gaudi2" in info.value.message and "gaudi3" in info.value.message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama3.1-405b", "llama3.1-405b"),
        ("Llama 3.1 405B", "llama3.1-405b"),
        ("LLAMA2-70B", "llama2-70b"),
        ("LLaMA 7B (Llama 2)", "llama2-7b"),
        ("MPT-7b", "mpt-7b"),
        ("GPT3-175B", "gpt3-175b"),
        ("Mixtral 8x7B", "mixtral-8x7b"),
        ("Falcon 180B", "falcon-180b"),
        ("GPT-J 6B", "gpt-j-6b"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("Nemotron-340B", "nemotron4-340b"),
    ],
)
def test_model_names_resolve(name: str, expected: str) -> None:
    assert get_catalog().model(name).id == expected


def test_unknown_model_suggests() -> None:
    with pytest.raises(NotFoundError, match="unknown model") as info:
        get_catalog().model("llama3.1-406b")
    assert "llama3.1-405b" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Hugging Face repository ids of checkpoints: organisation, tuning, quantisation and
        # release words dropped (rule 4 of gpuplan.catalogs.names)
        ("meta-llama/Llama-3.1-70B-Instruct", "llama3.1-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3-8b"),
        ("meta-llama/Llama-2-70b-chat-hf", "llama2-70b"),
        ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama3.3-70b"),
        ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama3.1-70b"),
        ("Llama-3.1-405B-Instruct-FP8", "llama3.1-405b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
        ("nvidia/DeepSeek-R1-FP4", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b-2507"),  # its own 256K row
        ("Qwen/Qwen3-30B-A3B-Instruct", "qwen3-30b-a3b"),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama4-maverick"),
        ("google/gemma-3-27b-it", "gemma3-27b"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ],
)
def test_checkpoint_names_resolve_to_their_architecture(name: str, expected: str) -> None:
    assert get_catalog().model(name).id == expected


def test_mlperf_benchmark_names_resolve_to_their_model() -> None:
    """MLPerf Inference's benchmark names (the submission checker's model list) carry a
    scenario variant and an accuracy target; neither changes the architecture served."""
    cat = get_catalog()
    names = {
        "llama2-70b-99": "llama2-70b",
        "llama2-70b-99.9": "llama2-70b",
        "llama2-70b-interactive-99": "llama2-70b",
        "llama2-70b-interactive-99.9": "llama2-70b",
        "llama3.1-405b-interactive": "llama3.1-405b",
        "llama3.1-8b-edge": "llama3.1-8b",
        "llama3.1-8b-interactive": "llama3.1-8b",
        "deepseek-r1-interactive": "deepseek-v3",
        "mixtral-8x7b": "mixtral-8x7b",
        "gptj-99": "gpt-j-6b",
        "gptj-99.9": "gpt-j-6b",
    }
    assert {n: cat.model(n).id for n in names} == names
    # an accuracy target is dropped only last, and only after a name
    for name in ("llama2-99b", "99.9", "interactive-llama2-70b"):
        with pytest.raises(NotFoundError):
            cat.model(name)


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-3.1-71B-Instruct",  # no such size
        "Instruct-FP8",  # nothing left but the words dropped
        "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct",  # V2 is the architecture, not a release tag
    ],
)
def test_a_checkpoint_of_an_unknown_architecture_does_not_resolve(name: str) -> None:
    with pytest.raises(NotFoundError, match="unknown model"):
        get_catalog().model(name)


def test_checkpoint_words_apply_to_models_only() -> None:
    """A GPU name keeps every word: 'H100 FP8' is not a model rule's business."""
    with pytest.raises(NotFoundError):
        get_catalog().gpu("nvidia/H100-Instruct")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # benchmark systems' accelerator names with their configuration (rule 5)
        ("AMD Instinct MI300X-NPS1-SPX-192GB-750W", "mi300x"),
        ("MI325X-NPS1-SPX-256GB-1000W", "mi325x"),
        ("AMD Instinct MI355X-NPS1-SPX-288GB-1400W", "mi355x"),
        ("NVIDIA H200-SXM-141GB-CTS", "h200-sxm-141gb"),
        ("NVIDIA B200-SXM-180GB-TDP1000W", "b200-sxm-180gb"),  # a power limit spelt with TDP
        ("MI355X_OAM", "mi355x"),
        ("8xMI300X", "mi300x"),
        ("NVIDIA 8xH200-SXM-141GB", "h200-sxm-141gb"),
        # usable memory stated, within 7% of the part's
        ("NVIDIA B300-SXM-270GB", "b300-sxm-288gb"),
        # Grace Hopper: the HBM size picks the part; nvidia-smi's name counts the Grace memory
        ("NVIDIA GH200 Grace Hopper Superchip 144GB", "gh200-144gb"),
        ("GH200-144GB_aarch64", "gh200-144gb"),
        ("NVIDIA GH200-GraceHopper-Superchip", "gh200-96gb"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),
    ],
)
def test_configured_system_accelerator_names_resolve(name: str, expected: str) -> None:
    assert get_catalog().gpu(name).id == expected


@pytest.mark.parametrize("name", ["NVIDIA H100-SXM-94GB", "H100 SXM 40GB", "MI300X-NPS1-64GB"])
def test_a_stated_memory_the_part_does_not_hold_does_not_resolve(name: str) -> None:
    """Dropping the memory size finds the part by name only if it holds what the name
    states: an H100 SXM has 80 GB, not 94 (that is the H100 NVL)."""
    with pytest.raises(NotFoundError, match="unknown GPU"):
        get_catalog().gpu(name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the system a part ships in (rule 2's noise words)
        ("DGX B200", "b200-sxm-180gb"),
        ("HGX H100", "h100-sxm5-80gb"),
        ("NVIDIA DGX GB200", "gb200-gpu-186gb"),
        ("Trn2 UltraServer", "trainium2"),
        # a TPU slice's size after its generation (rule 5)
        ("v5p-1024", "tpu-v5p"),
        ("TPU v6e-64", "tpu-v6e"),
        ("v5litepod-16", "tpu-v5e"),
        # a cloud instance type names its accelerator (rule 6)
        ("p5.48xlarge", "h100-sxm5-80gb"),
        ("trn1.32xlarge", "trainium1"),
        ("Standard_ND96isr_MI300X_v5", "mi300x"),
        ("a3-megagpu-8g", "h100-sxm5-80gb"),
        # part numbers
        ("HL-325L", "gaudi3"),
        ("HL-225H", "gaudi2"),
        ("GH200 480GB", "gh200-96gb"),
    ],
)
def test_system_slice_and_instance_names_resolve(name: str, expected: str) -> None:
    assert get_catalog().gpu(name).id == expected


@pytest.mark.parametrize("name", ["MI300X-8", "H100-8", "p9.48xlarge"])
def test_a_count_counts_only_after_a_tpu_generation(name: str) -> None:
    """The slice size is dropped after a TPU generation only; elsewhere a number stays
    part of the name, and an instance type outside the catalog is not guessed."""
    with pytest.raises(NotFoundError):
        get_catalog().gpu(name)
