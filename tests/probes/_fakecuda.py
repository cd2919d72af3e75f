"""A fake of the torch.cuda edge for the copy probes (pcie, p2p), with a deterministic clock.

There is no GPU on the machines that run this suite. ``FakeCudaTorch`` answers the calls the
copy probes make (``torch.empty`` on a device or pinned, ``copy_``, streams, ``device``,
``synchronize``, ``can_device_access_peer``); a copy advances :class:`FakeClock` by
``bytes / bandwidth`` of its (source, destination) pair instead of moving data, and copies run
one after the other (no overlap), so the figures the probes compute are exact and known.
The code under test is the real probe, timing and bookkeeping code; only the timers are the
wall timer on the fake clock (in place of CUDA events).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplan.probes.timing import WallTimer


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTensor:
    torch: FakeCudaTorch
    size: int
    device: str  # "cpu" or "cuda:i"
    pinned: bool = False

    def fill_(self, value: int) -> FakeTensor:
        return self

    def copy_(self, src: FakeTensor, non_blocking: bool = False) -> FakeTensor:
        self.torch.copies.append((src.device, self.device, src.pinned or self.pinned))
        self.torch.clock.now += src.size / self.torch.bandwidth(src, self)
        return self


class _Stream:
    def __init__(self, device: str | None = None) -> None:
        self.device = device

    def wait_stream(self, other: object) -> None:
        return None


@dataclass
class FakeCudaTorch:
    """``count`` GPUs; ``host_bw[i]`` pinned B/s of GPU i's link, ``peer_bw(i, j)`` B/s."""

    count: int
    host_bw: list[float]
    peer_bw: Callable[[int, int], float] = lambda i, j: 1e11
    peer_access: Callable[[int, int], bool] = lambda i, j: True
    pageable_factor: float = 0.5
    clock: FakeClock = field(default_factory=FakeClock)
    copies: list[tuple[str, str, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.uint8 = "uint8"
        self.version = types.SimpleNamespace(cuda="12.4", hip=None)
        self.cuda = types.SimpleNamespace(
            device_count=lambda: self.count,
            is_available=lambda: True,
            can_device_access_peer=self.peer_access,
            Stream=lambda device=None: _Stream(device),
            stream=lambda s: contextlib.nullcontext(),
            current_stream=lambda device=None: _Stream(device),
            synchronize=lambda device=None: None,
            device=lambda index: contextlib.nullcontext(),
            empty_cache=lambda: None,
        )

    def device(self, kind: str, index: int | None = None) -> str:
        return kind if index is None else f"{kind}:{index}"

    def empty(self, size: int, dtype: str, device: str | None = None, pin_memory: bool = False):
        return FakeTensor(self, size, device or "cpu", pinned=pin_memory)

    def bandwidth(self, src: FakeTensor, dst: FakeTensor) -> float:
        if src.device.startswith("cuda") and dst.device.startswith("cuda"):
            return self.peer_bw(int(src.device[5:]), int(dst.device[5:]))
        gpu = src if src.device.startswith("cuda") else dst
        host = dst if gpu is src else src
        bw = self.host_bw[int(gpu.device[5:])]
        return bw if host.pinned else bw * self.pageable_factor

    def timer(self, *args: object, **kwargs: object) -> WallTimer:
        """Stands for ``timer_for`` and ``WallTimer``: the wall timer on the fake clock."""
        return WallTimer(clock=self.clock)
