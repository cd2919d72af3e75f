"""Under torchrun: every rank joins the collectives, two 'nodes' give inter-node scope, and
only rank 0 writes.

Two torchrun agents on this machine, one rank each, stand for two nodes: what torchrun
tells the ranks (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1, RANK) is what it tells them on two
real nodes, and the gloo traffic goes over TCP as it would between nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuplan.probes.collectives import free_port
from gpuplan.results.store import load_results

REPO = Path(__file__).resolve().parents[2]


def test_two_node_torchrun_collectives_rank0_writes(tmp_path):
    out = tmp_path / "results"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = []
    for node_rank in (0, 1):
        cmd = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node_rank}",
            "--master-addr=127.0.0.1", f"--master-port={port}",
            "-m", "gpuplan", "probe", "--quick", "--only", "collectives", "--device", "cpu",
            "--out", str(out), "--no-progress", "--format", "json",
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env
            )
        )
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=400))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    rank0_stdout, rank1_stdout = outputs[0][0], outputs[1][0]
    assert rank1_stdout.strip() == ""  # rank 1 reports nothing
    doc = json.loads(rank0_stdout)
    (coll,) = doc["probes"]
    assert coll["status"] == "ok", coll["error"]
    assert coll["params"]["launcher"] == "torchrun" and coll["params"]["num_nodes"] == 2
    assert {m["scope"] for m in coll["measurements"]} == {"inter"}
    assert {m["ranks"] for m in coll["measurements"]} == {2}
    assert all(m["correct"] for m in coll["measurements"])
    assert doc["torchrun"] == {"world_size": 2, "num_nodes": 2, "local_world_size": 1}
    files = load_results([out])
    assert len(files) == 1 and files[0][1].run_id == doc["run_id"]  # only rank 0 wrote
