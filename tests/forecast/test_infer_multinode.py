"""Serving a model too big for one node: TP inside each node, pipeline stages across nodes;
the fleet counts replicas of that size (issue 16.5)."""

from __future__ import annotations

import json

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.inference import (
    ServingDemand,
    fits_one_request,
    forecast_inference,
    model_with_provenance,
    size_serving_fleet,
)
from gpuplan.forecast.inference_arch import DEFAULT_MEMORY_FRACTION, Layout, resolve_precision
from gpuplan.forecast.serving import LengthDist


def _h100():
    return get_catalog().gpu("h100")


def test_deepseek_v3_fp8_on_h100_gets_the_fewest_nodes_that_hold_it():
    r = forecast_inference("deepseek-v3", "h100", precision="fp8")
    g = _h100()
    domain = g.scale_up_domain_size
    # TP never leaves the node unless asked; the replica spans whole nodes
    assert r["tp"] <= domain and r["gpus_per_replica"] > domain
    mn = r["multi_node"]
    assert mn["nodes"] == r["gpus_per_replica"] // domain and mn["nodes"] >= 2
    assert mn["tp_inside_node"] and mn["pp_boundaries_across_nodes"] == mn["nodes"] - 1
    assert "cross_node_tp" not in r
    # under the GPU's usable memory, and one node fewer would not hold it
    assert r["fits_in_memory"]
    assert r["memory_per_gpu_bytes"] <= DEFAULT_MEMORY_FRACTION * g.memory_bytes
    arch, _ = model_with_provenance("deepseek-v3", get_catalog())
    prec = resolve_precision("fp8", g, None)
    fewer = Layout(r["tp"], r["pp"] - domain // r["tp"], 1)
    assert not fits_one_request(
        arch, g, prec, fewer, request_tokens=2048 + 256, chunk=8192, utilization=0.9
    )


def test_deepseek_v3_fp8_on_h200_stays_on_one_node():
    r = forecast_inference("deepseek-v3", "h200", precision="fp8")
    assert r["gpus_per_replica"] <= 8 and "multi_node" not in r and r["fits_in_memory"]


def test_nodes_fix_the_layout_and_pp_follows():
    r3 = forecast_inference("deepseek-v3", "h100", precision="fp8", nodes=3)
    assert (r3["tp"], r3["pp"], r3["multi_node"]["nodes"]) == (8, 3, 3)
    r4 = forecast_inference("deepseek-v3", "h100", precision="fp8", nodes=4, tp=4)
    assert (r4["tp"], r4["pp"]) == (4, 8)
    assert r4["multi_node"]["pp_stages_per_node"] == 2
    # more GPUs per replica hold the same weights in less memory each
    assert r4["memory_breakdown_bytes"]["weights"] < r3["memory_breakdown_bytes"]["weights"]


def test_decode_pipeline_bubble_fewer_requests_than_stages():
    """With pp stages, a batch smaller than pp leaves stages idle: batch 1 and batch 2 on two
    stages run the same one-row micro-batch per stage, so TPOT is the same and batch 2
    emits twice the tokens; TPOT = pp stage passes + (pp - 1) activation hops."""
    r1 = forecast_inference("deepseek-v3", "h100", precision="fp8", nodes=2, batch=1)
    r2 = forecast_inference("deepseek-v3", "h100", precision="fp8", nodes=2, batch=2)
    assert r1["pp"] == 2
    assert r2["tpot_s"] == pytest.approx(r1["tpot_s"], rel=0.02)
    thr1, thr2 = r1["throughput_output_tokens_per_s"], r2["throughput_output_tokens_per_s"]
    assert thr2 == pytest.approx(2 * thr1, rel=0.02)
    stage = r1["breakdown_s"]["decode_step"]["total"]
    hop = r1["pp_hop_decode_s"]
    assert r1["multi_node"]["pp_hop_decode_s"] == hop
    assert hop > 0
    assert r1["tpot_s"] == pytest.approx(2 * stage + hop, rel=1e-6)


def test_nodes_that_disagree_with_tp_and_pp_are_refused():
    with pytest.raises(InputError, match="is not --nodes"):
        forecast_inference("deepseek-v3", "h100", precision="fp8", nodes=2, tp=8, pp=3)


def test_fleet_counts_replicas_of_multi_node_size():
    d = ServingDemand(
        model="deepseek-v3",
        gpus=("h100",),
        qps=2.0,
        inputs=LengthDist(1024.0),
        outputs=LengthDist(256.0),
        ttft_slo_s=2.0,
        tpot_slo_s=0.1,
        precision="fp8",
        num_requests=400,
    )
    f = size_serving_fleet(d)
    assert f.gpus_per_replica == 16
    assert (f.tp, f.pp) == (8, 2) or f.result.get("dp_attention") == 16
    assert f.num_gpus == f.replicas * 16
    assert f.result["multi_node"]["nodes"] == 2
    assert f.ttft_s <= 2.0 and f.tpot_s <= 0.1
    # the one-node layouts are listed as not fitting, with the reason
    drops = [c for c in f.result["candidates"] if c.get("num_gpus") is None]
    assert drops and all("does not fit" in c["reason"] for c in drops)


def test_cli_default_layout_of_deepseek_v3_on_h100_says_multi_node(run_cli):
    p = run_cli(
        "forecast", "infer", "--model", "deepseek-v3", "--gpu", "h100", "--precision", "fp8",
        "--format", "json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["multi_node"]["nodes"] == 2 and out["tp"] == 8 and out["pp"] == 2
    t = run_cli(
        "forecast", "infer", "--model", "deepseek-v3", "--gpu", "h100", "--precision", "fp8",
    )  # fmt: skip
    assert t.returncode == 0 and "nodes per replica" in t.stdout


def test_cli_bad_nodes_is_one_line(run_cli):
    p = run_cli(
        "forecast", "infer", "--model", "deepseek-v3", "--gpu", "h100", "--nodes", "0",
    )  # fmt: skip
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr and "--nodes" in lines[0]


def test_wide_ep_spreads_the_experts_and_keeps_attention_whole_on_every_gpu():
    """--ep 16 on 8-GPU H100 nodes: attention data-parallel (TP 1) on each of 16 GPUs, the
    256 experts 16 per GPU; per-GPU expert weights are 1/16 of the model's, the attention
    weights those of TP 1, and each MoE layer pays an all-to-all over the network."""
    from gpuplan.forecast.inference_arch import shard

    r = forecast_inference("deepseek-v3", "h100", precision="fp8", ep=16, batch=64)
    assert (r["tp"], r["pp"], r["ep"], r["dp_attention"], r["gpus_per_replica"]) == (
        1,
        1,
        16,
        16,
        16,
    )
    assert r["multi_node"]["wide_ep"] and r["multi_node"]["nodes"] == 2
    assert r["fits_in_memory"]
    assert r["memory_per_gpu_bytes"] <= DEFAULT_MEMORY_FRACTION * _h100().memory_bytes
    arch, _ = model_with_provenance("deepseek-v3", get_catalog())
    prec = resolve_precision("fp8", _h100(), None)
    wide = shard(arch, Layout(1, 1, 16, dp=16), prec)
    tp1 = shard(arch, Layout(1, 1, 1), prec)
    assert wide.weight_breakdown_bytes["attention"] == tp1.weight_breakdown_bytes["attention"]
    experts_tp1 = tp1.weight_breakdown_bytes["mlp"]
    assert wide.weight_breakdown_bytes["mlp"] < experts_tp1 / 8
    # each rank holds the KV of its own requests: per GPU, 1/16 of a TP-1 copy on average
    assert wide.kv_bytes_per_token_per_gpu() == pytest.approx(tp1.kv_bytes_per_token_per_gpu() / 16)
    assert r["breakdown_s"]["decode_step"]["communication"] > 0


def test_wide_ep_needs_an_moe_model_and_divisible_experts():
    with pytest.raises(InputError, match="wide expert parallelism"):
        forecast_inference("llama3.3-70b", "h100", ep=16)


def test_fleet_compares_pp_and_wide_ep_replicas():
    d = ServingDemand(
        model="deepseek-v3",
        gpus=("h100",),
        qps=4.0,
        inputs=LengthDist(1024.0),
        outputs=LengthDist(256.0),
        ttft_slo_s=2.0,
        tpot_slo_s=0.1,
        precision="fp8",
        num_requests=400,
    )
    f = size_serving_fleet(d)
    rows = [c for c in f.result["candidates"] if c.get("num_gpus")]
    kinds = {(c["tp"], c["pp"], c.get("dp_attention")) for c in rows}
    assert (8, 2, None) in kinds and (1, 1, 16) in kinds
    assert all(c["num_gpus"] % 16 == 0 for c in rows)
    assert f.num_gpus == min(c["num_gpus"] for c in rows)


def test_an_ep_larger_than_a_node_sizes_a_wide_ep_fleet_as_it_forecasts_one_replica():
    """--ep 16 without --tp is wide EP for one replica; the fleet search reads it the same
    way (it refused it once: '--ep 16 must divide both --tp 1 ...')."""
    d = ServingDemand(
        model="deepseek-v3",
        gpus=("h200",),
        qps=2.0,
        inputs=LengthDist(2048.0),
        outputs=LengthDist(256.0),
        tpot_slo_s=0.1,
        precision="fp8",
        ep=16,
        num_requests=300,
    )
    f = size_serving_fleet(d)
    assert (f.tp, f.ep, f.gpus_per_replica) == (1, 16, 16)
    assert f.result["dp_attention"] == 16
    one = forecast_inference("deepseek-v3", "h200", precision="fp8", ep=16, batch=8)
    assert (one["tp"], one["ep"], one["dp_attention"]) == (1, 16, 16)


def test_a_model_larger_than_a_pcie_gpu_is_served_inside_its_pcie_server():
    """A GPU without a scale-up fabric (L40S: PCIe only, domain 1) serves a model larger
    than one card on the cards of its server (8 on PCIe): TP by default, or pipeline stages
    when asked. Neither needs an intra-node collective model (the stage hop once raised one):
    the hop is the calibrated point-to-point between devices, the all-reduce NCCL's ring over
    PCIe or the calibrated collective."""
    r = forecast_inference("glm4.5-air", "l40s-48gb")
    assert r["tp"] > 1 and r["tp"] * r["pp"] <= 8 and r["fits_in_memory"]
    assert "multi_node" not in r and r["pcie_tp"]["server_gpus"] == 8
    p = forecast_inference("glm4.5-air", "l40s-48gb", tp=1, pp=8)
    assert p["tp"] == 1 and p["pp"] == 8 and p["fits_in_memory"]
    assert "multi_node" not in p and "pcie_tp" not in p
    assert p["pp_hop_decode_s"] > 0
    # two servers' worth of stages is two nodes
    m = forecast_inference("glm4.5-air", "l40s-48gb", tp=1, pp=16)
    assert m["multi_node"]["nodes"] == 2 and m["multi_node"]["gpus_per_node"] == 8


def test_gaudi2_serves_with_tensor_parallelism_over_its_integrated_roce():
    """Gaudi 2's scale-up fabric (21 x 100GbE per card, all-to-all in the HLS-2 box) is in
    the catalog, so TP inside the box has a collective model (it used to have none)."""
    fab = get_catalog().fabric("gaudi2-roce")
    assert fab.per_gpu_bandwidth_bytes_per_s == pytest.approx(262.5e9)
    r2 = forecast_inference("llama3.1-70b", "gaudi2")
    r8 = forecast_inference("llama3.1-70b", "gaudi2", tp=8)
    assert r2["tp"] >= 2 and r8["tp"] == 8
    comm8 = r8["breakdown_s"]["decode_step"]["communication"]
    assert comm8 > 0
    # eight cards stream a quarter of the weights each that two do: the step is faster
    assert r8["tpot_s"] < r2["tpot_s"]


def test_one_gpu_nodes_search_as_many_nodes_as_eight_hgx_nodes_hold():
    """GH200 96GB nodes are one superchip each: DeepSeek-V3 at FP8 (671 GB) needs more than
    the 8 nodes the search stopped at, so the fleet sizing found no layout ('gh200-96gb
    tp=1: does not fit') although `--nodes 16` served it. The search now goes to 64 GPUs
    (MAX_AUTO_REPLICA_GPUS), and the fleet is the fewest nodes that hold a full chunk."""
    from gpuplan.forecast.inference import MAX_AUTO_NODES, auto_node_counts

    assert max(auto_node_counts(8)) == MAX_AUTO_NODES == 8
    assert max(auto_node_counts(1)) == 64 and max(auto_node_counts(2)) == 32
    fleet = size_serving_fleet(
        ServingDemand(
            model="deepseek-v3",
            gpus=("gh200-96gb",),
            qps=0.5,
            inputs=LengthDist(2048.0),
            outputs=LengthDist(256.0),
            ttft_slo_s=5.0,
            precision="fp8",
            num_requests=300,
        )
    )
    assert fleet.tp == 1 and fleet.pp > MAX_AUTO_NODES
    assert fleet.num_gpus == fleet.replicas * fleet.pp
