"""Host inventory, privacy (machine id, env allowlist, hostname) and the power sampler."""

from __future__ import annotations

import socket
import statistics
import time

import pytest

from gpuplan.probes.inventory import cpu_llc_bytes, host_facts, machine_id
from gpuplan.probes.power import PowerSampler
from gpuplan.results.privacy import ENV_ALLOWLIST, env_allowed, filter_env
from gpuplan.results.schema import Host


def test_machine_id_is_stable_and_does_not_reveal_the_source(tmp_path):
    f = tmp_path / "machine-id"
    f.write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    a = machine_id((str(f),))
    assert a == machine_id((str(f),))
    assert len(a) == 16 and int(a, 16) >= 0
    assert "3d1219c7" not in a
    f.write_text("0123456789abcdef0123456789abcdef\n")
    assert machine_id((str(f),)) != a


def _nic(root, name, mac, *, device=True):
    d = root / name
    d.mkdir(parents=True)
    (d / "address").write_text(mac + "\n")
    if device:
        (d / "device").mkdir()


def test_machine_id_falls_back_to_the_hardware_when_no_file(tmp_path):
    """An empty /etc/machine-id (a VM image's): the device-backed NICs' MACs and the GPUs'
    UUIDs, not the random MACs of virtual interfaces, which change at every boot."""
    empty = tmp_path / "machine-id"
    empty.write_text("")
    net = tmp_path / "net"
    _nic(net, "eth0", "02:fc:00:00:00:01")
    _nic(net, "ifb0", "d2:38:79:0f:96:b6", device=False)
    _nic(net, "lo", "00:00:00:00:00:00", device=False)
    gpus = ["GPU-97050f67-60d8-ad6a-94ab-bd0adeafa5fc"]
    a = machine_id((str(empty),), hardware_ids=gpus, net_root=net)
    assert len(a) == 16 and a == machine_id((str(empty),), hardware_ids=gpus, net_root=net)
    (net / "ifb0" / "address").write_text("1a:89:36:2b:67:05\n")  # a reboot
    assert machine_id((str(empty),), hardware_ids=gpus, net_root=net) == a
    # the same VM image (same MAC) with another GPU is another machine
    assert machine_id((str(empty),), hardware_ids=["GPU-0000"], net_root=net) != a
    (net / "eth0" / "address").write_text("02:fc:00:00:00:02\n")
    assert machine_id((str(empty),), hardware_ids=gpus, net_root=net) != a


def test_machine_id_never_uses_a_random_node(tmp_path, monkeypatch):
    """uuid.getnode() returns a random number (multicast bit set) where it finds no MAC,
    a new one in every process: the host name is used instead."""
    import gpuplan.probes.inventory as inventory

    nodes = iter([0x41D295C0CE63, 0x195F67B3D851])  # seen in two runs on one VM
    monkeypatch.setattr(inventory.uuid, "getnode", lambda: next(nodes))
    none = (str(tmp_path / "absent"),)
    a = machine_id(none, net_root=tmp_path / "no-net")
    assert a == machine_id(none, net_root=tmp_path / "no-net") and len(a) == 16
    monkeypatch.setattr(inventory.uuid, "getnode", lambda: 0x0025_90AB_CDEF)  # a real MAC
    b = machine_id(none, net_root=tmp_path / "no-net")
    assert b != a and b == machine_id(none, net_root=tmp_path / "no-net")


def test_llc_from_a_sysfs_tree(tmp_path):
    for i, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "32768K"),
        ]
    ):
        d = tmp_path / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cpu_llc_bytes(tmp_path) == 32 << 20


def test_size_parsing():
    # sysfs/lscpu cache sizes go through the one size parser (gpuplan.units)
    from gpuplan.errors import InputError
    from gpuplan.units import parse_size_bytes

    assert parse_size_bytes("32768K\n", strict=True) == 32 << 20
    assert parse_size_bytes("1 MiB", strict=True) == 1 << 20
    assert parse_size_bytes("512", strict=True) == 512
    with pytest.raises(InputError):
        parse_size_bytes("lots", strict=True)


def test_env_allowlist_keeps_tuning_and_drops_secrets():
    env = {
        "NCCL_IB_HCA": "mlx5",
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "8",
        "AWS_SECRET_ACCESS_KEY": "x",
        "HF_TOKEN": "hf_x",
        "NCCL_API_TOKEN": "oops",
        "HOME": "/root",
        "PATH": "/usr/bin",
        "MASTER_ADDR": "10.0.0.1",
    }
    assert filter_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5",
        "OMP_NUM_THREADS": "8",
    }
    assert "CUDA_VISIBLE_DEVICES" in ENV_ALLOWLIST["names"] and "NCCL_" in ENV_ALLOWLIST["prefixes"]
    assert not env_allowed("GITHUB_TOKEN")


def test_host_facts_of_this_machine_and_hostname_only_on_request():
    facts = host_facts(record_hostname=False)
    host = Host.model_validate(facts)
    assert host.hostname is None
    assert host.cpu_count and host.cpu_count >= 1
    assert host.memory_bytes and host.memory_bytes > 1 << 28
    assert host.machine_id == machine_id()
    with_name = host_facts(record_hostname=True)
    assert with_name["hostname"] == socket.gethostname()


def test_power_sampler_sums_devices_and_summarises():
    readings = {0: [300.0, 310.0, 320.0], 1: [100.0]}
    calls = {0: 0, 1: 0}

    def reader(i: int) -> float:
        values = readings[i]
        v = values[min(calls[i], len(values) - 1)]
        calls[i] += 1
        return v

    sampler = PowerSampler(reader, interval_s=0.01, source="test")
    with sampler.sampling([0, 1]) as samples:
        deadline = time.monotonic() + 5
        while len(samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    summary = sampler.summary(samples, [0, 1])
    assert samples[:3] == [400.0, 410.0, 420.0]
    assert summary["max"] == 420.0 and summary["devices"] == [0, 1] and summary["source"] == "test"
    assert summary["median"] == pytest.approx(statistics.median(samples))
    assert summary["samples"] == len(samples)


def test_power_sampler_without_readings_gives_none():
    sampler = PowerSampler(lambda i: None, interval_s=0.01)
    with sampler.sampling([0]) as samples:
        time.sleep(0.05)
    assert samples == [] and sampler.summary(samples, [0]) is None
