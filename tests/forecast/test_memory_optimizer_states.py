"""Optimizer-state dtypes, fine-grained recomputation and DualPipe's memory (issue 15, item 7).

Hand-computed: a tiny dense model whose parameter count is written out, a tiny MLA/MoE
layer whose per-token activation terms are counted by hand.
"""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.memory import (
    activation_bytes_per_layer,
    model_state_bytes,
    optimizer_bytes_per_param,
    training_memory_per_gpu,
)
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.training import Framework, adam_step_bytes_per_param

# 2 layers, h=64, 4 heads (MHA), GELU MLP 256, vocab 100, untied embeddings:
# per layer 4*h*h (QKV + out) + 2*h*f (MLP) + 4*h (two norms' weight and bias) = 49,408;
# embeddings 2 * 100 * 64 = 12,800 -> N = 111,616 (norm params as counted by ModelArch).
TINY = ModelArch(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100, gated_mlp=False)


def _n_params() -> float:
    st = model_state_bytes(TINY, 1, 1, 1, 1, 1, 0)
    return float(st["weights"]) / 2.0  # 16-bit weights


def test_parameter_count_is_the_hand_count():
    per_layer = 4 * 64 * 64 + 2 * 64 * 256
    n = _n_params()
    # the norms add a few hundred parameters at most; the matmul and embedding part is exact
    assert 2 * per_layer + 2 * 100 * 64 <= n <= 2 * per_layer + 2 * 100 * 64 + 2 * 4 * 64 + 64


@pytest.mark.parametrize(
    ("opt", "master", "expected"),
    [("fp32", "fp32", 12.0), ("bf16", "fp32", 8.0), ("bf16", "bf16", 6.0), ("bf16", "none", 4.0)],
)
def test_optimizer_bytes_by_dtype(opt, master, expected):
    n = _n_params()
    st = model_state_bytes(TINY, 1, 1, 1, 1, 1, 0, optimizer_dtype=opt, master_weights=master)
    assert float(st["optimizer"]) == pytest.approx(expected * n)
    assert optimizer_bytes_per_param(opt, master) == expected


def test_bf16_moments_are_half_the_moment_bytes():
    """Adam's two moments: 2 x 4 B in fp32, 2 x 2 B in bf16 (DeepSeek-V3 3.3.3); with no
    master copy the whole optimizer state halves."""
    n = _n_params()
    kw = dict(master_weights="none")
    fp32 = float(
        model_state_bytes(TINY, 1, 1, 1, 1, 1, 0, optimizer_dtype="fp32", **kw)["optimizer"]
    )
    bf16 = float(
        model_state_bytes(TINY, 1, 1, 1, 1, 1, 0, optimizer_dtype="bf16", **kw)["optimizer"]
    )
    assert fp32 == pytest.approx(8.0 * n) and bf16 == pytest.approx(fp32 / 2.0)
    # with the fp32 master kept, the saving is exactly the moments' half: 4 B per parameter
    a = float(model_state_bytes(TINY, 1, 1, 1, 1, 1, 0)["optimizer"])
    b = float(model_state_bytes(TINY, 1, 1, 1, 1, 1, 0, optimizer_dtype="bf16")["optimizer"])
    assert a - b == pytest.approx(4.0 * n)


def test_distributed_optimizer_shards_bf16_moments():
    """ZeRO-1 over d = 8: 6 + 8/8 bytes per parameter with bf16 moments (6 + 12/8 in fp32)."""
    n = _n_params()
    st = model_state_bytes(TINY, 1, 1, 1, 8, 1, 1, optimizer_dtype="bf16")
    total = float(st["weights"] + st["gradients"] + st["optimizer"])
    assert total == pytest.approx((6.0 + 8.0 / 8.0) * n)


@pytest.mark.parametrize(("opt", "master", "megatron", "fsdp"), [
    ("fp32", "fp32", 18.0, 16.0),  # FSDP: fp32 param shard 4 + grads 4 + moments 8
    ("bf16", "fp32", 14.0, 12.0),
    ("fp32", "bf16", 16.0, 14.0),  # a bf16 master: the bf16 parameter shard is that copy
    ("fp32", "none", 14.0, 14.0),  # pure 16-bit training: nothing to fold
])  # fmt: skip
def test_fsdp_sharded_parameters_are_the_master_weights(opt, master, megatron, fsdp):
    """ZeRO-3 over d = 8: PyTorch FSDP keeps the fp32 parameter shard as the master copy
    (MixedPrecisionPolicy), so no persistent 16-bit shard sits beside it; Megatron's
    distributed optimizer keeps both. Stage 2 (FSDP2 without resharding) is unchanged."""
    n = _n_params()

    def per_param(zero, flag):
        st = model_state_bytes(
            TINY, 1, 1, 1, 8, 1, zero, optimizer_dtype=opt, master_weights=master,
            params_are_master=flag,
        )  # fmt: skip
        return float(st["weights"] + st["gradients"] + st["optimizer"]) / n

    assert per_param(3, False) == pytest.approx(megatron / 8.0)
    assert per_param(3, True) == pytest.approx(fsdp / 8.0)
    assert per_param(2, True) == pytest.approx(per_param(2, False))
    if megatron != fsdp:
        st = model_state_bytes(TINY, 1, 1, 1, 8, 1, 3, params_are_master=True)
        assert float(st["weights"]) == pytest.approx(4.0 * n / 8.0)  # the fp32 shard


def test_adam_step_bytes_follow_the_dtypes():
    assert adam_step_bytes_per_param() == 34.0  # the old constant
    assert adam_step_bytes_per_param("bf16") == 26.0  # moments read+written at 2 B
    assert adam_step_bytes_per_param("fp32", "none") == 2 * 2 + 16 + 8


def test_bad_optimizer_dtype_names_the_flag():
    with pytest.raises(InputError, match="--optimizer-dtype"):
        Framework(optimizer_dtype="fp16")
    with pytest.raises(InputError, match="--master-weights"):
        Framework(master_weights="fp8")
    with pytest.raises(InputError, match="--recompute-modules"):
        Framework(recompute_modules=("attention",))


# --------------------------------------------------------------- fine-grained recompute
MLA = ModelArch(
    layers=2,
    hidden=64,
    heads=4,
    ffn_hidden=128,
    vocab=100,
    attention="mla",
    mla=dict(
        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16
    ),
    num_experts=8,
    top_k=2,
    moe_ffn_hidden=32,
    num_shared_experts=1,
)


def _act(**kw):
    base = dict(moe=True, linear_input_bytes=1.0)
    base.update(kw)
    return float(activation_bytes_per_layer(MLA, 128, 1, 1, 1, 1, **base))


def test_recompute_modules_drop_what_they_recompute():
    s, h = 128, 64
    full = _act()
    # layernorm: the two norm outputs (QKV and MLP-up inputs) at the linear-input bytes
    assert full - _act(recompute_modules=("layernorm",)) == pytest.approx(2 * 1.0 * h * s)
    # mla_up_proj: Q, K (4 heads x 24 each) and V (4 x 16) in 16 bits
    qkv = 2.0 * (4 * 24 + 4 * 24) + 2.0 * (4 * 16)
    assert full - _act(recompute_modules=("mla_up_proj",)) == pytest.approx(qkv * s)
    # moe_act: the routed experts' down-projection input (top_k x f_e at 1 B)
    assert full - _act(recompute_modules=("moe_act",)) == pytest.approx(2 * 32 * 1.0 * s)
    # an FP8 activation cache halves the routed SwiGLU inputs (2 x f_e per copy)
    assert full - _act(act_cache_bytes=1.0) == pytest.approx(2 * 2 * 32 * (2.0 - 1.0) * s)


def test_recompute_modules_only_act_under_selective():
    for rc in (0, 2):
        a = float(activation_bytes_per_layer(MLA, 128, 1, 1, 1, rc, moe=True))
        b = float(
            activation_bytes_per_layer(
                MLA, 128, 1, 1, 1, rc, moe=True, recompute_modules=("layernorm", "moe_act")
            )
        )
        assert a == b


def test_mla_latents_are_kept():
    """The up-projections' inputs (q and kv latents) stay when Q, K, V are recomputed."""
    no_mla = MLA.with_(mla=MLA.mla.model_copy(update={"q_lora_rank": 0, "kv_lora_rank": 0}))
    d = _act(recompute_modules=("mla_up_proj",)) - float(
        activation_bytes_per_layer(
            no_mla,
            128,
            1,
            1,
            1,
            1,
            moe=True,
            linear_input_bytes=1.0,
            recompute_modules=("mla_up_proj",),
        )
    )
    assert d == pytest.approx((2.0 + 1.0) * (32 + 16) * 128)


# ---------------------------------------------------------------------------- DualPipe
def test_dualpipe_holds_two_stages_and_pp_plus_one_microbatches():
    arch = ModelArch(layers=16, hidden=64, heads=4, ffn_hidden=256, vocab=8)
    kw = dict(
        seq_len=128,
        micro_batch=1,
        num_microbatches=32,
        tp=1,
        pp=8,
        cp=1,
        ep=1,
        dp=1,
        vp=1,
        recompute=0,
        zero=0,
        overhead_bytes=0.0,
    )
    one = training_memory_per_gpu(arch, **kw)
    two = training_memory_per_gpu(arch, pipeline_schedule="dualpipe", **kw)
    # 2 layers per stage; 1F1B's first stage: 8 in flight; DualPipe: two stages' weights and
    # 9 micro-batches of a stage's activations (DeepSeek-V3 Table 2)
    per_stage_act = float(one["activations"]) / 8.0
    assert float(two["weights"]) == pytest.approx(2.0 * float(one["weights"]), rel=0.02)
    assert float(two["activations"]) >= 9.0 * per_stage_act * 0.999
    with pytest.raises(InputError, match="pipeline schedule"):
        training_memory_per_gpu(arch, pipeline_schedule="gpipe", **kw)
