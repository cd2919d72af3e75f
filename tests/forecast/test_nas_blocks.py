"""Llama-Nemotron NAS models (DeciLM ``block_configs``): read from their config.json as
single blocks, equal to their catalog rows, and sized as their model cards say.

The per-layer sequences are those of the checkpoints' config.json (copied in github NVIDIA/NeMo
nemo/collections/llm/gpt/model/llama_nemotron_config.py @8cfedd7203): ``A`` a layer with
attention, ``-`` one whose attention is ``no_op``; the FFN multiplier of each layer (None:
``no_op``).
"""

from __future__ import annotations

import json

import pytest

from gpuplan.catalogs.catalog import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.model import ModelArch, arch_from_catalog

SUPER_49B_ATTENTION = (
    "AAAAAA--AAA-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA----------A------------------AAAAAAAAA"
)
SUPER_49B_FFN_MULT = [
    2.625,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    2.625,
    2.625,
    5.25,
    5.25,
    5.25,
    3.28125,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    1.3125,
    2.625,
    2.625,
    1.3125,
    5.25,
    1.3125,
    2.625,
    1.3125,
    1.3125,
    1.3125,
    5.25,
    1.3125,
    1.0,
    1.0,
    1.3125,
    1.0,
    1.0,
    1.0,
    1.3125,
    1.3125,
    0.5,
    0.5,
    1.0,
    1.0,
    0.5,
    0.5,
    1.0,
    0.5,
    0.5,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
    5.25,
]
ULTRA_253B_ATTENTION = (
    "AAAAAAAAA----AAAAA------AAA-----AAAA---AAA-A------AAAA-----AAAA-----AAAA-----AAA"
    "A-----AAAA--AAAA--A--------A-----AA-A----------------------------------AA-AAAAAAAA"
)
ULTRA_253B_FFN_MULT = [
    0.4875,
    0.975,
    1.4625,
    1.4625,
    1.4625,
    1.4625,
    1.4625,
    1.4625,
    1.95,
    None,
    None,
    None,
    None,
    1.95,
    1.95,
    1.95,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    2.4375,
    None,
    None,
    None,
    1.95,
    1.95,
    1.95,
    1.95,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    4.875,
    3.4125,
    3.4125,
    3.4125,
    None,
    None,
    2.925,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    None,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    2.4375,
    None,
    None,
    None,
    None,
    None,
    2.925,
    4.875,
    4.875,
    4.875,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    36.5625,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    39.0,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    31.40625,
    None,
    None,
    None,
    None,
    None,
    27.5625,
    1.95,
    1.95,
    2.4375,
    None,
    2.4375,
    2.4375,
    3.4125,
    4.875,
    4.875,
    4.875,
    4.875,
    2.4375,
]


def _config(attention: str, ffn: list[float | None], *, hidden: int, heads: int, group: int):
    blocks = [
        {
            "attention": {
                "no_op": a == "-",
                "n_heads_in_group": None if a == "-" else group,
                "replace_with_linear": False,
            },
            "ffn": {"no_op": m is None, "ffn_mult": m, "replace_with_linear": False},
        }
        for a, m in zip(attention, ffn, strict=True)
    ]
    return {
        "architectures": ["DeciLMForCausalLM"],
        "model_type": "nemotron-nas",
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": len(blocks),
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "block_configs": blocks,
    }


SUPER = _config(SUPER_49B_ATTENTION, SUPER_49B_FFN_MULT, hidden=8192, heads=64, group=8)
ULTRA = _config(ULTRA_253B_ATTENTION, ULTRA_253B_FFN_MULT, hidden=16384, heads=128, group=16)


def _from_config(cfg: dict) -> ModelArch:
    from gpuplan.cli._model import _hf_to_model

    rec = _hf_to_model(json.loads(json.dumps(cfg)), "config.json")
    rec.pop("extra")
    return ModelArch(**rec)


def _model(model_id: str) -> ModelArch:
    return arch_from_catalog(get_catalog().model(model_id))


@pytest.mark.parametrize(
    ("cfg", "row", "blocks", "attention", "published"),
    [
        (SUPER, "llama3.3-nemotron-super-49b", 129, 49, 49.9e9),
        (ULTRA, "llama3.1-nemotron-ultra-253b", 145, 64, 253e9),
    ],
)
def test_a_nas_config_json_reads_as_its_catalog_row(cfg, row, blocks, attention, published):
    """Every present attention and FFN block is one block; the FFN blocks at their mean
    width keep the parameter count, which lands on the model card's figure."""
    m = _from_config(cfg)
    assert (m.layers, m.attention_layers, m.mamba_layers, m.kv_heads) == (blocks, attention, 0, 8)
    assert m.params_total() == pytest.approx(published, rel=0.005)
    cat = _model(row)
    for field in ("layers", "attention_layers", "hidden", "heads", "kv_heads", "ffn_hidden"):
        assert getattr(cat, field) == getattr(m, field), field
    assert cat.params_total() == m.params_total()


def test_the_mean_ffn_width_keeps_the_ffn_parameters():
    """Sum over layers of 3 x hidden x round_up(int(2 ffn_mult hidden / 3), 256): the widths
    of the DeciLM modeling code, against the record's blocks x mean width."""
    widths = [-(-int(2 * f * 8192 / 3) // 256) * 256 for f in SUPER_49B_FFN_MULT if f]
    assert widths.count(28672) == 49 and 2816 in widths  # ffn_mult 5.25 is Llama 70B's FFN
    m = _from_config(SUPER)
    assert 80 * m.ffn_hidden == pytest.approx(sum(widths), abs=80)


def test_super_49b_fits_one_h200_but_not_one_h100_in_bf16():
    """Model card: NAS reduces the memory footprint, 'fitting the model on a single GPU at
    high workloads (H200)'; 99.7 GB of bf16 weights do not fit an 80 GB H100. On the H200
    the memory left beside the weights holds the KV of more than 16 requests of 5,120 tokens
    (49 attention layers x 2 x 8 heads x 128 x 2 bytes = 200 KB per token, 1 GB a request),
    a serving batch, not one request."""
    from gpuplan.forecast.inference import forecast_inference

    m = "llama3.3-nemotron-super-49b"
    h200 = forecast_inference(
        m,
        "h200",
        precision="bf16",
        input_tokens=4096,
        output_tokens=1024,
        tp=1,
        max_throughput=True,
    )
    assert h200["fits_in_memory"] and h200["batch"] > 16
    with pytest.raises(InputError, match="does not fit on h100-sxm5-80gb with tp=1"):
        forecast_inference(
            m,
            "h100",
            precision="bf16",
            input_tokens=4096,
            output_tokens=1024,
            tp=1,
        )


def test_fewer_attention_layers_mean_less_kv_and_a_larger_batch_than_llama_70b():
    """49 of 80 layers keep attention: the KV cache per token is 49/80 of Llama 3.3 70B's,
    and at the same TP the largest batch is larger."""
    from gpuplan.forecast.inference import forecast_inference

    kw = dict(precision="fp8", input_tokens=1000, output_tokens=1000, tp=2, max_throughput=True)
    nas = forecast_inference("llama3.3-nemotron-super-49b", "h100", **kw)
    ref = forecast_inference("llama3.3-70b", "h100", **kw)
    assert nas["kv_cache_bytes_per_token"] == pytest.approx(
        ref["kv_cache_bytes_per_token"] * 49 / 80
    )
    assert nas["max_batch"] > ref["max_batch"]
    assert nas["throughput_output_tokens_per_s"] > ref["throughput_output_tokens_per_s"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b[3]["attention"].update(replace_with_linear=True), "replace_with_linear"),
        (lambda b: b[3]["attention"].update(n_heads_in_group=4), "KV groups"),
        (lambda b: b[3]["attention"].update(n_heads_in_group=7), "must divide"),
        (lambda b: b[3]["ffn"].update(ffn_mult="big"), "ffn_mult must be a positive number"),
        (lambda b: b[3]["attention"].update(window_length=4096), "window_length"),
    ],
)
def test_nas_blocks_gpuplan_cannot_model_are_refused_by_name(edit, message):
    cfg = json.loads(json.dumps(SUPER))
    edit(cfg["block_configs"])
    with pytest.raises(InputError, match=message):
        _from_config(cfg)


def test_a_nas_config_json_is_read_on_the_command_line(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SUPER))
    r = run_cli(
        "forecast",
        "infer",
        "--model-file",
        str(path),
        "--gpu",
        "h100",
        "--precision",
        "fp8",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    assert (
        json.loads(r.stdout)["model"]["params_total"]
        == _model("llama3.3-nemotron-super-49b").params_total()
    )
    bad = json.loads(json.dumps(SUPER))
    bad["block_configs"][0]["ffn"]["replace_with_linear"] = True
    path.write_text(json.dumps(bad))
    r = run_cli("forecast", "infer", "--model-file", str(path), "--gpu", "h100")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert "replace_with_linear" in r.stderr and "Traceback" not in r.stderr
