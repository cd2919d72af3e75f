"""collective_time_s across nodes: nccl-tests' size convention, scaling, no stray warnings,
and the forecast path free of scikit-learn, scipy.optimize, pandas and torch."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.calibration import device_perf
from gpuplan.calibration.curves import COLLECTIVE_OPS, busbw_factor

#: NVSwitch (ring/tree/NVLS), NVL72, an xGMI mesh: the fabrics the reference set measured.
DEVICES = ("h100", "b200", "a100", "gb200", "mi300x")


def _size(op: str, per_rank: float, ranks: float) -> float:
    """nccl-tests ``size`` for ``per_rank`` bytes per rank (the gathered output for an
    all-gather, one rank's buffer otherwise; for an all-to-all that buffer holds
    ``size / ranks`` for each peer)."""
    return per_rank * ranks if op == "all_gather" else per_rank


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    device=st.sampled_from(DEVICES),
    op=st.sampled_from(COLLECTIVE_OPS),
    per_rank=st.floats(min_value=8.0, max_value=2.0**34),
    rpn=st.sampled_from([1, 2, 4, 8]),
    nodes=st.integers(min_value=1, max_value=4096),
    nic=st.sampled_from([None, 12.5e9, 25e9, 50e9, 100e9]),
)
def test_time_grows_with_nodes_at_a_fixed_size_per_rank(device, op, per_rank, rpn, nodes, nic):
    """Full nodes of ``rpn`` ranks, from one node (intra) up: more nodes never go faster,
    a larger message never goes faster."""
    perf = device_perf(device)
    N = np.unique(np.array([1, 2, 3, 4, 8, 16, 64, 512, nodes, nodes + 1], dtype=float))
    N = N[rpn * N >= 2]
    n = rpn * N

    def t(per_rank_bytes: float) -> np.ndarray:
        est = perf.collective_time_s(
            op,
            _size(op, per_rank_bytes, n),
            n,
            ranks_per_node=rpn,
            inter_node_bandwidth_bytes_per_s=nic,
        )
        assert np.all(est.low <= est.value) and np.all(est.value <= est.high)
        return est.value

    base = t(per_rank)
    assert np.all(np.diff(base) >= -1e-12 * base[1:]), dict(
        zip(N.tolist(), base.tolist(), strict=True)
    )
    assert np.all(t(per_rank * 2.0) >= base * (1 - 1e-12))


@pytest.mark.parametrize("device", ["h100", "b200", "gb200"])
@pytest.mark.parametrize("op", COLLECTIVE_OPS)
def test_time_grows_with_ranks_inside_a_switched_domain(device, op):
    """On a switch (NVSwitch, NVL72) more ranks never go faster at a fixed size per rank.
    (A switchless mesh is the exception: two MI300X use one of the seven xGMI links.)"""
    perf = device_perf(device)
    domain = perf.spec.scale_up_domain_size
    n = np.arange(2, domain + 1, dtype=float)
    for per_rank in (2.0**4, 2.0**20, 2.0**30):
        t = perf.collective_time_s(op, _size(op, per_rank, n), n).value
        assert np.all(np.diff(t) >= -1e-12 * t[1:]), (op, per_rank)


def test_all_to_all_and_all_gather_grow_across_nodes_like_the_hand_computed_case():
    """H100, 8 ranks per node, 50 GB/s NIC share per GPU at the calibrated NIC efficiency.

    all-to-all of 1 GiB per rank over 2 nodes: half of it leaves through each GPU's own NIC
    share (0.5 GiB / B); over 64 nodes 63/64 of it: the time grows with the nodes at a fixed
    buffer per rank, and is far above the one-node time. all-gather of 64 MiB per rank over
    N nodes moves (N-1) x 64 MiB through each NIC share.
    """
    perf = device_perf("h100")
    nic = 50e9
    entry = perf._entry(("inter", "all_to_all", 8.0))
    b = nic * (entry.get("fraction") or perf._pooled_nic_fraction())
    t8 = perf.collective_time_s("all_to_all", 2**30, 8).value
    t16 = perf.collective_time_s(
        "all_to_all", 2**30, 16, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=nic
    ).value
    t512 = perf.collective_time_s(
        "all_to_all", 2**30, 512, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=nic
    ).value
    assert t16 >= 2**30 * 0.5 / b > 3 * t8
    assert t512 >= 2**30 * 63 / 64 / b
    s = 64 * 2**20
    for nodes in (2, 4, 16, 64):
        n = 8 * nodes
        t = perf.collective_time_s(
            "all_gather", s * n, n, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=nic
        ).value
        assert t >= (nodes - 1) * s / b
    # at a fixed total size, where the network binds, the time follows nccl-tests' factor
    # (N-1)/N over the nodes: the rail of each GPU runs the all-gather between nodes
    big, slow_nic = 2.0**36, 12.5e9
    ag = [
        perf.collective_time_s(
            "all_gather", big, 8 * N, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=slow_nic
        ).value
        for N in (2, 4)
    ]
    assert ag[1] / ag[0] == pytest.approx(busbw_factor("all_gather", 4.0) / 0.5, rel=0.01)


def _no_warnings(fn):
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        return fn()


def test_no_warning_for_any_catalog_accelerator(catalog):
    """The summary and the collectives a forecast asks for, on every catalog accelerator,
    raise no RuntimeWarning (divide by zero in the intra-node bus bandwidth)."""
    for gpu in catalog.gpus:
        perf = device_perf(gpu.id)
        summary = _no_warnings(perf.summary)
        assert all(np.isfinite(e.value) for e in summary.values()), gpu.id
        for op in COLLECTIVE_OPS:
            for rpn in (1, 8):
                if rpn > 1 and not perf._intra_candidates(op):
                    continue  # no scale-up fabric: only one rank per node can be modelled
                t = _no_warnings(
                    lambda op=op, rpn=rpn, perf=perf: perf.collective_time_s(
                        op,
                        np.array([2.0**10, 2.0**30]),
                        np.array([16.0, 1024.0]),
                        ranks_per_node=rpn,
                        inter_node_bandwidth_bytes_per_s=50e9,
                    )
                )
                assert np.all(np.isfinite(t.value)) and np.all(t.value > 0), (gpu.id, op)


def test_no_warning_when_a_device_is_transferred_on_the_fly(catalog):
    """A device the artifact does not list (added to the catalog later) is transferred from
    the measured ones when asked, one rank per node included."""
    from gpuplan.calibration.artifact import load_artifact

    artifact = copy.deepcopy(load_artifact())
    gone = "h200-sxm-141gb"
    for model in artifact["models"].values():
        model["coefficients"]["devices"].pop(gone, None)
    artifact["devices"].pop(gone)
    artifact["device_specs"].pop(gone)
    perf = device_perf(gone, artifact)
    _no_warnings(perf.summary)
    for op in COLLECTIVE_OPS:
        t = _no_warnings(
            lambda op=op: perf.collective_time_s(
                op, 2.0**26, 64, ranks_per_node=1, inter_node_bandwidth_bytes_per_s=50e9
            )
        )
        assert np.isfinite(t.value) and t.value > 0
    assert perf.summary()["matmul_bf16_flops_per_s"].basis == "transferred"


_HEAVY = ("sklearn", "scipy.optimize", "pandas", "torch")


def _modules_after(code: str) -> tuple[dict, subprocess.CompletedProcess]:
    probe = (
        "import json, sys\n"
        + code
        + f"\nprint(json.dumps({{m: m in sys.modules for m in {_HEAVY!r}}}), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.strip().splitlines()[-1]), proc


def test_device_perf_imports_no_fitting_library():
    """Evaluating a calibrated device is closed-form numpy: no scikit-learn, scipy.optimize,
    pandas or torch in the process (they cost a forecast over a second of start-up)."""
    loaded, _ = _modules_after(
        "import gpuplan.calibration\n"
        "perf = gpuplan.calibration.device_perf('h100')\n"
        "perf.matmul_flops_per_s(8192, 8192, 8192, 'bf16')\n"
        "perf.collective_time_s('all_reduce', 2**30, 64, inter_node_bandwidth_bytes_per_s=50e9)\n"
        "perf.collective_time_s('reduce_scatter', 2**30, 64, ranks_per_node=1)\n"
        "perf.collective_time_s('all_to_all', 2**26, 8)\n"
        "perf.summary()\n"
    )
    assert not any(loaded.values()), loaded


def test_training_forecast_imports_no_fitting_library():
    loaded, proc = _modules_after(
        "from gpuplan.cli.main import main\n"
        "rc = main(['forecast', 'train', '--model', 'llama3.1-405b', '--gpu', 'h100',\n"
        "           '--gpus', '16384', '--tokens', '15.6e12', '--format', 'json'])\n"
        "assert rc == 0, rc\n"
    )
    assert not any(loaded.values()), loaded
    assert "Warning" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["step_time_s"] > 0
