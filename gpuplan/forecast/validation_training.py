"""Validation of the training forecast against published large-scale runs.

The published table (``forecast/data/training_runs.csv``, copied with its sources from the
project's shared data) mixes conventions; every row is compared *like with like*:

==========================  ===============================================================
metric used                 rows
==========================  ===============================================================
``step_time_s``             the row gives an iteration time (Korthikanti et al. 2022 Table 5)
``tokens_per_s_per_gpu``    the row gives measured throughput (NeMo, MosaicML, IBM fms-fsdp)
``megatron_tflops_per_gpu`` Narayanan et al. 2021: TFLOP/s counted with their eq. 3, which
                            includes the recomputed forward (HFU-like); the forecast step
                            time is converted with the same equation
``model_tflops_per_gpu``    other TFLOP/s rows (MFU convention, PaLM FLOPs)
==========================  ===============================================================

A row has a *complete configuration* when its architecture (from the row, completed from
the catalog model of the same name when the row omits fields), GPU, GPU count, sequence
length, global batch and tensor/pipeline sizes are known. Missing pieces are filled as the
source's framework does (documented in :data:`FRAMEWORKS` and ``row_config``): micro-batch
and interleaving are searched (the authors tuned them), context/expert parallel default to
1, ZeRO follows the framework.

The four framework-efficiency constants of the step model are fitted here
(:func:`fit_constants`), pooled over every row and per framework profile (the table's
``framework`` column mapped by :data:`gpuplan.forecast.training.PROFILE_OF_FRAMEWORK`;
:func:`fit_profiles`): a profile with at least ``MIN_PROFILE_ROWS`` rows gets its own fit,
the others use the pooled constants. ``validate`` reports each row's error *held out*: with
``scheme="leave-one-source-out"`` (the default) the constants used for a row are fitted on
the other publications only; ``scheme="shipped"`` uses the shipped constants (fitted on
all rows: in-sample, reported for transparency only).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from os import PathLike
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

import numpy as np

from gpuplan.errors import InputError, NotFoundError, SchemaError
from gpuplan.forecast.flops import megatron_flops_per_step
from gpuplan.forecast.hardware import Hardware, resolve_hardware
from gpuplan.forecast.memory import RECOMPUTE_CODES
from gpuplan.forecast.model import ModelArch, arch_from_catalog
from gpuplan.forecast.training import (
    LAYOUT_KEYS,
    MIN_PROFILE_ROWS,
    PROFILE_FIT_KEYS,
    Constants,
    Framework,
    constant,
    constant_list,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
    profile_of,
)
from gpuplan.numeric import FloatArray, JSONDict

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import ModelArch as CatalogModel

FilePath: TypeAlias = str | PathLike[str]
"""A file name (``str`` or :class:`pathlib.Path`)."""

FIT_KEYS = (
    "gemm_time_factor",
    "attention_time_factor",
    "nongemm_traffic_factor",
    "layer_overhead_s",
)
FIT_BOUNDS = {
    # lower bounds keep the physics: no GEMM, attention kernel or elementwise pass runs
    # faster than the calibrated rate for its shape (this also keeps MFU <= 1).
    "gemm_time_factor": (1.0, 4.0),
    "attention_time_factor": (1.0, 6.0),
    "nongemm_traffic_factor": (1.0, 20.0),
    "layer_overhead_s": (0.0, 5e-3),
}
RESIDUAL_QUANTILES = (0.05, 0.95)


class FrameworkSpec(TypedDict):
    """How one publication's framework runs (an entry of :data:`FRAMEWORKS`)."""

    framework: Framework
    zero: int
    family: str | None
    """``gpt`` / ``mpt``: GPT-style blocks where the row gives no catalog model; None: none."""


# How each publication's framework runs, for the settings the table does not give.
FRAMEWORKS: dict[str, FrameworkSpec] = {
    # Megatron-LM as of 2021: no sequence parallelism, no flash attention, gradients
    # all-reduced after the backward (no overlap), full activation recomputation,
    # replicated optimizer (Narayanan et al. 2021, sections 3 and 5).
    "narayanan2021": dict(
        framework=Framework(
            name="megatron-lm-2021",
            sequence_parallel=False,
            flash_attention=False,
            dp_overlap=False,
            grad_reduce_bytes=4.0,
        ),
        zero=0,
        family="gpt",
    ),
    # DeepSpeed ZeRO-3 baseline of the same table, run with DeepSpeed's defaults: the
    # parameter all-gathers are prefetched behind compute (ZeRO-3's prefetch coordinator,
    # ``stage3_prefetch_bucket_size``) but the gradient reduction is not overlapped with
    # the backward (``overlap_comm`` default false, microsoft/DeepSpeed
    # docs/_pages/config-json.md) and ZeRO-3 fetches parameters
    # in units of ``stage3_prefetch_bucket_size`` = 5e7 elements (the default in
    # deepspeed/runtime/zero/config.py; both retrieved 2026-12-01), each unit one
    # collective over all 384-2240 ranks. See docs/forecast-training.md, "DeepSpeed ZeRO-3
    # (Narayanan 2021 Table 2)" for what is still missing.
    "narayanan2021_zero3": dict(
        framework=Framework(
            name="deepspeed-zero3",
            sequence_parallel=False,
            flash_attention=False,
            dp_overlap=True,
            grad_reduce_overlap=False,
            grad_reduce_bytes=2.0,
            zero3_unit_params=5e7,
        ),
        zero=3,
        family="gpt",
    ),
    # Megatron-LM 2022 (Korthikanti et al. 2022, section 6): sequence parallelism with the
    # selective rows only, no flash attention, data parallel size 1.
    "korthikanti2022": dict(
        framework=Framework(
            name="megatron-lm-2022", sequence_parallel=True, flash_attention=False, dp_overlap=False
        ),
        zero=0,
        family="gpt",
    ),
    # NeMo 24.x performance recipes: Megatron-core with the distributed optimizer,
    # overlapped DP and TP communication, Transformer Engine's cuDNN fused attention
    # (Hopper-native, counted with the FlashAttention-3 figure), fp32 gradient buffers
    # (NeMo's bf16 mixed-precision recipe sets grad_reduce_in_fp32=True).
    "nemo": dict(
        framework=Framework(
            name="nemo-24",
            sequence_parallel=True,
            flash_attention=True,
            attention_kernel="flash-attention-3",
            dp_overlap=True,
            tp_overlap=True,
        ),
        zero=1,
        family=None,
    ),
    # MosaicML Composer + PyTorch FSDP with FlashAttention-2 (llm-foundry benchmarking
    # README; the benchmarks predate FlashAttention-3). The sharded fp32 flat parameters are
    # the master weights (Framework.params_are_master). FSDP1 gathers its flat parameters
    # in their 16-bit dtype even under Transformer Engine FP8 (the float8 all-gather is an
    # FSDP2 feature, torchao float8 README), so no FP8 all-gather here.
    "mosaicml": dict(
        framework=Framework(
            name="composer-fsdp",
            sequence_parallel=False,
            flash_attention=True,
            attention_kernel="flash-attention-2",
            dp_overlap=True,
            fp8_param_gather=False,
            params_are_master=True,
        ),
        zero=3,
        family="mpt",
    ),
}

# The framework a row runs under when the table has no ``framework`` column.
_FRAMEWORK_OF_KEY = {
    "narayanan2021": "megatron",
    "narayanan2021_zero3": "deepspeed",
    "korthikanti2022": "megatron",
    "nemo": "nemo",
    "mosaicml": "composer-fsdp",
    "pytorch_fsdp": "pytorch-fsdp",
}

FRAMEWORKS["pytorch_fsdp"] = dict(
    # PyTorch FSDP (FSDP1) as IBM's fms-fsdp runs it: SDPA FlashAttention-2, forward and
    # backward prefetch overlapping the gathers, the bfSixteen mixed-precision policy
    # (16-bit weights gathered and gradients reduced in bf16; the sharded fp32 parameters are
    # the master weights), FULL_SHARD or HYBRID_SHARD
    # over the 8 GPUs of a node (foundation-model-stack/fms-fsdp fms_fsdp/policies/
    # mixed_precision.py and utils/train_utils.py at cf6e42c, retrieved 2026-12-01).
    framework=Framework(
        name="pytorch-fsdp",
        sequence_parallel=False,
        flash_attention=True,
        attention_kernel="flash-attention-2",
        dp_overlap=True,
        grad_reduce_bytes=2.0,
        fp8_param_gather=False,
        params_are_master=True,
    ),
    zero=3,
    family=None,
)

# Row model names -> catalog model ids (only names that are the same model).
CATALOG_NAMES = {
    "gpt3-175b": "gpt3-175b",
    "gpt-3 175b": "gpt3-175b",
    "llama2-7b": "llama2-7b",
    "llama 2 7b": "llama2-7b",
    "llama2-13b": "llama2-13b",
    "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b",
    "llama3-70b": "llama3-70b",
    "nemotron-340b": "nemotron4-340b",
    "mpt-7b": "mpt-7b",
    "mpt-30b": "mpt-30b",
    "mpt-70b": "mpt-70b",
}


def publication(source: str) -> str:
    """Group key of a row's source: the publication (paper or repository)."""
    s = source.lower()
    if s.startswith("narayanan"):
        return "Narayanan et al. 2021 (Megatron-LM)"
    if s.startswith("korthikanti"):
        return "Korthikanti et al. 2022 (Megatron-LM)"
    if "nemo" in s:
        return "NVIDIA NeMo performance summary"
    if "mosaicml" in s or "llm-foundry" in s:
        return "MosaicML llm-foundry benchmarks"
    return source.split(",")[0]


def load_rows(path: FilePath | None = None) -> list[dict[str, str]]:
    """The shipped published runs (or ``path``) as a list of dicts."""
    try:
        if path is None:
            text = (
                resources.files("gpuplan.forecast")
                .joinpath("data")
                .joinpath("training_runs.csv")
                .read_text("utf-8")
            )
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror}", hint="check the --data path"
        ) from None
    rows = list(csv.DictReader(text.splitlines()))
    need = {"run_id", "source", "model", "gpu_type", "num_gpus", "seq_len"}
    if not rows or not need <= set(rows[0]):
        raise SchemaError(
            f"{path or 'training_runs.csv'}: not a training-runs table (needs columns "
            + ", ".join(sorted(need))
            + ")"
        )
    return rows


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    t = text.strip()
    if not t or t.lower() in ("n/a", "na", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    v = _num(text)
    return None if v is None else round(v)


@dataclass
class RowConfig:
    """What the forecast needs for one published row, and what to compare."""

    run_id: str
    source: str
    group: str
    complete: bool
    reason: str = ""
    arch: ModelArch | None = None
    gpu: str = ""
    num_gpus: int = 0
    seq_len: int = 0
    global_batch: int = 0
    precision: str = "bf16"
    fixed: dict[str, int] = field(default_factory=dict)
    framework: Framework = field(default_factory=Framework)
    metric: str = ""
    published: float = float("nan")
    published_step_time_s: float = float("nan")
    searched: list[str] = field(default_factory=list)
    arch_from: str = ""
    framework_name: str = ""
    """The row's ``framework`` column (megatron, nemo, composer-fsdp, deepspeed...)."""
    profile: str = ""
    """Its framework profile (:func:`gpuplan.forecast.training.profile_of`)."""
    inter_node_bandwidth_bytes_per_s: float | None = None
    """Scale-out bandwidth per GPU per direction where the publication states it (column
    ``inter_node_gbytes_per_s_per_gpu``); None = the catalog node's."""


def _framework_key(row: dict[str, str]) -> str:
    if (row.get("framework") or "").strip().lower() == "pytorch-fsdp":
        return "pytorch_fsdp"
    group = publication(row["source"])
    if group.startswith("Narayanan"):
        return (
            "narayanan2021_zero3"
            if "zero-3" in (row.get("fsdp_or_zero") or "").lower()
            else "narayanan2021"
        )
    if group.startswith("Korthikanti"):
        return "korthikanti2022"
    if group.startswith("NVIDIA NeMo"):
        return "nemo"
    return "mosaicml"


def _precision(text: str) -> str:
    t = text.lower()
    if "fp4" in t:
        return "fp4"
    if "mxfp8" in t:
        return "mxfp8"
    if "fp8" in t:
        return "fp8"
    if "bf16" in t:
        return "bf16"
    if "fp16" in t:
        return "fp16"
    return "bf16"


def _recompute(text: str, framework_key: str) -> int | None:
    t = (text or "").strip().lower()
    if not t:
        # NeMo's performance recipes train without activation recomputation.
        return 0 if framework_key == "nemo" else None
    if t.startswith("selective"):
        return RECOMPUTE_CODES["selective"]
    if t in ("yes", "full", "true"):
        return RECOMPUTE_CODES["full"]
    if t in ("no", "none", "false"):
        return RECOMPUTE_CODES["none"]
    return None


def _catalog_model(name: str, catalog: Catalog) -> CatalogModel | None:
    key = CATALOG_NAMES.get(name.strip().lower())
    if key is None:
        return None
    try:
        return catalog.model(key)
    except NotFoundError:
        return None


def row_config(row: dict[str, str], catalog: Catalog) -> RowConfig:
    """Turn a published row into a forecast configuration (or say why it is incomplete)."""
    fkey = _framework_key(row)
    spec = FRAMEWORKS[fkey]
    fw: Framework = spec["framework"]
    cfg = RowConfig(
        run_id=row["run_id"],
        source=row["source"],
        group=publication(row["source"]),
        complete=False,
        framework=fw,
    )
    cfg.framework_name = (row.get("framework") or "").strip().lower() or _FRAMEWORK_OF_KEY[fkey]
    cfg.profile = profile_of(cfg.framework_name)
    notes = row.get("notes") or ""
    # --- architecture: row values, completed from the catalog model of the same name
    base = _catalog_model(row["model"], catalog)
    # the keyword arguments of ModelArch: as_dict() is untyped and the values differ by field
    fields: dict[str, Any] = {}
    if base is not None:
        fields = arch_from_catalog(base).as_dict()
        cfg.arch_from = f"catalog {base.id}"
    for col in ("layers", "hidden", "heads", "ffn_hidden"):
        v = _int(row.get(col))
        if v is not None:
            fields[col] = v
    kv = _int(row.get("kv_heads"))
    if kv is not None:
        fields["kv_heads"] = kv
    m = re.search(r"vocab (\d+)", notes)
    if m:
        fields["vocab"] = int(m.group(1))
    family = spec["family"]
    if family in ("gpt", "mpt") and base is None:
        # GPT-style blocks: 4h GELU MLP, tied embeddings (Narayanan et al. 2021 section 5;
        # MPT yamls in llm-foundry); Megatron GPTs train with dropout.
        fields.setdefault("ffn_hidden", 4 * fields["hidden"] if "hidden" in fields else None)
        fields.setdefault("gated_mlp", False)
        fields.setdefault("tied_embeddings", True)
        fields.setdefault("dropout", family == "gpt")
        if "vocab" not in fields and family == "gpt":
            fields["vocab"] = 51200  # GPT-2 BPE vocabulary padded, Narayanan et al. 2021 sec 5.1
        cfg.arch_from = cfg.arch_from or "row"
    if fields.get("kv_heads") is None and fields.get("heads") is not None:
        fields["kv_heads"] = None
    missing = [k for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab") if not fields.get(k)]
    if missing:
        cfg.reason = "architecture not published (" + ", ".join(missing) + ")"
        return cfg
    fields["name"] = row["model"]
    fields.pop("extra", None)
    try:
        cfg.arch = ModelArch(**fields)
    except InputError as exc:
        cfg.reason = f"architecture invalid: {exc.message}"
        return cfg
    # --- hardware and sizes
    try:
        cfg.gpu = catalog.gpu(row["gpu_type"]).id
    except NotFoundError:
        cfg.reason = f"GPU {row['gpu_type']!r} not in the catalog"
        return cfg
    cfg.num_gpus = _int(row.get("num_gpus")) or 0
    cfg.seq_len = _int(row.get("seq_len")) or 0
    gbs = _int(row.get("global_batch_seqs"))
    gbt = _num(row.get("global_batch_tokens"))
    if gbs is None and gbt and cfg.seq_len:
        gbs = round(gbt / cfg.seq_len)
    cfg.global_batch = gbs or 0
    cfg.precision = _precision(row.get("precision") or "")
    bw = _num(row.get("inter_node_gbytes_per_s_per_gpu"))
    cfg.inter_node_bandwidth_bytes_per_s = bw * 1e9 if bw else None
    if not (cfg.num_gpus and cfg.seq_len and cfg.global_batch):
        cfg.reason = "GPU count, sequence length or global batch not published"
        return cfg
    # --- layout
    fixed: dict[str, int] = {}
    for col, key in (
        ("tp", "tp"),
        ("pp", "pp"),
        ("dp", "dp"),
        ("cp", "cp"),
        ("ep", "ep"),
        ("vp", "vp"),
        ("micro_batch", "micro_batch"),
    ):
        v = _int(row.get(col))
        if v is not None:
            fixed[key] = v
    if fkey == "pytorch_fsdp":
        fixed.update(tp=1, pp=1, cp=1, dp=cfg.num_gpus, zero=3)
        m_hsdp = re.search(r"HYBRID_SHARD\((\d+)\)", (row.get("fsdp_or_zero") or "").upper())
        if m_hsdp:
            cfg.framework = dataclasses.replace(fw, hsdp_shard_size=int(m_hsdp.group(1)))
    elif fkey == "mosaicml":
        fixed.update(tp=1, pp=1, cp=1, dp=cfg.num_gpus)
        sharding = (row.get("fsdp_or_zero") or "").upper()
        fixed["zero"] = 2 if "SHARD_GRAD_OP" in sharding else 3
        pure = "PURE" in (row.get("precision") or "").upper()
        cfg.framework = Framework(
            name="composer-fsdp",
            sequence_parallel=False,
            flash_attention=True,
            attention_kernel="flash-attention-2",
            dp_overlap=True,
            grad_reduce_bytes=2.0 if pure else 4.0,
        )
    else:
        fixed["zero"] = spec["zero"]
    if "tp" not in fixed or "pp" not in fixed:
        cfg.reason = "parallel layout (tp, pp) not published"
        return cfg
    fixed.setdefault("cp", 1)
    fixed.setdefault("ep", 1)
    if fixed["pp"] == 1:
        fixed["vp"] = 1
    if (row.get("act_recompute") or "").strip().lower().startswith("blockwise"):
        # fms-fsdp's "selective" checkpointing recomputes every k-th block in full; with k
        # unpublished the step cannot be modelled (none, selective and full all differ).
        cfg.reason = "activation checkpointing of every k-th block, k not published"
        return cfg
    rc = _recompute(row.get("act_recompute") or "", fkey)
    if rc is not None:
        fixed["recompute"] = rc
    if fkey == "korthikanti2022":
        sp = "sequence parallel" in (row.get("act_recompute") or "").lower()
        cfg.framework = Framework(
            name="megatron-lm-2022", sequence_parallel=sp, flash_attention=False, dp_overlap=False
        )
    cfg.searched = [k for k in ("vp", "micro_batch", "recompute") if k not in fixed]
    cfg.fixed = fixed
    # --- the published metric, converted to a step time with the source's convention
    tokens_per_step = cfg.global_batch * cfg.seq_len
    step = _num(row.get("step_time_s"))
    tps_gpu = _num(row.get("tokens_per_s_per_gpu"))
    tflops = _num(row.get("tflops_per_gpu"))
    if step:
        cfg.metric, cfg.published, cfg.published_step_time_s = "step_time_s", step, step
    elif tps_gpu:
        cfg.metric, cfg.published = "tokens_per_s_per_gpu", tps_gpu
        cfg.published_step_time_s = tokens_per_step / (tps_gpu * cfg.num_gpus)
    elif tflops and ("eq.3" in notes.replace(" ", "") or fkey.startswith("narayanan")):
        flops = float(
            megatron_flops_per_step(
                cfg.global_batch,
                cfg.seq_len,
                cfg.arch.layers,
                cfg.arch.hidden,
                cfg.arch.vocab,
                full_recompute=True,
            )
        )
        cfg.metric, cfg.published = "megatron_tflops_per_gpu", tflops
        cfg.published_step_time_s = flops / (tflops * 1e12 * cfg.num_gpus)
    elif tflops:
        from gpuplan.forecast.model import model_flops_per_token

        flops = float(model_flops_per_token(cfg.arch, cfg.seq_len)) * tokens_per_step
        cfg.metric, cfg.published = "model_tflops_per_gpu", tflops
        cfg.published_step_time_s = flops / (tflops * 1e12 * cfg.num_gpus)
    else:
        cfg.reason = "no published throughput, TFLOP/s or step time"
        return cfg
    cfg.complete = True
    return cfg


def _to_metric(cfg: RowConfig, step_s: float) -> float:
    """A forecast step time expressed in the row's published metric."""
    if cfg.metric == "step_time_s":
        return step_s
    return cfg.published / (step_s / cfg.published_step_time_s)


# ------------------------------------------------------------------ forecasting a row
@dataclass
class RowEval:
    cfg: RowConfig
    layout: dict[str, int]
    step3: FloatArray  # [value, low, high] before the model-error band
    basis: dict[str, float]
    rest: float
    fits: bool


def _choose_layout(cfg: RowConfig, hw: Hardware, constants: Constants) -> dict[str, int]:
    """The published layout, with missing pieces searched as the authors tuned them."""
    from gpuplan.forecast.search import enumerate_layouts
    from gpuplan.forecast.training import memory_only, take_layouts

    arch = cfg.arch
    assert arch is not None
    layouts = enumerate_layouts(
        arch,
        cfg.num_gpus,
        cfg.fixed,
        seq_len=cfg.seq_len,
        global_batch=cfg.global_batch,
        node_size=hw.node_size,
    )
    if layouts["tp"].size == 0:
        raise InputError(f"{cfg.run_id}: the published layout is not valid for this model")
    if layouts["tp"].size > 1:
        mem = memory_only(
            arch,
            hw,
            layouts,
            seq_len=cfg.seq_len,
            global_batch=cfg.global_batch,
            framework=cfg.framework,
            constants=constants,
            precision=cfg.precision,
        )
        fits = mem["total"] <= hw.memory_bytes
        if np.any(fits):
            layouts = take_layouts(layouts, fits)
        res = evaluate_layouts(
            arch,
            hw,
            layouts,
            seq_len=cfg.seq_len,
            global_batch=cfg.global_batch,
            precision=cfg.precision,
            framework=cfg.framework,
            constants=constants,
            with_memory=False,
        )
        j = int(np.argmin(np.asarray(res["step_time_s"])[0]))
    else:
        j = 0
    return {k: int(layouts[k][j]) for k in LAYOUT_KEYS}


def evaluate_row(
    cfg: RowConfig,
    hw: Hardware,
    constants: Constants,
    layout: dict[str, int] | None = None,
) -> RowEval:
    arch = cfg.arch
    assert arch is not None
    layout = layout or _choose_layout(cfg, hw, constants)
    res = evaluate_layouts(
        arch,
        hw,
        layouts_from_dict(layout),
        seq_len=cfg.seq_len,
        global_batch=cfg.global_batch,
        precision=cfg.precision,
        framework=cfg.framework,
        constants=constants,
    )
    step3 = np.asarray(res["step_time_s"])[:, 0]
    basis = {k: float(np.asarray(v)[0, 0]) for k, v in res["fit_basis"].items()}
    linear = sum(constant(constants, k) * basis[k] for k in FIT_KEYS)
    fits = float(res["memory"]["total"][0]) <= hw.memory_bytes
    return RowEval(cfg, layout, step3, basis, float(step3[0]) - linear, fits)


# ------------------------------------------------------------------------ the fit
def fit_constants(
    evals_fn: Callable[[Constants], list[RowEval]],
    start: Constants,
    *,
    iterations: int = 4,
) -> dict[str, object]:
    """Fit the framework-efficiency constants on the rows ``evals_fn`` forecasts.

    The forecast step time is linear in the four constants except through the overlap
    terms (exposed communication), so each iteration solves a bounded linear least-squares
    problem on relative error (``scipy.optimize.lsq_linear``), with every publication
    weighted equally, then re-forecasts with the new constants. The residual band is the
    5th/95th percentile of ``published / forecast`` step time on these rows.
    """
    from scipy.optimize import lsq_linear

    c = dict(start)
    for _ in range(iterations):
        evals = evals_fn(c)
        groups: dict[str, int] = {}
        for e in evals:
            groups[e.cfg.group] = groups.get(e.cfg.group, 0) + 1
        A = np.array([[e.basis[k] for k in FIT_KEYS] for e in evals])
        obs = np.array([e.cfg.published_step_time_s for e in evals])
        rest = np.array([e.rest for e in evals])
        w = np.array([1.0 / math.sqrt(groups[e.cfg.group]) for e in evals])
        scale = w / obs
        lo = [FIT_BOUNDS[k][0] for k in FIT_KEYS]
        hi = [FIT_BOUNDS[k][1] for k in FIT_KEYS]
        sol = lsq_linear(A * scale[:, None], (obs - rest) * scale, bounds=(lo, hi))
        c.update({k: float(v) for k, v in zip(FIT_KEYS, sol.x, strict=True)})
    evals = evals_fn(c)
    ratio = np.array([e.cfg.published_step_time_s / e.step3[0] for e in evals])
    q = np.quantile(ratio, RESIDUAL_QUANTILES)
    c["residual_ratio_quantiles"] = [float(min(q[0], 1.0)), float(max(q[1], 1.0))]
    return c


# ----------------------------------------------------------------------- validation
@dataclass
class Context:
    """Catalog + per-GPU hardware cache for a validation run."""

    catalog: Catalog
    hardware: Callable[[str], Hardware]


def row_hardware(ctx: Context, cfg: RowConfig) -> Hardware:
    """The row's GPU, with the scale-out bandwidth the publication states where it does."""
    hw = ctx.hardware(cfg.gpu)
    if cfg.inter_node_bandwidth_bytes_per_s:
        hw = dataclasses.replace(
            hw, inter_node_bandwidth_bytes_per_s=cfg.inter_node_bandwidth_bytes_per_s
        )
    return hw


def default_context(artifact: JSONDict | str | None = None) -> Context:
    from gpuplan.catalogs import get_catalog

    cache: dict[str, Hardware] = {}

    def hardware(gpu: str) -> Hardware:
        if gpu not in cache:
            cache[gpu] = resolve_hardware(gpu, artifact=artifact)
        return cache[gpu]

    return Context(catalog=get_catalog(), hardware=hardware)


# ------------------------------------------------------------- records of the result
class RowResult(TypedDict):
    """One forecast row of :func:`validate` (``rows``)."""

    run_id: str
    source: str
    group: str
    framework: str
    profile: str
    profile_basis: str
    metric: str
    published: float
    forecast: float
    interval: list[float]
    error: float
    abs_error: float
    in_interval: bool
    layout: dict[str, int]
    searched: list[str]
    layout_fits_in_memory: bool
    constants_fitted_without: str


class RowFailure(TypedDict):
    """A row that was not forecast, and why (``incomplete``, ``failed``)."""

    run_id: str
    source: str
    reason: str


class Stats(TypedDict):
    """The error figures of a set of rows (:func:`_stats`)."""

    rows: int
    rows_complete: int
    rows_forecast: int
    coverage: float | None
    median_abs_error: float | None
    p90_abs_error: float | None
    bias: float | None
    interval_coverage: float | None
    metrics: list[str]


class ProfileStats(Stats):
    """``per_profile``: the figures of a framework profile and what it covers."""

    frameworks: list[str]
    publications: list[str]
    own_constants: bool
    profile_basis: list[str]


class ProfileFit(TypedDict):
    """The constants one profile is forecast with (:func:`fit_profiles`)."""

    constants: dict[str, object]
    rows: int
    basis: str
    publications: list[str]


class ValidationConstants(TypedDict):
    shipped: dict[str, object]
    folds: dict[str, dict[str, dict[str, object]]]
    """held-out publication -> profile -> its basis and fitted constants"""


class TrainingValidation(TypedDict):
    """The JSON of ``gpuplan validate training`` (:func:`validate`)."""

    scheme: str
    overall: Stats
    per_source: dict[str, Stats]
    per_group: dict[str, Stats]
    per_profile: dict[str, ProfileStats]
    rows: list[RowResult]
    incomplete: list[RowFailure]
    failed: list[RowFailure]
    constants: ValidationConstants


def _object(value: object, what: str) -> Mapping[str, object]:
    """``value`` as a JSON object (``what`` names it in the error)."""
    if isinstance(value, dict):
        return value
    raise SchemaError(f"training constants: {what} must be an object, not {value!r}")


def _row_result(
    e: RowEval, constants: Constants, held_out_from: str, profile_basis: str = ""
) -> RowResult:
    cfg = e.cfg
    r_lo, r_hi = constant_list(constants, "residual_ratio_quantiles", [1.0, 1.0])
    step = float(e.step3[0])
    lo_s, hi_s = min(e.step3[1] * r_lo, step), max(e.step3[2] * r_hi, step)
    pred = _to_metric(cfg, step)
    band = sorted([_to_metric(cfg, lo_s), _to_metric(cfg, hi_s)])
    err = (pred - cfg.published) / cfg.published
    return {
        "run_id": cfg.run_id,
        "source": cfg.source,
        "group": cfg.group,
        "framework": cfg.framework_name,
        "profile": cfg.profile,
        "profile_basis": profile_basis,
        "metric": cfg.metric,
        "published": cfg.published,
        "forecast": pred,
        "interval": band,
        "error": err,
        "abs_error": abs(err),
        "in_interval": bool(band[0] <= cfg.published <= band[1]),
        "layout": e.layout,
        "searched": cfg.searched,
        "layout_fits_in_memory": e.fits,
        "constants_fitted_without": held_out_from,
    }


def _stats(rows: list[RowResult], n_complete: int, n_total: int) -> Stats:
    abs_err = np.array([r["abs_error"] for r in rows]) if rows else np.array([])
    err = np.array([r["error"] for r in rows]) if rows else np.array([])
    inside = np.array([r["in_interval"] for r in rows]) if rows else np.array([])
    return {
        "rows": n_total,
        "rows_complete": n_complete,
        "rows_forecast": len(rows),
        "coverage": len(rows) / n_complete if n_complete else None,
        "median_abs_error": float(np.median(abs_err)) if rows else None,
        "p90_abs_error": float(np.quantile(abs_err, 0.9)) if rows else None,
        "bias": float(np.mean(err)) if rows else None,
        "interval_coverage": float(np.mean(inside)) if rows else None,
        "metrics": sorted({r["metric"] for r in rows}),
    }


def validate(
    *,
    data: FilePath | None = None,
    artifact: JSONDict | str | None = None,
    scheme: str = "leave-one-source-out",
    context: Context | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainingValidation:
    """Forecast every published row with a complete configuration and report the error.

    Held out (the default scheme), each publication's rows are forecast with the constants
    of their framework profile fitted without that publication (:func:`fit_profiles`: the
    profile's own fit where the other publications give it at least
    :data:`MIN_PROFILE_ROWS` rows, else the pooled fit); each row says which
    (``profile_basis``).

    Returns ``{"scheme", "overall", "per_source", "per_group", "per_profile", "rows",
    "incomplete", "constants"}``; ``overall`` has coverage, median/p90 absolute percentage
    error (fractions), signed bias (mean signed error), interval coverage.
    """
    if scheme not in ("leave-one-source-out", "shipped"):
        raise InputError(f"unknown scheme {scheme!r}", hint="use leave-one-source-out or shipped")
    ctx = context or default_context(artifact)
    rows = load_rows(data)
    cfgs = [row_config(r, ctx.catalog) for r in rows]
    complete = [c for c in cfgs if c.complete]
    incomplete: list[RowFailure] = [
        {"run_id": c.run_id, "source": c.source, "reason": c.reason} for c in cfgs if not c.complete
    ]
    shipped: JSONDict = default_constants()
    layouts: dict[str, dict[str, int]] = {}
    failures: list[RowFailure] = []

    def evals_for(subset: Iterable[RowConfig], constants: Constants) -> list[RowEval]:
        out = []
        for cfg in subset:
            lay = layouts.get(cfg.run_id)
            if lay is None:
                continue  # its layout could not be built (recorded in failures)
            try:
                e = evaluate_row(cfg, row_hardware(ctx, cfg), constants, lay)
            except InputError as exc:
                failures.append(
                    {"run_id": cfg.run_id, "source": cfg.source, "reason": exc.one_line()}
                )
                continue
            layouts[cfg.run_id] = e.layout
            out.append(e)
        return out

    # The searched pieces (micro-batch, interleaving) are chosen once, under the physical
    # model without fitted constants (neutral_constants), so that the layout of a held-out
    # row owes nothing to a fit that saw it.
    choose_layouts(complete, ctx, layouts, failures)
    base = evals_for(complete, shipped)
    ok_ids = {e.cfg.run_id for e in base}
    complete_ok = [c for c in complete if c.run_id in ok_ids]
    results: list[RowResult] = []
    fold_constants: dict[str, dict[str, dict[str, object]]] = {}
    if scheme == "shipped":
        for e in base:
            c, basis = shipped_profile_constants(shipped, e.cfg.profile)
            ev = evaluate_row(e.cfg, row_hardware(ctx, e.cfg), c, e.layout)
            results.append(_row_result(ev, c, "none (in-sample)", basis))
    else:
        groups = sorted({c.group for c in complete_ok})
        for g in groups:
            if progress:
                progress(g)
            train = [c for c in complete_ok if c.group != g]
            test = [c for c in complete_ok if c.group == g]
            fits = fit_profiles(train, evals_for, shipped, {c.profile for c in test})
            fold_constants[g] = {
                p: {
                    "basis": f["basis"],
                    **{k: f["constants"][k] for k in PROFILE_FIT_KEYS},
                }
                for p, f in fits.items()
            }
            for prof in sorted(fits):
                f = fits[prof]
                test_p = [c for c in test if c.profile == prof]
                results.extend(
                    _row_result(e, f["constants"], g, f["basis"])
                    for e in evals_for(test_p, f["constants"])
                )
    results.sort(key=lambda r: r["run_id"])
    n_total = len(rows)
    per_profile: dict[str, ProfileStats] = {}
    for prof in sorted({c.profile for c in cfgs}):
        prof_rows = [r for r in results if r["profile"] == prof]
        stats = _stats(
            prof_rows,
            sum(1 for c in complete if c.profile == prof),
            sum(1 for c in cfgs if c.profile == prof),
        )
        per_profile[prof] = {
            **stats,
            "frameworks": sorted({c.framework_name for c in cfgs if c.profile == prof}),
            "publications": sorted({c.group for c in cfgs if c.profile == prof}),
            "own_constants": stats["rows_forecast"] >= MIN_PROFILE_ROWS,
            "profile_basis": sorted({r["profile_basis"] for r in prof_rows}),
        }
    by_source: dict[str, dict[str, Stats]] = {}
    keys: tuple[tuple[str, Callable[[RowConfig], str]], ...] = (
        ("per_source", lambda c: str(c.source)),
        ("per_group", lambda c: str(c.group)),
    )
    for key_name, key_fn in keys:
        table: dict[str, Stats] = {}
        for k in sorted({key_fn(c) for c in cfgs}):
            sub = [r for r in results if key_fn_row(r, key_name) == k]
            table[k] = _stats(
                sub,
                sum(1 for c in complete if key_fn(c) == k),
                sum(1 for c in cfgs if key_fn(c) == k),
            )
        by_source[key_name] = table
    return {
        "scheme": scheme,
        "overall": _stats(results, len(complete), n_total),
        "per_source": by_source["per_source"],
        "per_group": by_source["per_group"],
        "per_profile": per_profile,
        "rows": results,
        "incomplete": incomplete,
        "failed": failures,
        "constants": {
            "shipped": {k: shipped[k] for k in (*FIT_KEYS, "residual_ratio_quantiles")},
            "folds": fold_constants,
        },
    }


def fit_profiles(
    train: list[RowConfig],
    evals_for: Callable[[Iterable[RowConfig], Constants], list[RowEval]],
    start: Constants,
    profiles: Iterable[str],
) -> dict[str, ProfileFit]:
    """The constants each framework profile in ``profiles`` is forecast with, fitted on ``train``.

    The pooled constants are fitted on every row of ``train`` (:func:`fit_constants`); a
    profile with at least :data:`MIN_PROFILE_ROWS` rows of its own in ``train`` gets the
    same bounded least squares on those rows only (started from the pooled solution),
    and the residual band of its own rows. Returns ``{profile: {"constants", "rows",
    "basis", "publications"}}``, plus ``"(pooled)"``.
    """

    def evals(subset: list[RowConfig]) -> Callable[[Constants], list[RowEval]]:
        return lambda c: evals_for(subset, c)

    pooled = fit_constants(evals(train), start)
    out: dict[str, ProfileFit] = {
        "(pooled)": {
            "constants": pooled,
            "rows": len(train),
            "basis": f"pooled ({len(train)} rows)",
            "publications": sorted({c.group for c in train}),
        }
    }
    for prof in sorted(set(profiles)):
        sub = [c for c in train if c.profile == prof]
        publications = sorted({c.group for c in sub})
        if len(sub) >= MIN_PROFILE_ROWS:
            constants = fit_constants(evals(sub), pooled)
            basis = f"fitted ({len(sub)} rows)"
        else:
            constants = pooled
            basis = f"pooled ({len(sub)} rows < {MIN_PROFILE_ROWS})"
        out[prof] = {
            "rows": len(sub),
            "publications": publications,
            "constants": constants,
            "basis": basis,
        }
    return out


def shipped_profile_constants(shipped: Constants, profile: str) -> tuple[dict[str, object], str]:
    """The shipped constants of ``profile`` (its fitted section, or the pooled ones)."""
    from gpuplan.forecast.training import profile_constants

    return profile_constants(shipped, profile)


def key_fn_row(r: RowResult, key_name: str) -> str:
    return str(r["source"] if key_name == "per_source" else r["group"])


def neutral_constants() -> JSONDict:
    """The shipped constants with every fitted factor at its neutral value (1, or 0 s)."""
    c: JSONDict = default_constants()
    c.update({k: FIT_BOUNDS[k][0] for k in FIT_KEYS})
    c["residual_ratio_quantiles"] = [1.0, 1.0]
    return c


def choose_layouts(
    cfgs: Iterable[RowConfig],
    ctx: Context,
    layouts: dict[str, dict[str, int]],
    failures: list[RowFailure],
) -> None:
    """Fill ``layouts`` with each row's layout, searched pieces chosen without fitted constants."""
    neutral = neutral_constants()
    for cfg in cfgs:
        try:
            layouts[cfg.run_id] = _choose_layout(cfg, row_hardware(ctx, cfg), neutral)
        except InputError as exc:
            failures.append({"run_id": cfg.run_id, "source": cfg.source, "reason": exc.one_line()})


def fit_shipped_constants(
    *,
    data: FilePath | None = None,
    artifact: JSONDict | str | None = None,
    context: Context | None = None,
) -> dict[str, object]:
    """Fit the constants on every complete row (what ships in training_constants.json).

    The pooled constants are fitted on all rows; ``profiles`` holds each framework
    profile's own fit on its rows (:func:`fit_profiles`), or only its row count where it
    has fewer than :data:`MIN_PROFILE_ROWS`.
    """
    ctx = context or default_context(artifact)
    rows = load_rows(data)
    complete = [c for c in (row_config(r, ctx.catalog) for r in rows) if c.complete]
    start: JSONDict = default_constants()
    layouts: dict[str, dict[str, int]] = {}
    choose_layouts(complete, ctx, layouts, [])

    def evals_for(subset: Iterable[RowConfig], c: Constants) -> list[RowEval]:
        out = []
        for cfg in subset:
            try:
                e = evaluate_row(cfg, row_hardware(ctx, cfg), c, layouts.get(cfg.run_id))
            except InputError:
                continue
            layouts[cfg.run_id] = e.layout
            out.append(e)
        return out

    ok = {e.cfg.run_id for e in evals_for(complete, start)}
    train = [c for c in complete if c.run_id in ok]
    fits = fit_profiles(train, evals_for, start, {c.profile for c in train})
    pooled = dict(fits.pop("(pooled)")["constants"])
    profiles: dict[str, object] = {}
    for prof, f in fits.items():
        entry: dict[str, object] = {
            "rows": f["rows"],
            "frameworks": sorted({c.framework_name for c in train if c.profile == prof}),
            "sources": f["publications"],
            "basis": f["basis"],
        }
        if f["rows"] >= MIN_PROFILE_ROWS:
            entry.update({k: f["constants"][k] for k in PROFILE_FIT_KEYS})
        profiles[prof] = entry
    pooled["profiles"] = profiles
    return pooled


def write_constants(path: FilePath, constants: Constants, *, data: FilePath | None = None) -> None:
    """Write fitted constants as JSON with their provenance (atomic replace)."""
    import datetime as _dt
    import hashlib
    import json
    from pathlib import Path

    from gpuplan.fsio import write_atomic

    if data is None:
        text = (
            resources.files("gpuplan.forecast")
            .joinpath("data")
            .joinpath("training_runs.csv")
            .read_bytes()
        )
    else:
        text = Path(data).read_bytes()
    # keep the sourced tables (attention kernels, overhead)
    out: dict[str, object] = dict(default_constants())
    out.update({k: constants[k] for k in (*FIT_KEYS, "residual_ratio_quantiles")})
    today = _dt.date.today().isoformat()
    if "profiles" in constants:
        out["profiles"] = {
            p: {**_object(entry, f"profiles.{p}"), "fitted_at": today}
            for p, entry in sorted(_object(constants["profiles"], "profiles").items())
        }
        out["profiles_note"] = (
            "per framework profile: the same bounded least squares (fit_constants) on that "
            f"profile's rows only, where it has >= {MIN_PROFILE_ROWS}; other profiles use the "
            "pooled top-level constants (forecast train says profile_basis). NeMo shares the "
            "megatron profile: it trains through Megatron-core."
        )
    out["provenance"] = {
        "method": "bounded linear least squares on relative step-time error, every publication "
        "weighted equally, 4 refits (gpuplan.forecast.validation_training.fit_constants); "
        f"residual band = {RESIDUAL_QUANTILES} quantiles of published/forecast step time",
        "fitted_on": "every row of training_runs.csv with a complete configuration "
        "(in-sample: 'gpuplan validate training' reports leave-one-source-out error instead)",
        "training_data_sha256": hashlib.sha256(text).hexdigest(),
        "fitted_at": today,
        "calibration": "default shipped artifact",
    }
    write_atomic(Path(path), json.dumps(out, indent=2) + "\n", make_parents=False)
