"""``gpuplan probe --workload train`` run for real on the CPU.

Nothing is mocked: real torch blocks of a catalog model's shapes (shrunk for the CPU, as
the probe does by default there) run forward, backward and AdamW, once in one process
and once as a two-rank gloo tensor-parallel group of spawned processes. The times are a
CPU's; what is checked is the record: shapes, shrink, TP sharding, timing arithmetic,
memory and attention-kernel fields.
"""

from __future__ import annotations

import json
import statistics

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.paths import results_dir
from gpuplan.probes.train import (
    BlockShape,
    TrainOptions,
    block_shape_from_catalog,
    cpu_scale,
    shrink,
)
from gpuplan.results.schema import ResultDocument, TrainStepMeasurement
from gpuplan.results.summary import headline

MODEL = "llama3.1-8b"


def _run_probe(run_cli, *extra: str) -> ResultDocument:
    proc = run_cli(
        "probe", "--workload", "train", "--model", MODEL, "--quick", "--no-progress", *extra
    )
    assert proc.returncode == 0, proc.stderr
    paths = sorted(results_dir().rglob("*.json"))
    docs = [ResultDocument.model_validate(json.loads(p.read_text())) for p in paths]
    return max(docs, key=lambda d: d.started_at)


def _params_per_block(b: dict, tp: int) -> int:
    """Parameters one TP rank holds: two norms, QKV, output projection, MLP."""
    h, d = b["hidden"], b["head_dim"]
    q, kv, f = b["heads"] // tp * d, b["kv_heads"] // tp * d, b["ffn_hidden"] // tp
    mlp_in = f * (2 if b["gated_mlp"] else 1)
    return 2 * h + h * (q + 2 * kv) + q * h + h * mlp_in + f * h


def _check_timing(m: dict, iterations: int) -> None:
    for phase in ("forward", "backward", "optimizer"):
        samples = m[phase]["samples_s"]
        assert len(samples) == iterations and all(t > 0 for t in samples)
        assert m[f"{phase}_per_block_s"] == pytest.approx(
            statistics.median(samples) / m["blocks"], rel=1e-12
        )
    steps = [
        sum(v)
        for v in zip(
            *(m[p]["samples_s"] for p in ("forward", "backward", "optimizer")), strict=True
        )
    ]
    assert m["step"]["samples_s"] == pytest.approx(steps, rel=1e-12)
    assert m["step_per_block_s"] == pytest.approx(statistics.median(steps) / m["blocks"])


@pytest.fixture(scope="module")
def full_shape() -> BlockShape:
    return block_shape_from_catalog(get_catalog().model(MODEL))[0]


def test_single_rank_record(run_cli, full_shape):
    doc = _run_probe(run_cli, "--framework", "torchtitan", "--device-id", "h100")
    [probe] = doc.probe("train")
    assert probe.status == "ok", probe.error
    p = probe.params
    row = get_catalog().model(MODEL)
    assert p["shape"] == {
        "hidden": row.hidden,
        "heads": row.heads,
        "kv_heads": row.kv_heads,
        "head_dim": row.head_dim,
        "ffn_hidden": row.ffn_hidden,
        "gated_mlp": row.gated_mlp,
    }
    assert p["scale"] == cpu_scale(full_shape) > 1  # shrunk on a CPU
    assert p["block"] == shrink(full_shape, p["scale"], 1).as_dict()
    assert p["block"]["hidden"] == row.hidden // p["scale"]
    assert p["framework"] == "torchtitan" and p["device_id"] == "h100-sxm5-80gb"
    assert p["launcher"] == "in-process" and p["ranks"] == 1 and p["backend"] is None
    assert any("shrunk" in w for w in probe.warnings)
    [m] = probe.measurements
    TrainStepMeasurement.model_validate(m)
    assert m["tokens"] == m["seq_len"] * m["micro_batch"] == 128
    _check_timing(m, p["iterations"])
    assert m["params_per_block"] == _params_per_block(p["block"], 1)
    assert m["memory_method"].startswith(("rss_peak_delta", "ru_maxrss"))
    assert m["peak_memory_bytes"] > 0
    assert m["attention_backend"] and not m["attention_backend"].startswith("unknown")
    head = headline(probe)  # what 'probe' and 'results ls' print
    assert head["value"] == m["step_per_block_s"] and head["unit"] == "s"
    show = run_cli("results", "show", doc.run_id, env={"COLUMNS": "200"})
    assert show.returncode == 0, show.stderr
    assert f"{m['blocks']} blocks, 1 x 128 tokens, tp 1" in show.stdout


def test_two_rank_gloo_tensor_parallel(run_cli):
    doc = _run_probe(run_cli, "--tp", "2", "--seq-len", "64", "--micro-batch", "2")
    [probe] = doc.probe("train")
    assert probe.status == "ok", probe.error
    p = probe.params
    assert (p["launcher"], p["backend"], p["ranks"], p["tp"]) == ("spawn", "gloo", 2, 2)
    [m] = probe.measurements
    assert (m["seq_len"], m["micro_batch"], m["tp"]) == (64, 2, 2)
    # each rank holds its shards: half the heads and MLP columns of the block
    assert m["params_per_block"] == _params_per_block(p["block"], 2)
    assert m["params_per_block"] < _params_per_block(p["block"], 1)
    assert m["time_over_ranks"] == "max"
    _check_timing(m, p["iterations"])


def test_moe_model_runs_its_dense_equivalent():
    row = get_catalog().model("deepseek-v3")
    shape, notes = block_shape_from_catalog(row)
    assert shape.ffn_hidden == row.top_k * row.moe_ffn_hidden + row.num_shared_experts * (
        row.shared_expert_ffn_hidden or row.moe_ffn_hidden
    )
    assert shape.kv_heads == shape.heads  # MLA run as multi-head attention
    assert any("MoE" in n for n in notes) and any("MLA" in n for n in notes)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tp", "3"], "--tp 3 does not divide"),
        (["--precision", "fp8"], "bf16 blocks only"),
        (["--seq-len", "0"], "--seq-len must be positive"),
        (["--model", "no-such-model"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_exit_2(run_cli, args, message):
    base = ["probe", "--workload", "train", "--no-progress"]
    if "--model" not in args:
        base += ["--model", MODEL]
    proc = run_cli(*base, *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_needs_a_model(run_cli):
    proc = run_cli("probe", "--workload", "train")
    assert proc.returncode == 2 and "--model" in proc.stderr


def test_shrink_keeps_tp_divisible():
    s = BlockShape(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn_hidden=28672)
    for tp in (1, 2, 4, 8):
        b = shrink(s, cpu_scale(s), tp)
        b.check_tp(tp)  # raises when a dimension does not split
        assert b.head_dim == s.head_dim and b.hidden == s.hidden // cpu_scale(s)
    with pytest.raises(InputError, match="--blocks"):
        TrainOptions(model=MODEL, shape=s.as_dict(), blocks=0)


def _tp_rank(rank: int, world: int, port: int, shape: dict, out: str) -> None:
    """One gloo rank: the TP=2 shards of a TP=1 block give the same output and gradients."""
    import torch
    import torch.distributed as dist

    from gpuplan.probes.train import BlockShape, build_blocks

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        s = BlockShape(**shape)
        torch.manual_seed(0)
        full = build_blocks(torch, s, 1, 1, torch.device("cpu"))
        part = build_blocks(torch, s, world, 1, torch.device("cpu"))
        d, hl, kl, fl = s.head_dim, s.heads // world, s.kv_heads // world, s.ffn_hidden // world
        q0, k0, v0 = rank * hl * d, s.heads * d + rank * kl * d, (s.heads + s.kv_heads) * d
        f_full, p_full = full[0].state_dict(), {}
        p_full["norm1.weight"] = f_full["norm1.weight"]
        p_full["norm2.weight"] = f_full["norm2.weight"]
        w = f_full["qkv.weight"]
        p_full["qkv.weight"] = torch.cat(
            [w[q0 : q0 + hl * d], w[k0 : k0 + kl * d], w[v0 + rank * kl * d :][: kl * d]]
        )
        p_full["proj.weight"] = f_full["proj.weight"][:, q0 : q0 + hl * d]
        w = f_full["fc1.weight"]
        p_full["fc1.weight"] = torch.cat(
            [w[rank * fl : (rank + 1) * fl], w[s.ffn_hidden + rank * fl :][:fl]]
        )
        p_full["fc2.weight"] = f_full["fc2.weight"][:, rank * fl : (rank + 1) * fl]
        part[0].load_state_dict(p_full)
        x = torch.randn(2, 16, s.hidden, generator=torch.Generator().manual_seed(1))
        dy = torch.randn(2, 16, s.hidden, generator=torch.Generator().manual_seed(2))
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        ref, got = full(xs[0]), part(xs[1])
        ref.backward(dy)
        got.backward(dy)
        errs = [
            float((got - ref).abs().max()),
            float((xs[1].grad - xs[0].grad).abs().max()),
            float(
                (part[0].fc2.weight.grad - full[0].fc2.weight.grad[:, rank * fl :][:, :fl])
                .abs()
                .max()
            ),
        ]
        if rank == 0:
            with open(out, "w") as fh:
                json.dump(errs, fh)
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_shards_compute_the_unsharded_block(tmp_path):
    """Megatron column/row splits with the f/g all-reduces reproduce the TP=1 block:
    forward output, input gradient and a row-parallel weight's gradient."""
    import torch.multiprocessing as tmp

    from gpuplan.probes.collectives import free_port

    shape = BlockShape(hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=96).as_dict()
    out = tmp_path / "errs.json"
    tmp.spawn(_tp_rank, args=(2, free_port(), shape, str(out)), nprocs=2, join=True)
    errs = json.loads(out.read_text())
    assert max(errs) < 1e-5, errs


def test_torchrun_ranks_are_the_tp_group(tmp_path):
    """One torchrun agent with two CPU ranks (a node's TP group): both ranks run the
    blocks over gloo, rank 0 alone writes the result."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from gpuplan.probes.collectives import free_port

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "results"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        "-m", "gpuplan", "probe", "--workload", "train", "--model", MODEL, "--tp", "2",
        "--seq-len", "64", "--quick", "--device", "cpu", "--out", str(out), "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = sorted(out.rglob("*.json"))
    doc = ResultDocument.model_validate(json.loads(path.read_text()))
    [probe] = doc.probe("train")
    assert probe.status == "ok", probe.error
    assert (probe.params["launcher"], probe.params["ranks"]) == ("torchrun", 2)
    [m] = probe.measurements
    assert m["tp"] == 2 and m["params_per_block"] == _params_per_block(probe.params["block"], 2)
