"""The parallel layout of a training run, as one typed record.

Job of this module: :class:`ParallelLayout` is the layout a training forecast chose or a
caller fixes (tensor, pipeline, context, expert and data parallel sizes, virtual pipeline
stages, micro-batch, activation recomputation, ZeRO stage / FSDP, the HSDP shard group),
with the rules it must obey written once in :mod:`gpuplan.forecast.layout_rules` (the same
predicates the vectorised layout search applies to thousands of candidates at a time) and
its pipeline split: Megatron-core's uneven first and last stages
(:func:`gpuplan.forecast.memory.pipeline_split`), so a 61-layer model on 16 stages is
``3 + 14 x 4 + 2`` layers. It is the ``parallelism`` object of the training forecast
(DESIGN.md section 3.3; :meth:`to_json` / :meth:`from_json` keep its field names).

Inside the search the layout is a grid (one numpy array per field); this record is the
scalar view the entry points (:mod:`gpuplan.forecast.train`) and the planner read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from gpuplan.forecast.layout_rules import Violation, layout_violation
from gpuplan.forecast.memory import RECOMPUTE_CODES, pipeline_split
from gpuplan.forecast.model import ModelArch


def json_int(value: object, what: str) -> int:
    """An integer field of a training forecast's JSON (``what`` names it in the error)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"training forecast JSON: {what} is not a number")
    return int(value)


class TrainParallelism(TypedDict, total=False):
    """``parallelism`` of a training forecast's JSON (DESIGN.md 3.3; :meth:`ParallelLayout.to_json`);
    ``hsdp_shard_size`` with HSDP."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    micro_batch: int
    recompute: str
    zero: int
    fsdp: bool
    num_microbatches: int
    hsdp_shard_size: int


@dataclass(frozen=True)
class ParallelLayout:
    """One training layout (``parallelism`` of DESIGN.md 3.3)."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    micro_batch: int
    recompute: str
    """``none`` | ``selective`` | ``full``."""
    zero: int
    """ZeRO stage 0-3 (3 = FSDP's full sharding)."""
    fsdp: bool
    num_microbatches: int
    hsdp_shard_size: int | None = None
    """HSDP: GPUs each parameter is sharded over (replicated across the groups)."""

    @property
    def gpus(self) -> int:
        """GPUs the layout occupies: ``tp x pp x cp x dp`` (experts live inside them)."""
        return self.tp * self.pp * self.cp * self.dp

    def fields(self) -> dict[str, int]:
        """The integer fields the layout rules read (recomputation as its code)."""
        return {
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "dp": self.dp,
            "vp": self.vp,
            "micro_batch": self.micro_batch,
            "recompute": RECOMPUTE_CODES[self.recompute],
            "zero": self.zero,
        }

    def violation(
        self, arch: ModelArch, *, seq_len: int | None = None, global_batch: int | None = None
    ) -> Violation | None:
        """The first rule this layout breaks for ``arch`` (``None``: it can run), by the one
        set of rules (:func:`gpuplan.forecast.layout_rules.layout_violation`)."""
        return layout_violation(
            arch, self.gpus, self.fields(), seq_len=seq_len, global_batch=global_batch
        )

    def pipeline_stages(self, arch: ModelArch) -> tuple[int, int, int]:
        """Transformer layers on the first, each middle and the last pipeline stage."""
        first, middle, last = pipeline_split(arch, self.pp)
        return int(first), int(middle), int(last)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ParallelLayout:
        hsdp = d.get("hsdp_shard_size")
        return cls(
            tp=json_int(d["tp"], "parallelism.tp"),
            pp=json_int(d["pp"], "parallelism.pp"),
            dp=json_int(d["dp"], "parallelism.dp"),
            cp=json_int(d["cp"], "parallelism.cp"),
            ep=json_int(d["ep"], "parallelism.ep"),
            vp=json_int(d["vp"], "parallelism.vp"),
            micro_batch=json_int(d["micro_batch"], "parallelism.micro_batch"),
            recompute=str(d["recompute"]),
            zero=json_int(d["zero"], "parallelism.zero"),
            fsdp=bool(d["fsdp"]),
            num_microbatches=json_int(d["num_microbatches"], "parallelism.num_microbatches"),
            hsdp_shard_size=None if hsdp is None else json_int(hsdp, "parallelism.hsdp_shard_size"),
        )

    def to_json(self) -> TrainParallelism:
        out: TrainParallelism = {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "cp": self.cp,
            "ep": self.ep,
            "vp": self.vp,
            "micro_batch": self.micro_batch,
            "recompute": self.recompute,
            "zero": self.zero,
            "fsdp": self.fsdp,
            "num_microbatches": self.num_microbatches,
        }
        if self.hsdp_shard_size is not None:
            out["hsdp_shard_size"] = self.hsdp_shard_size
        return out

    def text(self) -> str:
        """``tp=8 pp=16 dp=... `` in the JSON's field order."""
        return " ".join(f"{k}={v}" for k, v in self.to_json().items())
