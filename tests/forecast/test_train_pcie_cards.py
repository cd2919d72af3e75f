"""Training on PCIe cards without a scale-up fabric (L40S, L4).

`forecast train --gpu l40s` used to stop with 'no collective model': the layout search
evaluated the context-parallel ring's point-to-point send for every layout, CP 1 included,
and a CP 1 layout's two 'ranks' sat in one node, where a card without NVLink has no
intra-node model. Only the groups that communicate are now asked of the device model.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.forecast import comm
from gpuplan.forecast.train import forecast_training


class _Recorder:
    """A device model that answers only inter-node groups (ranks_per_node 1), as a PCIe card
    without a scale-up fabric does, and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[np.ndarray] = []

    def collective_time_s(self, op, size, ranks, *, ranks_per_node, **_):
        from gpuplan.calibration.api import Estimate

        rpn = np.asarray(ranks_per_node, dtype=float)
        self.asked.append(np.asarray(size, dtype=float))
        if np.any(rpn > 1):
            raise AssertionError("an intra-node group was asked of a card without one")
        t = 1e-5 + np.asarray(size, dtype=float) / 1e10
        return Estimate(value=t, low=t, high=t, basis="spec")


def test_a_group_that_sends_nothing_is_not_asked_of_the_device_model():
    perf = _Recorder()
    size = np.array([0.0, 1e6, 0.0])  # CP 1 layouts carry no bytes
    same = np.array([True, False, True])
    t = comm.p2p_time3(perf, size, same, inter_node_bandwidth_bytes_per_s=1e10)
    assert t.shape == (3, 3)
    assert np.all(t[:, [0, 2]] == 0.0) and np.all(t[:, 1] > 0.0)
    (asked,) = perf.asked
    assert asked.tolist() == [1e6]


@pytest.mark.parametrize(("gpu", "gpus"), [("l40s", 8), ("l40s", 64), ("l4", 16)])
def test_pcie_cards_get_a_training_forecast(gpu, gpus):
    r = forecast_training(model="llama3.1-8b", gpu=gpu, num_gpus=gpus, tokens=1e11)
    assert r["fits_in_memory"] and 0.0 < r["mfu"] < 1.0
    assert r["step_time_s"] > 0.0 and r["time_to_train_s"] > 0.0
