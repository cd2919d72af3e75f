"""``gpuplan probe``: measure this node (or emit a launcher for several)."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    fmt_duration,
    fmt_si,
    info,
    make_app,
    progress,
    simple_table,
    warn,
)

HELP = """Measure this node: matmul, memory bandwidth, host-device copies, collectives, storage.

Each probe is timed with warmups kept apart, loops calibrated so that one sample lasts
long enough, and repeated samples (median and spread); results are checked for
correctness. A probe that fails is recorded as failed with its reason and the suite goes
on; Ctrl-C (or SIGTERM) still writes what was measured, the interrupted probe's points
included. The result file goes to --out (never overwriting); --format json prints the
same document on stdout. While it runs, <file>.partial.json beside it holds what is
finished (a killed run leaves it; 'gpuplan results ls' lists it). One probe run per
machine at a time: a second one is refused and told which run holds the machine.
Before the first probe the planned duration (per probe, for the GPUs found) is printed
on stderr and kept in the result beside what each probe took.

\b
Examples:
  gpuplan probe --quick                         the whole suite (planned ~3 min on 8 GPUs)
  gpuplan probe                                 the full sweep (planned ~21 min on 8 GPUs)
  gpuplan probe --only matmul,membw --device cpu
  gpuplan probe --storage-path /mnt/nvme --storage-size 8G
  gpuplan probe --quick --format json > run.json
  gpuplan probe --soak 10                       10 min of matmul on every GPU: clocks, temperature,
                                                power, energy and throttle reasons every second
  gpuplan probe --emit slurm --nodes 2 --gpus-per-node 8 --fabric ib   sbatch script, 2 nodes
  gpuplan probe --emit k8s --nodes 4 --fabric ib --image registry/gpuplan:0.1 \\
      --cpus-per-task 96 --memory 1800Gi --queue team-a --results-s3 s3://bucket/gpuplan
  gpuplan probe --workload serve --endpoint http://127.0.0.1:8000 --model meta-llama/Llama-3.1-8B \\
      --engine vllm --catalog-model llama3.1-8b --concurrency 1,2,4,8
                                                serving sweep of your own server (docs/probes.md)
  gpuplan probe --workload train --model llama3.1-8b --tp 8 --seq-len 8192 --framework torchtitan
                                                training step of the model's blocks (docs/probes.md)
"""

app = make_app(HELP, single=True)

#: the suite's probes (gpuplan.probes.suite.PROBES, not imported here: a light --help)
PROBE_NAMES = ("matmul", "membw", "pcie", "p2p", "collectives", "storage", "health")


class Device(str, enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Workload(str, enum.Enum):
    serve = "serve"
    train = "train"


class Emit(str, enum.Enum):
    slurm = "slurm"
    k8s = "k8s"


class Fabric(str, enum.Enum):
    auto = "auto"
    ib = "ib"
    roce = "roce"
    efa = "efa"
    tcp = "tcp"


class K8sForm(str, enum.Enum):
    jobset = "jobset"
    indexed_job = "indexed-job"


def _storage_size_bytes(text: str) -> int:
    """--storage-size in bytes ('8G' = 8 GiB like fio, '8GB' = 8e9: :mod:`gpuplan.units`)."""
    from gpuplan.errors import InputError
    from gpuplan.units import parse_size_bytes

    size = parse_size_bytes(text, strict=True, what="--storage-size")
    if size < 16 << 20:
        raise InputError(f"--storage-size {text} is too small", hint="use at least 16M")
    return size


class _BarAdapter:
    """gpuplan.probes.base.Progress on top of a rich Progress."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def task(self, description: str, total: int) -> Any:
        bar, task_id = self.bar, self.bar.add_task(description, total=max(1, total))

        class _Task:
            def advance(self, n: int = 1) -> None:
                bar.advance(task_id, n)

        return _Task()


def _forwarded_args(
    quick: bool,
    only: str | None,
    device: Device,
    storage_path: str | None,
    storage_size: str | None,
) -> list[str]:
    args = []
    if quick:
        args.append("--quick")
    if only:
        args += ["--only", only]
    if device != Device.auto:
        args += ["--device", device.value]
    if storage_path:
        args += ["--storage-path", storage_path]
    if storage_size:
        args += ["--storage-size", storage_size]
    return args


def _summary_table(doc: Any, path: Path | None) -> Any:
    from gpuplan.results.summary import headline, variant

    rows = []
    for p in doc.probes:
        head = headline(p)
        figure = f"{fmt_si(head['value'], head['unit'])} ({head['label']})" if head else "-"
        note = p.error or ("; ".join(p.warnings) if p.warnings else "")
        rows.append(
            [
                p.probe,
                variant(p),
                p.status,
                len(p.measurements),
                figure,
                fmt_duration(p.duration_s),
                note[:90],
            ]
        )
    caption = f"written to {path}" if path else None
    if doc.interrupted:
        caption = (caption + "; " if caption else "") + "interrupted: partial results"
    return simple_table(
        f"gpuplan probe {doc.run_id[:8]}",
        ["probe", "variant", "status", "points", "headline", "time", "note"],
        rows,
        caption=caption,
    )


@app.command(help=HELP)
def probe(
    quick: bool = typer.Option(
        False, "--quick", help="Short sweeps: the whole suite in about a minute."
    ),
    only: str = typer.Option(
        None,
        "--only",
        help=f"Comma-separated probes to run: {', '.join(PROBE_NAMES)} (default: all).",
    ),
    device: Device = typer.Option(
        Device.auto, "--device", help="auto: GPUs when torch sees any, else the CPU."
    ),
    storage_path: str = typer.Option(
        None,
        "--storage-path",
        help="Directory on the filesystem to probe with fio (default: under --out).",
    ),
    storage_size: str = typer.Option(
        None,
        "--storage-size",
        help="Size of the fio test file: 4G or 4GiB = 4 GiB (like fio), 4GB = 4e9 B "
        "(default: 128M quick, 4G full).",
    ),
    out: Path = typer.Option(
        Path("results"),
        "--out",
        envvar="GPUPLAN_RESULTS",
        help="Directory of result files (one file per run).",
    ),
    ranks: int = typer.Option(
        2, "--ranks", help="gloo ranks (processes) for collectives without GPUs."
    ),
    timeout: float = typer.Option(
        None, "--timeout", help="Time budget per probe in seconds (default: none)."
    ),
    record_hostname: bool = typer.Option(
        False,
        "--record-hostname",
        help="Record the hostname in the result (off: only a hashed machine id).",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars on stderr."),
    # --- launchers for several nodes (gpuplan.probes.emit) -----------------------------------
    emit_kind: Emit = typer.Option(
        None, "--emit", help="Write a launcher for several nodes instead: slurm or k8s."
    ),
    nodes: int = typer.Option(None, "--nodes", help="With --emit: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="With --emit: GPUs per node."),
    fabric: Fabric = typer.Option(
        None,
        "--fabric",
        help="With --emit: the inter-node network NCCL must use: ib, roce, efa or tcp (sets "
        "NCCL_NET/NCCL_IB_*/FI_PROVIDER=efa; NCCL fails rather than fall back); required for "
        "k8s; Slurm without it: auto (NCCL picks, said in the script and on stderr).",
    ),
    ib_hca: str = typer.Option(
        None, "--ib-hca", help="With --fabric ib|roce: NCCL_IB_HCA (e.g. mlx5_0,mlx5_1)."
    ),
    socket_ifname: str = typer.Option(
        None,
        "--socket-ifname",
        help="With --emit: NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (default: NCCL's choice on "
        "Slurm, eth0 on k8s).",
    ),
    port: int = typer.Option(
        29500, "--port", help="With --emit: torchrun rendezvous port on the first node."
    ),
    image: str = typer.Option(
        None,
        "--image",
        help="With --emit: container image with gpuplan (build it from the Dockerfile). "
        "Required for k8s; for slurm, runs srun under pyxis/enroot --container-image.",
    ),
    cpus_per_task: int = typer.Option(
        None,
        "--cpus-per-task",
        help="With --emit: CPUs of each node's task/pod (slurm default: all of the node; "
        "required for k8s: requests = limits).",
    ),
    partition: str = typer.Option(None, "--partition", help="With --emit slurm: partition."),
    account: str = typer.Option(None, "--account", help="With --emit slurm: account."),
    time_limit: str = typer.Option("00:30:00", "--time", help="With --emit slurm: time limit."),
    setup: str = typer.Option(
        None,
        "--setup",
        help="With --emit slurm: shell line before srun (default: 'source .venv/bin/activate' "
        "without --image, none with it).",
    ),
    k8s_form: K8sForm = typer.Option(
        K8sForm.jobset,
        "--k8s-form",
        help="With --emit k8s: jobset (JobSet controller) or indexed-job (Indexed Job + "
        "headless Service).",
    ),
    memory: str = typer.Option(
        None,
        "--memory",
        help="With --emit k8s (required): memory per pod, a quantity such as 1500Gi "
        "(requests = limits: Guaranteed QoS).",
    ),
    queue: str = typer.Option(
        None, "--queue", help="With --emit k8s: Kueue LocalQueue (gang admission of all pods)."
    ),
    namespace: str = typer.Option(None, "--namespace", help="With --emit k8s: namespace."),
    results_pvc: str = typer.Option(
        None,
        "--results-pvc",
        help="With --emit k8s: ReadWriteMany PersistentVolumeClaim for /results.",
    ),
    results_s3: str = typer.Option(
        None, "--results-s3", help="With --emit k8s: s3://BUCKET/PREFIX pod 0 uploads to."
    ),
    results_s3_secret: str = typer.Option(
        None,
        "--results-s3-secret",
        help="With --results-s3: secret with AWS_ACCESS_KEY_ID etc. (default: the pod's "
        "service account).",
    ),
    rdma_resource: str = typer.Option(
        None,
        "--rdma-resource",
        help="With --emit k8s: RDMA device-plugin resource (default: rdma/ib for ib/roce, "
        "vpc.amazonaws.com/efa for efa).",
    ),
    rdma_count: int = typer.Option(
        None,
        "--rdma-count",
        help="With --emit k8s: RDMA devices per pod (default 1; required for efa: the "
        "instance's EFA interfaces).",
    ),
    # --- serving workload (gpuplan.probes.serve) -------------------------------------------
    workload: Workload = typer.Option(
        None,
        "--workload",
        help="serve: a concurrency sweep against an OpenAI-compatible server; train: forward, "
        "backward and AdamW of real transformer blocks of --model's shapes.",
    ),
    endpoint: str = typer.Option(
        None, "--endpoint", help="With --workload serve: server URL (http://host:8000)."
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="With --workload serve: served model name; train: catalog model whose blocks run.",
    ),
    concurrency: str = typer.Option(
        "1,2,4,8", "--concurrency", help="With --workload serve: requests in flight per level."
    ),
    input_tokens: int = typer.Option(
        128, "--input-tokens", help="With --workload serve: prompt length (tokens)."
    ),
    output_tokens: int = typer.Option(
        64, "--output-tokens", help="With --workload serve: max_tokens of every request."
    ),
    requests_per_level: int = typer.Option(
        16, "--requests-per-level", help="With --workload serve: requests at each level."
    ),
    spec_tokens: int = typer.Option(
        None,
        "--spec-tokens",
        help="With --workload serve: draft tokens per step of a server that runs speculative "
        "decoding but does not name it in its metrics (read from vLLM, SGLang and "
        "TensorRT-LLM metrics otherwise).",
    ),
    engine: str = typer.Option(
        "modern",
        "--engine",
        help="With --workload serve: the server's engine (vllm, sglang, trtllm, vllm@0.6.0 ...), "
        "for calibration.",
    ),
    catalog_model: str = typer.Option(
        None,
        "--catalog-model",
        help="With --workload serve: catalog model the server runs (default: --model, if it "
        "resolves), for calibration.",
    ),
    device_id: str = typer.Option(
        None,
        "--device-id",
        help="With --workload serve|train: catalog GPU the run stands for (default: this "
        "node's GPU).",
    ),
    serve_tp: int = typer.Option(
        1, "--tp", help="With --workload serve: the server's TP; train: TP group size."
    ),
    serve_precision: str = typer.Option(
        "bf16", "--precision", help="With --workload serve: the server's weight precision."
    ),
    # --- training-step workload (gpuplan.probes.train) ---------------------------------------
    framework: str = typer.Option(
        None,
        "--framework",
        help="With --workload train: the framework the factor calibrates (megatron, "
        "torchtitan ...; default pytorch-eager: used for any framework without its own).",
    ),
    seq_len: int = typer.Option(
        None, "--seq-len", help="With --workload train: tokens per sequence (GPU 4096, CPU 128)."
    ),
    micro_batch: int = typer.Option(
        None, "--micro-batch", help="With --workload train: sequences per micro-batch (1)."
    ),
    blocks: int = typer.Option(2, "--blocks", help="With --workload train: blocks stacked."),
    scale: int = typer.Option(
        None,
        "--scale",
        help="With --workload train: divide hidden/heads/ffn by this (default 1 on a GPU, "
        "about hidden/256 on a CPU).",
    ),
    # --- soak (gpuplan.probes.soak) ---------------------------------------------------------
    soak: float = typer.Option(
        None,
        "--soak",
        help="Minutes of sustained matmul on every GPU at once, sampling clocks, temperature, "
        "power, energy and throttle reasons (instead of the suite).",
    ),
    soak_interval: float = typer.Option(
        1.0, "--soak-interval", help="With --soak: seconds between two samples."
    ),
    # ----------------------------------------------------------------------------------------
    fmt: Format = FORMAT_OPTION,
) -> None:
    from gpuplan.errors import InputError

    if soak is not None:
        _soak(
            soak,
            soak_interval,
            workload=workload,
            only=only,
            emitting=emit_kind is not None,
            device=device,
            out=out,
            timeout=timeout,
            record_hostname=record_hostname,
            no_progress=no_progress,
            fmt=fmt,
        )
        return

    if workload == Workload.train:
        _train(
            model=model,
            framework=framework,
            seq_len=seq_len,
            micro_batch=micro_batch,
            blocks=blocks,
            scale=scale,
            tp=serve_tp,
            precision=serve_precision,
            device_id=device_id,
            device=device,
            quick=quick,
            out=out,
            timeout=timeout,
            record_hostname=record_hostname,
            no_progress=no_progress,
            fmt=fmt,
        )
        return
    if workload is not None:
        _serve(
            endpoint=endpoint,
            model=model,
            concurrency=concurrency,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            requests_per_level=requests_per_level,
            spec_tokens=spec_tokens,
            engine=engine,
            catalog_model=catalog_model,
            device_id=device_id,
            tp=serve_tp,
            precision=serve_precision,
            device=device,
            out=out,
            timeout=timeout,
            record_hostname=record_hostname,
            no_progress=no_progress,
            fmt=fmt,
        )
        return
    if endpoint is not None or model is not None:
        raise InputError(
            "--endpoint and --model only apply with --workload serve",
            hint="add --workload serve",
        )
    if only is not None:
        from gpuplan.probes.suite import parse_only

        parse_only(only)
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})", hint="e.g. --timeout 300")
    size_bytes = _storage_size_bytes(storage_size) if storage_size else None
    if emit_kind is None and nodes is not None:
        raise InputError("--nodes only applies with --emit", hint="add --emit slurm or --emit k8s")
    if emit_kind is not None:
        _emit(
            emit_kind,
            out,
            fmt,
            _forwarded_args(quick, only, device, storage_path, storage_size),
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            fabric=fabric,
            ib_hca=ib_hca,
            socket_ifname=socket_ifname,
            port=port,
            image=image,
            cpus_per_task=cpus_per_task,
            partition=partition,
            account=account,
            time_limit=time_limit,
            setup=setup,
            k8s_form=k8s_form,
            memory=memory,
            queue=queue,
            namespace=namespace,
            results_pvc=results_pvc,
            results_s3=results_s3,
            results_s3_secret=results_s3_secret,
            rdma_resource=rdma_resource,
            rdma_count=rdma_count,
        )
        return
    _run(
        quick,
        only,
        device,
        storage_path,
        size_bytes,
        out,
        ranks,
        timeout,
        record_hostname,
        no_progress,
        fmt,
    )


def _emit(
    kind: Emit,
    out: Path,
    fmt: Format,
    probe_args: list[str],
    *,
    nodes: int | None,
    gpus_per_node: int,
    fabric: Fabric | None,
    ib_hca: str | None,
    socket_ifname: str | None,
    port: int,
    image: str | None,
    cpus_per_task: int | None,
    partition: str | None,
    account: str | None,
    time_limit: str,
    setup: str | None,
    k8s_form: K8sForm,
    memory: str | None,
    queue: str | None,
    namespace: str | None,
    results_pvc: str | None,
    results_s3: str | None,
    results_s3_secret: str | None,
    rdma_resource: str | None,
    rdma_count: int | None,
) -> None:
    from gpuplan.errors import InputError
    from gpuplan.probes import emit as emitters

    if nodes is None:
        raise InputError(
            "--emit needs --nodes N", hint="e.g. --emit slurm --nodes 2 --gpus-per-node 8"
        )
    if fabric in (None, Fabric.auto) and kind.value == "k8s":
        raise InputError(
            "--emit k8s needs --fabric ib|roce|efa|tcp: the pods' RDMA device resources "
            "and NCCL's network follow from it",
            hint="InfiniBand: --fabric ib; AWS: --fabric efa; Ethernet without RDMA: --fabric tcp",
        )
    fabric_unpinned = fabric is None
    if fabric is None:
        fabric = Fabric.auto
    given = {
        "slurm": {"--partition": partition, "--account": account, "--setup": setup},
        "k8s": {
            "--memory": memory,
            "--queue": queue,
            "--namespace": namespace,
            "--results-pvc": results_pvc,
            "--results-s3": results_s3,
            "--results-s3-secret": results_s3_secret,
            "--rdma-resource": rdma_resource,
            "--rdma-count": rdma_count,
        },
    }
    other = "k8s" if kind == Emit.slurm else "slurm"
    wrong = [option for option, value in given[other].items() if value is not None]
    if wrong:
        raise InputError(
            f"{', '.join(wrong)} only apply with --emit {other}", hint=f"drop {wrong[0]}"
        )
    if kind == Emit.slurm:
        text = emitters.slurm_script(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            fabric=fabric.value,
            probe_args=probe_args,
            out_dir=str(out),
            partition=partition,
            account=account,
            time_limit=time_limit,
            cpus_per_task=cpus_per_task,
            container_image=image,
            port=port,
            ib_hca=ib_hca,
            socket_ifname=socket_ifname,
            setup=setup,
        )
        name = f"gpuplan-probe-{nodes}x{gpus_per_node}.sbatch"
    else:
        missing = [
            option
            for option, value in (
                ("--image", image),
                ("--cpus-per-task", cpus_per_task),
                ("--memory", memory),
            )
            if value is None
        ]
        if missing:
            raise InputError(
                f"--emit k8s needs {', '.join(missing)}",
                hint="--image: build and push the repo's Dockerfile; --cpus-per-task and "
                "--memory: the pod's share of the node (requests = limits, Guaranteed QoS)",
            )
        assert image is not None and cpus_per_task is not None and memory is not None
        text = emitters.k8s_manifest(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            image=image,
            fabric=fabric.value,
            cpus_per_pod=cpus_per_task,
            memory=memory,
            results_pvc=results_pvc,
            results_s3=results_s3,
            results_s3_secret=results_s3_secret,
            form=k8s_form.value,
            probe_args=probe_args,
            namespace=namespace,
            queue=queue,
            rdma_resource=rdma_resource,
            rdma_count=rdma_count,
            port=port,
            ib_hca=ib_hca,
            socket_ifname=socket_ifname or "eth0",
        )
        name = f"gpuplan-probe-{nodes}x{gpus_per_node}.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path = _write_new(out / name, text)
    if fabric_unpinned:
        from gpuplan.cli._common import warn

        warn(
            "--fabric not given: the script leaves the network to NCCL, which may fall back "
            "to TCP sockets; pin it with --fabric ib|roce|efa|tcp"
        )
    data = {
        "emit": kind.value,
        "path": str(path),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "fabric": fabric.value,
        "form": k8s_form.value if kind == Emit.k8s else "sbatch",
        "text": text,
    }

    def table(console: Any) -> None:
        # the script itself, byte for byte: a console would wrap it at its width (80 columns
        # on a pipe), which breaks `> job.sbatch` and `| kubectl apply -f -`
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError:
            pass
        info(
            f"wrote {path}"
            + (
                "  (submit: sbatch " + str(path) + ")"
                if kind == Emit.slurm
                else f"  (apply: kubectl apply -f {path})"
            )
        )

    emit(data, fmt, table)


def _write_new(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` or a numbered sibling; never overwrite."""
    for i in range(1000):
        candidate = path if i == 0 else path.with_name(f"{path.stem}.{i}{path.suffix}")
        try:
            with open(candidate, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            continue
        if candidate.suffix == ".sbatch":
            candidate.chmod(0o755)
        return candidate
    raise FileExistsError(path)


def _print_document(doc: Any) -> None:
    import json

    try:
        sys.stdout.write(json.dumps(doc.model_dump(mode="json"), indent=2) + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def _run(
    quick: bool,
    only: str | None,
    device: Device,
    storage_path: str | None,
    size_bytes: int | None,
    out: Path,
    ranks: int,
    timeout: float | None,
    record_hostname: bool,
    no_progress: bool,
    fmt: Format,
    workload: dict[str, Any] | None = None,
) -> None:
    from gpuplan.probes.suite import ResultNotSaved, SuiteOptions, parse_only, run_suite

    work = dict(workload or {})
    probe_name = str(work.pop("_probe", "serve"))  # the workload probe (serve, train)
    options = SuiteOptions(
        only=(probe_name,) if work else parse_only(only),
        workload=work,
        quick=quick,
        device=device.value,
        storage_path=storage_path,
        storage_size_bytes=size_bytes,
        out_dir=str(out),
        record_hostname=record_hostname,
        gloo_ranks=ranks,
        probe_timeout_s=timeout,
        argv=["gpuplan", *sys.argv[1:]],
    )
    try:
        with progress(enabled=not no_progress) as bar:
            outcome = run_suite(
                options,
                progress=_BarAdapter(bar) if not no_progress else None,
                on_plan=lambda budget: info(f"gpuplan: {budget.text()}"),
            )
    except ResultNotSaved as exc:
        if exc.rescue is None:  # nowhere on disk: the run goes to stdout, never lost
            _print_document(exc.document)
        raise
    if outcome.rank != 0:
        return  # under torchrun only rank 0 reports
    doc = outcome.document
    if outcome.path is not None:
        info(f"gpuplan: wrote {outcome.path}")
    for p in doc.probes:
        if p.status in ("failed", "interrupted"):
            warn(f"{p.probe} {p.params.get('dtype') or ''}: {p.status}: {p.error}")
    emit(
        doc.model_dump(mode="json"),
        fmt,
        lambda console: console.print(_summary_table(doc, outcome.path)),
    )
    if outcome.interrupted:
        raise typer.Exit(130)


def _serve(
    *,
    endpoint: str | None,
    model: str | None,
    concurrency: str,
    input_tokens: int,
    output_tokens: int,
    requests_per_level: int,
    spec_tokens: int | None,
    engine: str,
    catalog_model: str | None,
    device_id: str | None,
    tp: int,
    precision: str,
    device: Device,
    out: Path,
    timeout: float | None,
    record_hostname: bool,
    no_progress: bool,
    fmt: Format,
) -> None:
    """``--workload serve``: check the endpoint, run the sweep as a one-probe suite."""
    import contextlib

    from gpuplan.catalogs import get_catalog
    from gpuplan.errors import InputError, NotFoundError
    from gpuplan.forecast.inference_step import engine_profile
    from gpuplan.probes.serve import ServeOptions, check_endpoint, parse_concurrency

    if not endpoint or not model:
        raise InputError(
            "--workload serve needs --endpoint URL and --model NAME",
            hint="e.g. --endpoint http://127.0.0.1:8000 --model meta-llama/Llama-3.1-8B",
        )
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})", hint="e.g. --timeout 300")
    if tp <= 0:
        raise InputError(f"--tp must be positive (got {tp})")
    options = ServeOptions(
        endpoint=endpoint,
        model=model,
        concurrency=parse_concurrency(concurrency),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests_per_level=requests_per_level,
        spec_tokens=spec_tokens,
    )
    catalog = get_catalog()
    labels: dict[str, Any] = {
        "engine": engine_profile(engine).name,
        "tp": tp,
        "precision": precision,
    }
    if device_id is not None:
        labels["device_id"] = catalog.gpu(device_id).id
    if catalog_model is not None:
        labels["catalog_model"] = catalog.model(catalog_model).id
    else:
        # without a catalog model the run is kept, and calibration says it cannot forecast it
        with contextlib.suppress(NotFoundError):
            labels["catalog_model"] = catalog.model(model).id
    check_endpoint(options)
    from dataclasses import asdict

    workload = {**asdict(options), **labels}
    _run(
        False,
        "serve",
        device,
        None,
        None,
        out,
        2,
        timeout,
        record_hostname,
        no_progress,
        fmt,
        workload=workload,
    )


def _train(
    *,
    model: str | None,
    framework: str | None,
    seq_len: int | None,
    micro_batch: int | None,
    blocks: int,
    scale: int | None,
    tp: int,
    precision: str,
    device_id: str | None,
    device: Device,
    quick: bool,
    out: Path,
    timeout: float | None,
    record_hostname: bool,
    no_progress: bool,
    fmt: Format,
) -> None:
    """``--workload train``: the model's blocks, timed as a one-probe suite."""
    from dataclasses import asdict

    from gpuplan.catalogs import get_catalog
    from gpuplan.errors import InputError
    from gpuplan.probes.train import DEFAULT_FRAMEWORK, TrainOptions, block_shape_from_catalog

    if not model:
        raise InputError(
            "--workload train needs --model ID (a catalog model)",
            hint="e.g. --model llama3.1-8b; 'gpuplan catalog models' lists them",
        )
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})", hint="e.g. --timeout 300")
    catalog = get_catalog()
    row = catalog.model(model)
    shape, notes = block_shape_from_catalog(row)
    options = TrainOptions(
        model=row.id,
        shape=shape.as_dict(),
        approximations=notes,
        framework=(framework or DEFAULT_FRAMEWORK).strip().lower(),
        seq_len=seq_len,
        micro_batch=micro_batch,
        tp=tp,
        blocks=blocks,
        scale=scale,
        precision=precision,
        device_id=catalog.gpu(device_id).id if device_id is not None else None,
    )
    shape.check_tp(tp)
    _run(
        quick,
        "train",
        device,
        None,
        None,
        out,
        2,
        timeout,
        record_hostname,
        no_progress,
        fmt,
        workload={**asdict(options), "_probe": "train"},
    )


#: the longest soak (minutes): a day; longer runs are a burn-in, not a trial-node probe
MAX_SOAK_MIN = 24 * 60


def _soak(
    minutes: float,
    interval_s: float,
    *,
    workload: Any,
    only: str | None,
    emitting: bool,
    device: Device,
    out: Path,
    timeout: float | None,
    record_hostname: bool,
    no_progress: bool,
    fmt: Format,
) -> None:
    """``--soak MINUTES``: :mod:`gpuplan.probes.soak` as a one-probe suite."""
    from gpuplan.errors import InputError

    if workload is not None or only is not None or emitting:
        raise InputError(
            "--soak runs on its own: drop --workload, --only and --emit",
            hint="run the suite and the soak as two commands",
        )
    if not 0 < minutes <= MAX_SOAK_MIN:
        raise InputError(
            f"--soak must be between 0 and {MAX_SOAK_MIN} minutes (got {minutes:g})",
            hint="e.g. --soak 10",
        )
    if not 0 < interval_s <= minutes * 60:
        raise InputError(
            f"--soak-interval must be positive and at most the soak (got {interval_s:g} s)",
            hint="e.g. --soak-interval 1",
        )
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})", hint="e.g. --timeout 300")
    _run(
        False,
        "soak",
        device,
        None,
        None,
        out,
        2,
        timeout,
        record_hostname,
        no_progress,
        fmt,
        workload={"_probe": "soak", "duration_s": minutes * 60.0, "interval_s": interval_s},
    )
