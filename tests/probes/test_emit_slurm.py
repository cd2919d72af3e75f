"""``--emit slurm``: the sbatch script's lines, and the script itself run as two nodes.

The two-node test runs the emitted script with bash on this machine: real torchrun agents,
real ``gpuplan probe`` ranks, gloo over 127.0.0.1. Only Slurm itself cannot exist here, so
``scontrol`` and ``srun`` are stand-ins at that edge: ``scontrol show hostnames`` names
127.0.0.1 and ``srun`` starts its command once per node with ``SLURM_NODEID`` set, which is
what Slurm's srun does for ``--ntasks-per-node=1``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuplan.errors import InputError
from gpuplan.probes.collectives import free_port
from gpuplan.probes.emit import fabric_env, slurm_script
from gpuplan.results.store import load_results

REPO = Path(__file__).resolve().parents[2]


def sbatch_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH ") :].partition("=")
            out[key] = value
    return out


def srun_argv(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("srun "))
    argv = shlex.split(line)
    return argv[: argv.index("||")]


def exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export ") :].partition("=")
            out[key] = shlex.split(value)[0]
    return out


def test_slurm_script_lines_and_torchrun_arguments():
    text = slurm_script(
        nodes=4,
        gpus_per_node=8,
        fabric="ib",
        probe_args=["--quick", "--only", "matmul,collectives"],
        out_dir="res",
        port=29411,
    )
    assert text.startswith("#!/bin/bash\n")
    d = sbatch_directives(text)
    assert d["--nodes"] == "4" and d["--gpus-per-node"] == "8"
    assert d["--ntasks-per-node"] == "1" and d["--time"] == "00:30:00"
    assert "--cpus-per-task" not in d and "--account" not in d
    argv = srun_argv(text)
    assert argv[:3] == ["srun", "--nodes=4", "--ntasks-per-node=1"]
    # one task per node holds every rank of the node: all its CPUs unless told
    assert "--cpus-per-task=$SLURM_CPUS_ON_NODE" in argv and "--kill-on-bad-exit=1" in argv
    assert not any(a.startswith("--container") for a in argv)
    assert argv[-2:-1] == ["-c"] and argv[-3] == "bash"
    inner = shlex.split(argv[-1])
    assert inner[0] == "torchrun"
    assert "--nnodes=4" in inner and "--nproc-per-node=8" in inner
    assert "--node-rank=$SLURM_NODEID" in inner and "--master-addr=$HEAD_NODE" in inner
    assert "--master-port=29411" in inner
    tail = inner[inner.index("--no-python") + 1 :]
    assert tail == [
        "gpuplan", "probe", "--quick", "--only", "matmul,collectives", "--out", "$PROBE_RESULTS_DIR",
    ]  # fmt: skip
    assert exports(text) == fabric_env("ib")
    # the directives come before the first command, as sbatch requires
    lines = text.splitlines()
    first_cmd = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert last_directive < first_cmd
    assert "source .venv/bin/activate" in lines


def test_slurm_container_account_cpus_and_fabric_env():
    text = slurm_script(
        nodes=2,
        gpus_per_node=8,
        fabric="efa",
        probe_args=["--storage-path", "/fsx/scratch"],
        partition="p5",
        account="ml-team",
        cpus_per_task=96,
        container_image="nvcr.io#myorg/gpuplan:0.1",
        socket_ifname="^lo,docker",
    )
    d = sbatch_directives(text)
    assert d["--partition"] == "p5" and d["--account"] == "ml-team"
    assert d["--cpus-per-task"] == "96"
    argv = srun_argv(text)
    assert "--cpus-per-task=96" in argv  # srun does not inherit it from sbatch (Slurm >= 22.05)
    assert "--container-image=nvcr.io#myorg/gpuplan:0.1" in argv
    mounts = next(a for a in argv if a.startswith("--container-mounts="))
    assert (
        mounts
        == "--container-mounts=$PROBE_RESULTS_DIR:$PROBE_RESULTS_DIR,/fsx/scratch:/fsx/scratch"
    )
    env = exports(text)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker" and "NCCL_NET" not in env
    assert "source .venv/bin/activate" not in text  # the image has gpuplan on its PATH


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"nodes": 0}, "--nodes"),
        ({"time_limit": "half an hour"}, "Slurm time"),
        ({"fabric": "myrinet"}, "--fabric"),
        ({"port": 0}, "--port"),
        ({"cpus_per_task": 0}, "--cpus-per-task"),
        ({"account": "ml\n#SBATCH --qos=high"}, "--account"),
        ({"partition": "a b"}, "--partition"),
        ({"fabric": "tcp", "ib_hca": "mlx5_0"}, "--ib-hca"),
        ({"ib_hca": "mlx5_0;rm -rf /"}, "--ib-hca"),
        ({"socket_ifname": "eth0 lo"}, "--socket-ifname"),
        ({"container_image": "img with space"}, "--image"),
    ],
)
def test_bad_slurm_options_are_input_errors(kw, match):
    args = {"nodes": 2, "gpus_per_node": 8, "fabric": "ib", **kw}
    with pytest.raises(InputError, match=match):
        slurm_script(**args)


def test_cli_emit_writes_files_and_never_overwrites(run_cli, tmp_path):
    base = ["probe", "--emit", "slurm", "--nodes", "2", "--gpus-per-node", "4", "--fabric", "ib"]
    r1 = run_cli(*base, "--quick", "--account", "ml", "--out", str(tmp_path), "--format", "json")
    assert r1.returncode == 0, r1.stderr
    d1 = json.loads(r1.stdout)
    r2 = run_cli(*base, "--port", "29600", "--out", str(tmp_path), "--format", "json")
    assert r2.returncode == 0, r2.stderr
    d2 = json.loads(r2.stdout)
    assert d1["path"] != d2["path"] and d1["fabric"] == "ib" and d1["form"] == "sbatch"
    text1, text2 = Path(d1["path"]).read_text(), Path(d2["path"]).read_text()
    assert text1 == d1["text"] and sbatch_directives(text1)["--account"] == "ml"
    assert "--quick" in text1 and "--quick" not in text2
    assert "--master-port=29600" in text2
    assert os.access(d1["path"], os.X_OK)


def test_cli_emit_slurm_to_a_pipe_is_the_file_byte_for_byte(run_cli, tmp_path):
    out = tmp_path / "emit"
    r = run_cli(
        "probe", "--emit", "slurm", "--nodes", "2", "--fabric", "roce", "--image",
        "registry.example.com/team/gpuplan:0.1", "--storage-path", str(tmp_path), "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (written,) = [p for p in out.iterdir() if p.is_file()]
    assert r.stdout == written.read_text() and r.stdout.startswith("#!/bin/bash\n")
    assert any(len(line) > 80 for line in r.stdout.splitlines())  # long lines kept whole
    assert subprocess.run(["bash", "-n"], input=r.stdout, text=True).returncode == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fabric", "ib"], "--nodes N"),
        (["--nodes", "2", "--fabric", "ib", "--memory", "10Gi"], "--memory"),
        (["--nodes", "2", "--fabric", "ib", "--port", "99999"], "--port"),
    ],
)
def test_cli_slurm_errors_one_line_exit_2(run_cli, tmp_path, args, needle):
    out = tmp_path / "emit"
    r = run_cli("probe", "--emit", "slurm", *args, "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()


def _stand_ins(bin_dir: Path) -> None:
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1\n')
    srun = bin_dir / "srun"
    srun.write_text(
        "#!/bin/bash\n"
        "# srun --nodes=N [options] CMD...: CMD once per node, SLURM_NODEID=0..N-1\n"
        "nodes=1\n"
        'while [ "${1#--}" != "$1" ]; do\n'
        '  case "$1" in --nodes=*) nodes="${1#--nodes=}";; esac\n'
        "  shift\n"
        "done\n"
        "pids=()\n"
        'for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$i "$@" & pids+=($!); done\n'
        "rc=0\n"
        'for p in "${pids[@]}"; do wait "$p" || rc=$?; done\n'
        'exit "$rc"\n'
    )
    for p in (scontrol, srun):
        p.chmod(0o755)


def test_emitted_script_runs_two_nodes_with_gloo_and_writes_one_result(run_cli, tmp_path):
    """The sbatch script as emitted, run with bash: two torchrun agents (one rank each)
    rendezvous on 127.0.0.1, the collectives run across both 'nodes', rank 0 alone writes
    one result file, and the script lists it."""
    out = tmp_path / "results"
    port = free_port()
    r = run_cli(
        "probe", "--emit", "slurm", "--nodes", "2", "--gpus-per-node", "1", "--fabric", "tcp",
        "--socket-ifname", "lo", "--port", str(port), "--cpus-per-task", "1",
        "--setup", f"source {shlex.quote(str(REPO / '.venv/bin/activate'))}",
        "--quick", "--only", "collectives", "--device", "cpu", "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (script,) = out.glob("*.sbatch")
    bin_dir = tmp_path / "bin"
    _stand_ins(bin_dir)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "SLURM_JOB_NODELIST": "node[001-002]",
    }
    job = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert job.returncode == 0, job.stderr[-3000:]
    files = load_results([out])
    assert len(files) == 1  # only rank 0 wrote
    path, doc = files[0]
    listed = job.stdout.split("gpuplan: result files of this job:\n", 1)[1].split()
    assert listed == [str(Path(path).resolve())]
    (coll,) = doc.probes
    assert coll.status == "ok", coll.error
    assert coll.params["launcher"] == "torchrun" and coll.params["num_nodes"] == 2
    assert {m["scope"] for m in coll.measurements} == {"inter"}
    assert all(m["correct"] for m in coll.measurements)
    # the fabric environment reached the ranks and is recorded (allowlisted NCCL_/GLOO_)
    assert doc.env["NCCL_NET"] == "Socket" and doc.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert not list(out.rglob(".gpuplan-probe-start*"))


def test_docstring_examples():
    import doctest

    from gpuplan.probes import emit

    failures, tried = doctest.testmod(emit, verbose=False)
    assert tried > 0 and failures == 0


def test_cli_slurm_without_fabric_leaves_it_to_nccl_and_says_so(run_cli, tmp_path):
    # DESIGN 3.3's `gpuplan probe --emit slurm --nodes N` keeps working
    out = tmp_path / "emit"
    r = run_cli("probe", "--emit", "slurm", "--nodes", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "--fabric" in warning[0] and "TCP" in warning[0]
    assert "not pinned" in r.stdout and "NCCL_NET" not in r.stdout
    k8s = run_cli(
        "probe", "--emit", "k8s", "--nodes", "2", "--image", "r/g:1", "--cpus-per-task", "8",
        "--memory", "64Gi", "--out", str(tmp_path / "k"),
    )  # fmt: skip
    assert k8s.returncode == 2 and len(k8s.stderr.strip().splitlines()) == 1
    assert "--fabric" in k8s.stderr and not (tmp_path / "k").exists()
