"""Soak: sustained matmul while clocks, temperature, power, energy and throttle reasons are
sampled.

No GPU here: NVML is replaced at the edge by ``FakeNvml`` (answering like ``pynvml``:
milliwatts, millijoules, MHz, a clock-event bit mask), whose GPU heats up, hits its
thermal slowdown and drops its clock half-way; the matmul loop itself runs for real on
the CPU. ``tests/gpu/run.sh`` runs a short soak against the real NVML on a GPU.
"""

from __future__ import annotations

import json
import time
import types

import pytest

from gpuplan.probes import soak
from gpuplan.probes.base import DeviceInfo, ProbeContext
from gpuplan.results.schema import ProbeResult, SoakMeasurement

CPU = DeviceInfo(kind="cpu", count=0)


class FakeNvml(types.ModuleType):
    """A GPU at 700 W that reaches 90 C and slows down after ``hot_after_s``."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonSwThermalSlowdown = 0x20

    def __init__(self, hot_after_s: float, power_w: float = 700.0) -> None:
        super().__init__("pynvml")
        self.t0: float | None = None  # the first reading starts the clock
        self.hot_after_s = hot_after_s
        self.power_w = power_w

    def _t(self) -> float:
        if self.t0 is None:
            self.t0 = time.monotonic()
        return time.monotonic() - self.t0

    def _hot(self) -> bool:
        return self._t() >= self.hot_after_s

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetClockInfo(self, h, kind):
        if kind == self.NVML_CLOCK_MEM:
            return 2619
        return 1500 if self._hot() else 1980

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 90 if self._hot() else 60

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self.power_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return int(self.power_w * self._t() * 1000)  # mJ

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 | (0x20 if self._hot() else 0)


def test_throttle_reasons_decode_with_nvml_bits():
    assert soak.decode_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert soak.decode_reasons(0x80 | 0x200) == ["hw_power_brake_slowdown", "bit_0x200"]


def test_summary_flags_a_thermal_slowdown_and_the_clock_drop():
    samples = [
        soak.Sample(
            t_s=float(t),
            sm_clock_mhz=1980.0 if t < 6 else 1500.0,
            temperature_c=60.0 + t,
            energy_j=700.0 * t,
            reasons=("sw_power_cap",) if t < 6 else ("sw_power_cap", "sw_thermal_slowdown"),
        )
        for t in range(12)
    ]
    windows = [(float(t), 400e12 if t < 6 else 300e12) for t in range(12)]
    got = soak.summarise(samples, windows)
    assert got["power_source"] == "energy counter"
    assert got["energy_j"] == pytest.approx(700.0 * 11)
    assert got["mean_power_w"] == pytest.approx(700.0)
    assert got["power_w"]["median"] == pytest.approx(700.0)
    assert got["throttle_reasons"] == {"sw_power_cap": 1.0, "sw_thermal_slowdown": 0.5}
    assert got["thermal_throttled"] is True and got["power_throttled"] is True
    assert got["clock_drop"] == pytest.approx(1 - 1500 / 1980)
    assert got["clock_dropped"] is True
    assert got["throughput_drop"] == pytest.approx(0.25) and got["throughput_dropped"] is True
    assert got["temperature_c"]["max"] == 71.0
    SoakMeasurement.model_validate({**got, "duration_s": 11.0, "device_index": 0})


def test_a_steady_gpu_is_not_flagged():
    samples = [
        soak.Sample(t_s=float(t), sm_clock_mhz=1980.0 - (t % 2) * 15, reasons=()) for t in range(20)
    ]
    got = soak.summarise(samples, [(float(t), 400e12) for t in range(20)])
    assert got["thermal_throttled"] is False and got["power_throttled"] is False
    assert got["clock_dropped"] is False and got["throughput_dropped"] is False
    assert got["power_source"] == "power readings" and got["energy_j"] is None


def test_the_series_is_kept_short():
    samples = [soak.Sample(t_s=float(t), sm_clock_mhz=1980.0) for t in range(3600)]
    got = soak.summarise(samples, [])
    assert 0 < len(got["series"]) <= soak.MAX_SERIES
    assert got["series"][0]["t_s"] == 0.0


def test_soak_samples_nvml_while_the_cpu_runs_matmul():
    """The GEMM loop runs for real on the CPU; NVML is the fake GPU above, read through the
    real telemetry reader."""
    nvml = FakeNvml(hot_after_s=0.9)
    reader = soak.NvmlTelemetry(nvml)
    ctx = ProbeContext(device=CPU, workload={"duration_s": 1.8, "interval_s": 0.1})
    soak.run(ctx, telemetry=reader)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert result.params["telemetry"] == "nvml"
    (m,) = result.typed()
    assert isinstance(m, SoakMeasurement)
    assert m.samples >= 10 and m.windows >= 1
    assert m.flops_per_s is not None and m.flops_per_s.median > 0
    assert m.thermal_throttled is True and m.power_throttled is True
    assert m.clock_dropped is True and m.sm_clock_mhz.first == 1980.0
    assert m.mem_clock_mhz.median == 2619.0
    assert m.mean_power_w == pytest.approx(700.0, rel=0.02)
    assert m.power_source == "energy counter"
    assert any("thermal slowdown" in w for w in result.warnings)
    # results ls / probe print the slowest device's end-of-soak throughput and what throttled
    from gpuplan.results.summary import headline

    head = headline(result)
    assert head is not None and head["unit"] == "FLOP/s"
    assert head["value"] == m.flops_per_s.last
    assert "thermal throttle" in head["label"] and "clock drop" in head["label"]


def test_soak_without_nvml_runs_and_says_what_it_lacks():
    ctx = ProbeContext(device=CPU, workload={"duration_s": 0.8, "interval_s": 0.2})
    soak.run(ctx)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error
    assert result.params["telemetry"] is None
    (m,) = result.measurements
    assert m["samples"] == 0 and m["windows"] >= 1 and m["sm_clock_mhz"] is None
    assert any("no NVML or amdsmi" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--soak", "0"], "--soak must be between 0 and"),
        (["--soak", "5", "--soak-interval", "0"], "--soak-interval must be positive"),
        (["--soak", "5", "--only", "matmul"], "--soak runs on its own"),
    ],
)
def test_bad_soak_options_are_one_line_and_exit_2(run_cli, args, needle):
    r = run_cli("probe", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert needle in line and r.stdout == ""


def test_soak_from_the_cli_writes_a_result(run_cli, tmp_path):
    r = run_cli(
        "probe", "--soak", "0.01", "--soak-interval", "0.2", "--device", "cpu",
        "--out", str(tmp_path), "--no-progress", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gpuplan: planned" in r.stderr and "soak" in r.stderr
    doc = json.loads(r.stdout)
    (probe,) = doc["probes"]
    assert probe["probe"] == "soak" and probe["status"] == "ok"
    assert doc["budget"]["probes"][0]["probe"] == "soak"
    assert doc["budget"]["probes"][0]["actual_s"] > 0
