"""The training layout validity rules, written once.

Job of this module: say whether a training parallel layout (``tp``, ``pp``, ``cp``, ``ep``,
``dp``, ``vp``, ``micro_batch``, ``recompute``, ``zero``) can run a model on ``num_gpus``
GPUs, and if not, which rule it breaks. The same rule predicates serve three callers:

* :func:`gpuplan.forecast.training.check_layout` (a fully given layout, one error),
* ``gpuplan.forecast.search._check_partial`` (the dimensions a user fixed before a search),
* :func:`gpuplan.forecast.search.enumerate_layouts` (a numpy array per field, one verdict
  per candidate, through :func:`valid_layout_mask`).

A rule is checked when every field it reads is given, so a partial layout is held to the
rules its fixed fields decide alone. Search *preferences* (which candidates are worth
trying, e.g. ZeRO-2 with pipelining only when asked) are not validity rules and stay in
``search.py``. Pure: numpy and the pipeline split of :mod:`gpuplan.forecast.memory`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import SupportsInt, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from gpuplan.errors import InputError
from gpuplan.forecast.memory import RECOMPUTE_NAMES, stage_layers, valid_pipeline
from gpuplan.forecast.model import ModelArch
from gpuplan.numeric import BoolArray, Int, IntArray

#: Layout fields that count GPUs or micro-batches and must be at least 1.
POSITIVE_FIELDS = ("tp", "pp", "cp", "ep", "dp", "vp", "micro_batch")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Violation:
    """The first rule a layout breaks."""

    rule: str
    """Short rule name (stable, for tests and logs)."""
    message: str
    """What is wrong, naming the flag and its value."""
    hint: str | None
    """What to change."""

    def error(self) -> InputError:
        """This violation as the domain error the CLI prints on one line."""
        return InputError(self.message, hint=self.hint)


@dataclass(frozen=True)
class _Ctx:
    arch: ModelArch
    num_gpus: int
    seq_len: int | None
    global_batch: int | None


Fields: TypeAlias = Mapping[str, Int]
"""Layout fields: integers (one layout) or equally long integer arrays (the search grid)."""
Verdict: TypeAlias = np.bool_ | BoolArray
"""A rule's verdict: one (numpy) bool, or one per candidate."""
_S = TypeVar("_S", bound=np.generic)


@dataclass(frozen=True)
class _Rule:
    name: str
    needs: tuple[str, ...]
    ok: Callable[[Fields, _Ctx], Verdict]
    message: Callable[[Fields, _Ctx], tuple[str, str | None]]
    moe: bool | None = None  # None: every model; True/False: MoE models only / dense only


def _i(x: Int) -> npt.NDArray[np.int64]:
    return np.asarray(x, dtype=np.int64)


def _pos(x: Int) -> IntArray:
    """``x`` with values below 1 replaced by 1, so a modulo never divides by zero (the
    ``positive`` rule has already rejected such layouts)."""
    return np.maximum(_i(x), 1)


def _member(x: Int, allowed: Iterable[int]) -> BoolArray:
    """``x`` is one of the few ``allowed`` codes (cheaper than ``np.isin`` for a handful)."""
    x = _i(x)
    ok: BoolArray = np.zeros(x.shape, dtype=bool)
    for value in allowed:
        ok = ok | (x == value)
    return ok


def nearest_pipelines(arch: ModelArch, pp: int) -> str:
    """The valid pipeline sizes nearest ``pp`` below and above, for messages: ``'60 or 61'``."""
    below = [p for p in range(min(int(pp), arch.layers), 0, -1) if bool(valid_pipeline(arch, p))]
    above = [p for p in range(max(int(pp), 1), arch.layers + 1) if bool(valid_pipeline(arch, p))]
    near = sorted({x for x in (below[:1] + above[:1]) if x != pp})
    return " or ".join(str(x) for x in near) or "1"


def _positive_ok(v: Fields, c: _Ctx) -> Verdict:
    ok: Verdict = np.bool_(True)
    for k in POSITIVE_FIELDS:
        if k in v:
            ok = ok & (_i(v[k]) >= 1)
    return ok


def _positive_msg(v: Fields, c: _Ctx) -> tuple[str, str | None]:
    key = next(k for k in POSITIVE_FIELDS if k in v and int(v[k]) < 1)
    return f"--{key.replace('_', '-')} must be >= 1, got {v[key]}", None


def _product_ok(v: Fields, c: _Ctx) -> Verdict:
    # the given ones of tp, pp, cp, dp divide the GPU count (the searched ones make up the
    # rest); all four given, they multiply to it
    prod = np.int64(1)
    for k in ("tp", "pp", "cp", "dp"):
        prod = prod * _pos(v.get(k, 1))
    # (numpy's stubs leave ``==`` on arrays untyped: the verdicts are annotated here)
    ok: Verdict
    if all(k in v for k in ("tp", "pp", "cp", "dp")):
        ok = prod == c.num_gpus
    else:
        ok = c.num_gpus % prod == 0
    return ok


def _product_msg(v: Fields, c: _Ctx) -> tuple[str, str | None]:
    tp, pp, cp, dp = (int(v.get(k, 1)) for k in ("tp", "pp", "cp", "dp"))
    prod = tp * pp * cp * dp
    if c.num_gpus % prod == 0:  # all four given, dividing the count but not making it up
        return (
            f"parallelism does not multiply to the GPU count: tp {tp} x pp {pp} x cp {cp} x "
            f"dp {dp} = {prod}, but --gpus is {c.num_gpus}",
            "choose --tp/--pp/--cp so that their product divides --gpus, or leave one "
            "out to have it searched",
        )
    return (
        f"parallelism does not divide the GPU count: tp {tp} x pp {pp} x cp {cp}"
        + (f" x dp {dp}" if "dp" in v else "")
        + f" = {prod} does not divide --gpus {c.num_gpus}",
        "choose sizes whose product divides --gpus",
    )


def _by_stage_count(pp: Int, fn: Callable[[IntArray], npt.NDArray[_S]]) -> npt.NDArray[_S]:
    """``fn`` of each distinct pipeline size, spread back over the candidates (a search
    has many candidates but few pipeline sizes, and the split is the costly part)."""
    values, inverse = np.unique(_i(pp), return_inverse=True)
    return np.asarray(fn(values))[inverse].reshape(np.shape(pp))


def _pipeline_ok(v: Fields, c: _Ctx) -> Verdict:
    return _by_stage_count(v["pp"], lambda p: valid_pipeline(c.arch, p))


def _vp_divides_ok(v: Fields, c: _Ctx) -> Verdict:
    def layers_per_stage(p: IntArray) -> npt.NDArray[np.float64]:
        p = np.maximum(p, 1)
        return np.where(valid_pipeline(c.arch, p), stage_layers(c.arch, p)[0], 1)

    lps = _by_stage_count(v["pp"], layers_per_stage).astype(np.int64)
    ok: Verdict = lps % _pos(v["vp"]) == 0
    return ok


def _vp_divides_msg(v: Fields, c: _Ctx) -> tuple[str, str | None]:
    lps = int(stage_layers(c.arch, int(v["pp"]))[0])
    return (
        f"layers per stage ({lps}) are not divisible by --vp {v['vp']}",
        "use a virtual-stage count that divides layers/pp, or --vp 1",
    )


def _ep_groups_ok(v: Fields, c: _Ctx) -> Verdict:
    # experts over the data-parallel ranks, or folded into the TP ranks as well
    tp, cp, ep, dp = (_pos(v[k]) for k in ("tp", "cp", "ep", "dp"))
    ok: Verdict = ((dp * cp) % ep == 0) | (((tp * dp * cp) % ep == 0) & (ep > dp * cp))
    return ok


def _ep_groups_msg(v: Fields, c: _Ctx) -> tuple[str, str | None]:
    tp, cp, ep, dp = (int(v[k]) for k in ("tp", "cp", "ep", "dp"))
    return (
        f"--ep {ep} must divide dp x cp = {dp * cp}, or be a multiple of it dividing "
        f"tp x dp x cp = {tp * dp * cp} (experts folded into the TP ranks)",
        "choose --ep dividing the data-parallel size",
    )


def _batch_ok(v: Fields, c: _Ctx) -> Verdict:
    local = _i(v["dp"]) * _i(v["micro_batch"])
    ok: Verdict = (local > 0) & (int(c.global_batch or 0) % np.maximum(local, 1) == 0)
    return ok


def _batch_msg(v: Fields, c: _Ctx) -> tuple[str, str | None]:
    return (
        f"global batch ({c.global_batch} sequences) is not divisible by dp {v['dp']} x "
        f"micro-batch {v['micro_batch']}",
        "change --global-batch, --micro-batch or the layout",
    )


# In the order a user reads them: the first broken one is reported.
RULES: tuple[_Rule, ...] = (
    _Rule("positive", (), _positive_ok, _positive_msg),
    _Rule("gpu_count", (), _product_ok, _product_msg),
    _Rule(
        "tp_heads",
        ("tp",),
        lambda v, c: c.arch.heads % _pos(v["tp"]) == 0,
        lambda v, c: (
            f"attention heads ({c.arch.heads}) are not divisible by --tp {v['tp']}",
            "use a TP size that divides the number of heads",
        ),
    ),
    _Rule(
        "pipeline_split",
        ("pp",),
        _pipeline_ok,
        lambda v, c: (
            f"{c.arch.layers} layers cannot be split over --pp {v['pp']} pipeline stages "
            "(every stage needs a layer)",
            f"use --pp {nearest_pipelines(c.arch, int(v['pp']))}",
        ),
    ),
    _Rule("vp_divides_stage", ("pp", "vp"), _vp_divides_ok, _vp_divides_msg),
    _Rule(
        "vp_needs_pp",
        ("pp", "vp"),
        lambda v, c: (_i(v["vp"]) == 1) | (_i(v["pp"]) > 1),
        lambda v, c: ("--vp > 1 (interleaved stages) needs --pp > 1", "use --vp 1"),
    ),
    _Rule(
        "cp_seq_len",
        ("cp", "seq_len"),
        lambda v, c: int(c.seq_len or 0) % _pos(v["cp"]) == 0,
        lambda v, c: (
            f"sequence length {c.seq_len} is not divisible by --cp {v['cp']}",
            "use a context-parallel size that divides --seq-len",
        ),
    ),
    _Rule(
        "ep_experts",
        ("ep",),
        lambda v, c: c.arch.num_experts % _pos(v["ep"]) == 0,
        lambda v, c: (
            f"experts ({c.arch.num_experts}) are not divisible by --ep {v['ep']}",
            "use an EP size that divides the number of experts",
        ),
        moe=True,
    ),
    _Rule("ep_groups", ("tp", "cp", "ep", "dp"), _ep_groups_ok, _ep_groups_msg, moe=True),
    _Rule(
        "ep_dense",
        ("ep",),
        lambda v, c: _i(v["ep"]) == 1,
        lambda v, c: (f"--ep {v['ep']} needs a mixture-of-experts model", "use --ep 1"),
        moe=False,
    ),
    _Rule("global_batch", ("dp", "micro_batch", "global_batch"), _batch_ok, _batch_msg),
    _Rule(
        "zero_stage",
        ("zero",),
        lambda v, c: _member(v["zero"], ZERO_STAGES),
        lambda v, c: (f"--zero must be 0, 1, 2 or 3, got {v['zero']}", None),
    ),
    _Rule(
        # ZeRO-2 with pipelining is what FSDP without resharding after the forward gives
        # (Llama 3, Dubey et al. 2024 section 3.3.2; torchtitan FSDP2 + PP); ZeRO-3 would
        # re-gather every stage's weights for every micro-batch.
        "zero3_pipeline",
        ("zero", "pp"),
        lambda v, c: (_i(v["zero"]) < 3) | (_i(v["pp"]) == 1),
        lambda v, c: (
            f"ZeRO stage 3 with pipeline parallelism (--pp {v['pp']}) is not supported "
            "by Megatron-LM or DeepSpeed",
            "use --zero 0, 1 or 2 with --pp > 1 (FSDP2 with pipeline stages, as torchtitan "
            "runs it, is --zero 2)",
        ),
    ),
    _Rule(
        "recompute",
        ("recompute",),
        lambda v, c: _member(v["recompute"], RECOMPUTE_NAMES),
        lambda v, c: ("--recompute must be none, selective or full", None),
    ),
)


def _applicable(
    arch: ModelArch, fields: Fields, seq_len: int | None, global_batch: int | None
) -> list[_Rule]:
    have = set(fields)
    if seq_len is not None:
        have.add("seq_len")
    if global_batch is not None:
        have.add("global_batch")
    return [
        r
        for r in RULES
        if (r.moe is None or r.moe == arch.is_moe) and all(k in have for k in r.needs)
    ]


def layout_violation(
    arch: ModelArch,
    num_gpus: int,
    layout: Mapping[str, SupportsInt | None],
    *,
    seq_len: int | None = None,
    global_batch: int | None = None,
) -> Violation | None:
    """The first rule ``layout`` breaks on ``num_gpus`` GPUs, or ``None`` when it breaks none.

    Parameters
    ----------
    arch:
        The model.
    num_gpus:
        GPUs in the job.
    layout:
        Some or all of ``tp, pp, cp, ep, dp, vp, micro_batch, recompute, zero`` as integers
        (``None`` values count as not given). Only the rules whose fields are all given are
        checked.
    seq_len:
        Sequence length in tokens; ``None`` skips the context-parallel rule.
    global_batch:
        Sequences per optimizer step; ``None`` skips the batch-divisibility rule.

    >>> arch = ModelArch(layers=32, hidden=4096, heads=32, ffn_hidden=11008, vocab=32000)
    >>> layout_violation(arch, 8, {"tp": 3}).rule
    'gpu_count'
    >>> layout_violation(arch, 8, {"tp": 8, "pp": 1, "cp": 1, "dp": 1}) is None
    True
    """
    fields = {k: int(v) for k, v in layout.items() if v is not None}
    ctx = _Ctx(arch, int(num_gpus), seq_len, global_batch)
    for rule in _applicable(arch, fields, seq_len, global_batch):
        if not bool(rule.ok(fields, ctx)):
            message, hint = rule.message(fields, ctx)
            return Violation(rule.name, message, hint)
    return None


def valid_layout_mask(
    arch: ModelArch,
    num_gpus: int,
    layouts: Mapping[str, npt.ArrayLike],
    *,
    seq_len: int | None = None,
    global_batch: int | None = None,
) -> BoolArray:
    """Vectorised :func:`layout_violation`: ``True`` where a candidate breaks no rule.

    ``layouts`` maps field names to equally long integer arrays (one element per
    candidate); the rules and their field requirements are those of
    :func:`layout_violation`, so the verdicts are the same, candidate by candidate.
    """
    fields = {k: np.asarray(v, dtype=np.int64) for k, v in layouts.items()}
    n = len(next(iter(fields.values()))) if fields else 1
    ctx = _Ctx(arch, int(num_gpus), seq_len, global_batch)
    ok = np.ones(n, dtype=bool)
    for rule in _applicable(arch, fields, seq_len, global_batch):
        ok &= np.broadcast_to(np.asarray(rule.ok(fields, ctx), dtype=bool), ok.shape)
    return ok
