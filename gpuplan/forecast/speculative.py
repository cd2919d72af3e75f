"""Speculative decoding in serving: a draft proposes tokens, the target verifies them in one
pass (Leviathan, Kalman and Matias 2023, arXiv 2211.17192; Chen et al. 2023, arXiv
2302.01318).

One step of a sequence runs ``k`` draft passes of the draft head (DeepSeek's multi-token
prediction module, arXiv 2412.19437 section 2.2, or an EAGLE head, Li et al. 2024, arXiv
2401.15077: one transformer layer on the target's hidden state, reused for each draft token)
and one verification pass of the target over ``k + 1`` query tokens, and emits ``tau``
tokens on average (``1 <= tau <= k + 1``, the acceptance length the engines log). The
verification pass is a decode pass whose GEMMs see ``k + 1`` rows per sequence and whose
attention runs ``k + 1`` queries over one read of the sequence's KV cache; each draft pass
costs ``draft_layers / layers`` of a one-token decode pass of the target plus the rest of
its output projection, since a head's pass ends in the whole LM head (the MTP module and
EAGLE share the target's; EAGLE-3's 32K-token draft vocabulary makes its own about a
quarter of a Llama 3 head: priced as the whole one)
(:meth:`gpuplan.forecast.inference_step.StepCostModel.time`).

A draft tree (SGLang's EAGLE ``--speculative-eagle-topk W --speculative-num-draft-tokens N``;
Li et al. 2024, arXiv 2406.16858, EAGLE-2) keeps ``W`` tokens per sequence at every draft
step after the first, so those passes run ``W`` rows per sequence (their attention ``W``
queries over one read of the context), and verifies ``N`` of the tree's tokens in one pass
(tree attention: ``N`` queries over one read); a step still emits at most ``k + 1``.

With a separate draft model (``draft_model``: a small model of the target's vocabulary, vLLM's
``draft_model`` method, TensorRT-LLM's draft-target), each draft pass is a decode pass of that
model over the same rows and context, on the replica's GPUs at its tensor parallelism; the
draft model also runs over every prompt to build its own KV cache, and its weights and KV
cache take memory from the target's (:func:`draft_sharded`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from scipy.optimize import brentq

from gpuplan.errors import InputError
from gpuplan.forecast.inference_arch import Layout, Sharded, shard
from gpuplan.forecast.model import ModelArch, arch_from
from gpuplan.numeric import JSONDict

SPECULATIVE_PATH = Path(__file__).parent / "data" / "speculative.yaml"


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding of one replica.

    Attributes
    ----------
    draft_tokens:
        ``k``: tokens the draft proposes per step (SGLang ``--speculative-num-steps``,
        vLLM ``num_speculative_tokens``, TensorRT-LLM ``num_nextn_predict_layers``).
    acceptance_length:
        ``tau``: tokens a verification step emits on average, the bonus token included.
    draft_layers:
        The draft head's depth in target layers (1 for an MTP or EAGLE head); unused with a
        ``draft_model``.
    basis:
        Where ``tau`` comes from (the user, or :func:`default_acceptance_length`'s sources).
    draft_model:
        A separate draft model (its architecture), or None for a draft head.
    tree_width:
        Draft tokens kept per sequence at each draft step after the first (SGLang
        ``--speculative-eagle-topk``; 1: a chain, as vLLM and TensorRT-LLM draft).
    verify_tokens:
        Tokens per sequence the verification pass checks (SGLang
        ``--speculative-num-draft-tokens``; None: ``k + 1``, the chain and its bonus).
    """

    draft_tokens: int
    acceptance_length: float
    draft_layers: float = 1.0
    basis: str = "given"
    draft_model: ModelArch | None = None
    tree_width: int = 1
    verify_tokens: int | None = None

    @property
    def queries(self) -> int:
        """Query tokens per sequence in the verification pass."""
        return self.verify_tokens if self.verify_tokens is not None else self.draft_tokens + 1

    def head_share(self, layers: int) -> float:
        """One pass of a draft head as a share of a one-token decode pass of a target of
        ``layers`` layers, its LM head aside: ``draft_layers / layers``. A head's pass also
        ends in the whole output projection (DeepSeek's MTP module and EAGLE share the
        target's), priced whole (:func:`gpuplan.forecast.inference_step.lm_head_time`).
        0 with a separate draft model, whose passes are its own."""
        if self.draft_model is not None:
            return 0.0
        return min(self.draft_layers / max(layers, 1), 1.0)

    def describe(self) -> str:
        """One phrase for notes and ledgers.

        >>> Speculation(3, 2.5).describe()
        '3 draft tokens emitting 2.50 tokens per step'
        """
        out = f"{self.draft_tokens} draft tokens"
        if self.draft_model is not None:
            out += f" from {self.draft_model.name}"
        if self.tree_width > 1:
            out += f" in a tree {self.tree_width} wide, {self.queries} verified per sequence,"
        return out + f" emitting {self.acceptance_length:.2f} tokens per step"

    def as_dict(self) -> JSONDict:
        out: JSONDict = {
            "draft_tokens": self.draft_tokens,
            "acceptance_length": self.acceptance_length,
            "draft_layers": self.draft_layers if self.draft_model is None else None,
            "acceptance_basis": self.basis,
        }
        if self.draft_model is not None:
            out["draft_model"] = self.draft_model.name
        if self.tree_width > 1 or self.verify_tokens is not None:
            out["tree_width"] = self.tree_width
            out["verify_tokens"] = self.queries
        return out


def draft_sharded(target: Sharded, spec: Speculation | None) -> Sharded | None:
    """The separate draft model of ``spec`` split as the engines run it beside ``target``:
    the target's tensor parallelism when the draft's heads divide by it, else on one GPU
    (vLLM ``draft_tensor_parallel_size``, which takes the target's or 1), no pipeline or
    expert parallelism, at the target's precision. None for a draft head."""
    if spec is None or spec.draft_model is None:
        return None
    d = spec.draft_model
    tp = target.layout.tp
    if d.heads % tp:
        tp = 1
    return shard(d, Layout(tp=tp), target.precision)


def acceptance_length(draft_tokens: int, first: float, later: float) -> float:
    """``tau(k) = 1 + first * (1 - later**k) / (1 - later)``: tokens per verification step
    when the first draft token is accepted with probability ``first`` and each later one,
    the earlier accepted, with ``later`` (Leviathan et al. 2023, section 3.1, whose i.i.d.
    case is ``first == later``).

    >>> round(acceptance_length(3, 0.8, 0.8), 4)  # (1 - 0.8**4) / (1 - 0.8)
    2.952
    """
    if draft_tokens <= 0:
        return 1.0
    if abs(1.0 - later) < 1e-12:
        return 1.0 + first * draft_tokens
    return 1.0 + first * (1.0 - later**draft_tokens) / (1.0 - later)


@lru_cache(maxsize=1)
def _mtp_rates() -> tuple[float, float, str]:
    """``(first, later, sources)`` of ``data/speculative.yaml``'s MTP entry: ``later`` solves
    ``tau(long.draft_tokens) = long.acceptance_length``."""
    doc = yaml.safe_load(SPECULATIVE_PATH.read_text())["mtp"]
    first = float(doc["first"])
    k = int(doc["long"]["draft_tokens"])
    tau = float(doc["long"]["acceptance_length"])
    later = float(brentq(lambda r: acceptance_length(k, first, r) - tau, 1e-6, 1.0 - 1e-9))
    sources = f"{doc['first_source'].strip()}; {doc['long']['source'].strip()}"
    return first, later, sources


def default_acceptance_length(draft_tokens: int) -> tuple[float, str]:
    """Acceptance length of a one-layer draft head (DeepSeek MTP reused autoregressively)
    proposing ``draft_tokens`` tokens, from ``data/speculative.yaml``, and its basis."""
    first, later, sources = _mtp_rates()
    tau = acceptance_length(draft_tokens, first, later)
    basis = f"default: first draft token accepted {first:.1%}, each later {later:.1%} ({sources})"
    return tau, basis


def speculation(
    draft_tokens: int | None,
    acceptance: float | None = None,
    draft_layers: float | None = None,
    draft_model: ModelArch | str | None = None,
    tree_width: int | None = None,
    verify_tokens: int | None = None,
) -> Speculation | None:
    """The :class:`Speculation` of ``forecast infer --spec-tokens K [--spec-acceptance TAU]
    [--spec-draft-layers D | --spec-draft-model MODEL] [--spec-tree-width W
    --spec-verify-tokens N]``; None without draft tokens. Bad values raise
    :class:`~gpuplan.errors.InputError`; a draft model that is not in the catalog,
    :class:`~gpuplan.errors.NotFoundError`."""
    given = (acceptance, draft_layers, draft_model, tree_width, verify_tokens)
    if draft_tokens is None or draft_tokens == 0:
        if any(v is not None for v in given):
            raise InputError(
                "--spec-acceptance, --spec-draft-layers, --spec-draft-model, "
                "--spec-tree-width and --spec-verify-tokens need draft tokens",
                hint="add --spec-tokens K (the draft tokens per step)",
            )
        return None
    if draft_tokens < 0 or draft_tokens > 16:
        raise InputError(
            f"--spec-tokens must be between 1 and 16, got {draft_tokens}",
            hint="engines run 1 to 7 draft tokens (SGLang --speculative-num-steps)",
        )
    if draft_model is not None and draft_layers is not None:
        raise InputError(
            "give --spec-draft-layers (a draft head) or --spec-draft-model (a separate draft "
            "model), not both"
        )
    if draft_model is not None and acceptance is None:
        raise InputError(
            "a separate draft model needs --spec-acceptance TAU: how many tokens a step "
            "emits depends on the pair of models and the traffic, and gpuplan has no "
            "published default for it",
            hint="take the mean acceptance length your engine logs for this pair "
            "(vLLM: 1 + accepted / drafts at /metrics; `gpuplan probe --workload serve` "
            "records it)",
        )
    width = 1 if tree_width is None else int(tree_width)
    if not 1 <= width <= 16:
        raise InputError(
            f"--spec-tree-width must be between 1 and 16, got {tree_width}",
            hint="SGLang's --speculative-eagle-topk (1: a chain)",
        )
    widest = 1 + draft_tokens * width  # the root and every kept draft token
    if verify_tokens is not None and not 2 <= verify_tokens <= widest:
        raise InputError(
            f"--spec-verify-tokens must be between 2 and {widest} (1 + {draft_tokens} steps x "
            f"{width} kept per step), got {verify_tokens}",
            hint="SGLang's --speculative-num-draft-tokens",
        )
    if width > 1 and verify_tokens is None:
        raise InputError(
            "a draft tree (--spec-tree-width > 1) needs --spec-verify-tokens N, the tokens "
            "its verification pass checks",
            hint="SGLang's --speculative-num-draft-tokens, e.g. 8 with --speculative-eagle-topk 4",
        )
    if width == 1 and verify_tokens is not None and verify_tokens != draft_tokens + 1:
        raise InputError(
            f"a chain of {draft_tokens} draft tokens verifies {draft_tokens + 1} tokens, "
            f"not {verify_tokens}",
            hint="drop --spec-verify-tokens, or give --spec-tree-width > 1 for a tree",
        )
    if width > 1 and acceptance is None:
        raise InputError(
            "a draft tree needs --spec-acceptance TAU: the default is a chain's",
            hint="take the mean acceptance length SGLang logs ('accept len')",
        )
    layers = 1.0 if draft_layers is None else float(draft_layers)
    if not 0.0 < layers <= 64.0:
        raise InputError(
            f"--spec-draft-layers must be in (0, 64], got {draft_layers}",
            hint="1 for an MTP or EAGLE head",
        )
    if acceptance is None:
        tau, basis = default_acceptance_length(draft_tokens)
    else:
        tau, basis = float(acceptance), "given"
        top = min(draft_tokens + 1, verify_tokens or draft_tokens + 1)
        if not 1.0 <= tau <= top:
            raise InputError(
                f"--spec-acceptance {acceptance} is outside [1, {top}]: a step emits at least "
                f"one token and at most the {top - 1} drafted on one path plus one",
                hint="give the mean acceptance length your engine logs (SGLang 'accept len')",
            )
    arch = arch_from(draft_model) if draft_model is not None else None
    return Speculation(int(draft_tokens), tau, layers, basis, arch, width, verify_tokens)
