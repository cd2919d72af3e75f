"""The training layout record (issue 14.2): the layout a forecast chose, checked by the one
set of layout rules, with its (uneven) pipeline split."""

from __future__ import annotations

import dataclasses

from gpuplan.forecast.layout import ParallelLayout
from gpuplan.forecast.model import arch_from
from gpuplan.forecast.train import TrainRequest, forecast_train


def test_the_forecast_layout_is_a_valid_record_of_the_whole_cluster():
    req = TrainRequest(model="llama3.1-70b", gpu="h100", num_gpus=256, seq_len=8192)
    fc = forecast_train(req)
    lay = fc.parallelism
    assert isinstance(lay, ParallelLayout)
    assert lay.gpus == fc.num_gpus == 256
    arch = arch_from("llama3.1-70b")
    assert lay.violation(arch, seq_len=8192, global_batch=fc.global_batch) is None
    assert ParallelLayout.from_json(lay.to_json()) == lay


def test_a_broken_layout_names_the_rule_it_breaks():
    arch = arch_from("llama3.1-70b")  # 64 heads, 8 KV heads, 80 layers
    ok = ParallelLayout(
        tp=8,
        pp=4,
        dp=8,
        cp=1,
        ep=1,
        vp=1,
        micro_batch=1,
        recompute="none",
        zero=1,
        fsdp=False,
        num_microbatches=8,
    )
    assert ok.violation(arch, seq_len=8192, global_batch=64) is None
    bad = dataclasses.replace(ok, tp=3, dp=21)
    v = bad.violation(arch, seq_len=8192, global_batch=63)
    assert v is not None and "--tp 3" in v.message


def test_uneven_first_and_last_pipeline_stages():
    lay = ParallelLayout(
        tp=1,
        pp=16,
        dp=1,
        cp=1,
        ep=1,
        vp=1,
        micro_batch=1,
        recompute="full",
        zero=1,
        fsdp=False,
        num_microbatches=16,
    )
    ds = arch_from("deepseek-v3")  # 61 layers: Megatron-core's uneven first/last stages
    first, middle, last = lay.pipeline_stages(ds)
    assert (first, middle, last) == (3, 4, 2)
    assert first + 14 * middle + last == ds.layers
    llama405 = arch_from("llama3.1-405b")  # 126 layers on 16 stages: 7 + 14 x 8 + 7
    assert lay.pipeline_stages(llama405) == (7, 8, 7)
