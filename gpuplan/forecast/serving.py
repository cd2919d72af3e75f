"""Serving a request stream: continuous batching, a discrete-event simulation of one replica,
an analytic steady-state model for fast search, and fleet sizing for a load and SLOs.

Model of a replica (Orca, Yu et al. 2022; vLLM, Kwon et al. 2023; chunked prefill as in
Sarathi-Serve, Agrawal et al. 2024): every iteration decodes one token of each running
request and spends the rest of a token budget (``chunk_tokens``, vLLM's
``max_num_batched_tokens``) on prompt chunks of admitted requests, first come first served.
A request is admitted when a batch slot is free and its whole KV cache (prompt + answer)
can be reserved, so nothing is ever preempted. Replicas share the load by random (Poisson
splitting) dispatch, so each sees a Poisson stream of ``qps / replicas`` and one replica is
simulated.

The iteration time comes from :class:`gpuplan.forecast.inference_step.StepCostModel`,
calibrated per device. Everything is seeded and deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from gpuplan.errors import InputError
from gpuplan.forecast.inference_step import (
    VALUE,
    CostStack,
    StepCostModel,
    prompts_per_iteration,
)
from gpuplan.numeric import BoolArray, FloatArray, IntArray, JSONDict, Num

if TYPE_CHECKING:
    from gpuplan.forecast.inference_arch import MemoryPlan, Sharded
    from gpuplan.forecast.inference_step import DeviceRates

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
#: A sized replica must keep up with its load: TTFT may not grow faster than this against
#: arrival time (s per s). Under Poisson load a stable queue's waiting time is stationary
#: (Lindley's recursion; slope ~0, under 0.002 in this simulator's stable runs), while a
#: server of capacity ``mu`` under load ``lambda > mu`` falls behind by ``1 - mu / lambda``
#: seconds per second; 0.05 rejects a replica serving under 95% of its load, which a run of
#: a few hundred requests ends before its queue overflows ``max_queue``.
MAX_TTFT_GROWTH = 0.05
#: What a fleet sized without a latency target is: said by ``forecast infer`` and ``plan``
THROUGHPUT_ONLY_NOTE = (
    "no TTFT or TPOT target given: sized for throughput alone (the cheapest fleet that "
    "keeps up with the load, whatever its latency)"
)


# ---------------------------------------------------------------------------------------------
# Length distributions
# ---------------------------------------------------------------------------------------------
def _z(q: float) -> float:
    return NormalDist().inv_cdf(q)


@dataclass(frozen=True)
class LengthDist:
    """Prompt or answer length in tokens: fixed, lognormal by its mean and one percentile,
    uniform over a range, or an empirical trace of request lengths.

    * ``LengthDist(mean)``: every request has the mean length;
    * ``LengthDist(mean, p99)`` (or ``p90=`` / ``p50=``): lognormal with that mean and that
      percentile. The lognormal's ``sigma`` solves ``log(p / mean) = z * sigma - sigma**2 / 2``
      (mean ``exp(mu + sigma**2/2)``, percentile ``exp(mu + z * sigma)``, ``z`` the normal
      quantile of the percentile); with several given, the highest percentile fixes it
      (the tail decides the SLO) and :meth:`describe` names the one used;
    * ``LengthDist.from_trace(lengths)``: the requests' own lengths, resampled with
      replacement (mean and quantiles of the trace);
    * ``LengthDist.uniform(low, high)``: every whole length from ``low`` to ``high`` equally
      likely, the random dataset of the serving benchmarks (:meth:`uniform`).

    Samples are rounded and clipped to ``[1, max_tokens]``.

    >>> d = LengthDist(1000, 4000)
    >>> round(d.quantile(0.99))
    4000
    >>> LengthDist(256).quantile(0.99)
    256.0
    >>> round(LengthDist(1000, p50=800).quantile(0.5))
    800
    >>> LengthDist.from_trace([100, 200, 300, 400]).mean
    250.0
    >>> LengthDist.uniform(819, 1024).text()
    'uniform 819-1024 (mean 921.5)'
    """

    mean: float
    p99: float | None = None
    max_tokens: int | None = None
    p90: float | None = None
    p50: float | None = None
    trace: tuple[int, ...] | None = None
    #: the shortest length of a uniform distribution (:meth:`uniform`), whose longest is
    #: ``2 x mean - low``
    low: int | None = None

    def __post_init__(self) -> None:
        if not self.mean >= 1:
            raise InputError(f"a mean length must be at least 1 token, got {self.mean}")
        if self.low is not None:
            if not 1 <= self.low <= self.mean or self.trace or self._fixed_by:
                raise InputError(
                    f"a uniform length range needs 1 <= low <= mean and no percentiles, got "
                    f"low {self.low}, mean {self.mean:g}",
                    hint="use LengthDist.uniform(low, high)",
                )
            return
        if self.trace is not None:
            if len(self.trace) == 0 or min(self.trace) < 1:
                raise InputError(
                    "a trace of request lengths needs at least one length, each >= 1 token",
                    hint="give the prompt (answer) token count of each request",
                )
            return
        for name, q in (("p99", 0.99), ("p90", 0.9)):
            p = getattr(self, name)
            if p is None:
                continue
            if p <= self.mean:
                raise InputError(
                    f"{name} length {p:g} must be above the mean {self.mean:g}",
                    hint=f"omit the {name} for fixed lengths",
                )
            if math.log(p / self.mean) >= _z(q) ** 2 / 2:
                raise InputError(
                    f"{name} length {p:g} is more than {math.exp(_z(q) ** 2 / 2):.1f}x the mean "
                    f"{self.mean:g}: no lognormal has that mean and {name}",
                    hint=f"give a smaller {name} or a larger mean",
                )
        if self.p50 is not None and self.p50 > self.mean:
            raise InputError(
                f"p50 length {self.p50:g} is above the mean {self.mean:g}: a lognormal's median "
                "is below its mean",
                hint="give the mean and p99 instead, or a trace of request lengths",
            )

    @classmethod
    def from_trace(cls, lengths: Iterable[float], max_tokens: int | None = None) -> LengthDist:
        """The empirical distribution of ``lengths`` (tokens of each request)."""
        arr = np.asarray(list(lengths), dtype=float)
        if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 1):
            raise InputError(
                "a trace of request lengths needs at least one length, each >= 1 token",
                hint="give the prompt (answer) token count of each request",
            )
        trace = tuple(int(x) for x in np.rint(arr))
        return cls(float(np.mean(trace)), max_tokens=max_tokens, trace=trace)

    @classmethod
    def uniform(cls, low: int, high: int, max_tokens: int | None = None) -> LengthDist:
        """Every whole length from ``low`` to ``high`` (inclusive) equally likely: the random
        dataset of SGLang ``bench_serving`` and of vLLM ``benchmark_serving`` (InferenceX's
        copy), which draw each prompt and answer length with ``randint(int(r x L), L)`` for
        ``--random-range-ratio r``; vLLM's ``vllm bench serve`` draws from
        ``[L x (1 - r), L x (1 + r)]`` instead.

        >>> d = LengthDist.uniform(800, 1000)
        >>> d.mean, d.high, d.quantile(0.5)
        (900.0, 1000, 900.0)
        """
        lo, hi = int(low), int(high)
        if not 1 <= lo <= hi:
            raise InputError(
                f"a uniform length range needs 1 <= low <= high, got {low}-{high}",
                hint="e.g. --input-tokens 1024 --min-length-ratio 0.8 (819 to 1024 tokens)",
            )
        return cls((lo + hi) / 2.0, max_tokens=max_tokens, low=lo)

    @classmethod
    def from_options(
        cls,
        length: float,
        p99: float | None = None,
        *,
        min_ratio: float | None = None,
        max_tokens: int | None = None,
        option: str = "input-tokens",
    ) -> LengthDist:
        """The lengths of ``--{option} L``: fixed at ``L``; lognormal with mean ``L`` and
        ``p99``; or, with ``min_ratio`` r (``--min-length-ratio``), uniform from ``int(r x L)``
        to ``L`` (:meth:`uniform`).

        >>> LengthDist.from_options(1024, min_ratio=0.8).describe()
        {'kind': 'uniform', 'mean': 921.5, 'low': 819, 'high': 1024}
        """
        if min_ratio is None:
            return cls(float(length), p99, max_tokens)
        r = float(min_ratio)
        if not (0 < r <= 1 and math.isfinite(r)):
            raise InputError(
                f"--min-length-ratio must be in (0, 1], got {min_ratio!r}",
                hint="e.g. 0.8: lengths from 0.8 x to 1 x --input-tokens / --output-tokens",
            )
        if p99 is not None:
            raise InputError(
                f"--{option}-p99 makes lognormal lengths and --min-length-ratio uniform ones",
                hint="give one of them",
            )
        return cls.uniform(max(int(r * length), 1), int(length), max_tokens)

    @property
    def high(self) -> int | None:
        """The longest length of a uniform distribution; None for the other kinds."""
        return None if self.low is None else round(2 * self.mean - self.low)

    @property
    def _fixed_by(self) -> tuple[str, float, float] | None:
        """(name, value, quantile) of the percentile that fixes the lognormal, if any."""
        for name, q in (("p99", 0.99), ("p90", 0.9), ("p50", 0.5)):
            p = getattr(self, name)
            if p is not None and not (name == "p50" and p == self.mean):
                return name, float(p), q
        return None

    @property
    def kind(self) -> str:
        if self.trace is not None:
            return "trace"
        if self.low is not None:
            return "uniform"
        return "fixed" if self._fixed_by is None else "lognormal"

    @property
    def sigma(self) -> float:
        by = self._fixed_by
        if by is None or self.trace is not None or self.low is not None:
            return 0.0
        _, p, q = by
        if q == 0.5:
            return math.sqrt(2 * math.log(self.mean / p))
        z = _z(q)
        return z - math.sqrt(z**2 - 2 * math.log(p / self.mean))

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def quantile(self, q: float) -> float:
        """Length at quantile ``q`` (before rounding and clipping)."""
        if self.trace is not None:
            v = float(np.quantile(np.asarray(self.trace, dtype=float), q))
        elif self.low is not None:
            v = self.low + q * (int(self.high or self.low) - self.low)
        elif self.kind == "fixed":
            return float(self.mean)
        else:
            v = math.exp(self.mu + self.sigma * _z(q))
        return min(v, self.max_tokens) if self.max_tokens else v

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.trace is not None:
            x = rng.choice(np.asarray(self.trace, dtype=np.int64), n, replace=True)
        elif self.low is not None:
            x = rng.integers(self.low, int(self.high or self.low) + 1, n)
        elif self.kind == "fixed":
            x = np.full(n, round(self.mean))
        else:
            x = np.rint(rng.lognormal(self.mu, self.sigma, n))
        hi = self.max_tokens or np.inf
        return np.asarray(np.clip(x, 1, hi), dtype=np.int64)

    def describe(self) -> JSONDict:
        d: JSONDict = {"kind": self.kind, "mean": self.mean}
        if self.trace is not None:
            d.update(
                requests=len(self.trace),
                p50=round(self.quantile(0.5), 1),
                p99=round(self.quantile(0.99), 1),
            )
        elif self.low is not None:
            d.update(low=self.low, high=self.high)
        elif self.kind == "lognormal":
            by = self._fixed_by
            assert by is not None
            d.update({by[0]: by[1]}, sigma=round(self.sigma, 4), fixed_by=["mean", by[0]])
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                d.setdefault(name, round(self.quantile(q), 1))
        return d

    def text(self) -> str:
        """One line for reports: ``lognormal mean 1024, p99 4096``."""
        d = self.describe()
        if d["kind"] == "fixed":
            return f"fixed {self.mean:g}"
        if d["kind"] == "trace":
            return f"trace of {d['requests']} requests (mean {self.mean:.0f}, p99 {d['p99']:g})"
        if d["kind"] == "uniform":
            return f"uniform {self.low}-{self.high} (mean {self.mean:g})"
        fixed_by = d["fixed_by"]
        assert isinstance(fixed_by, list)  # ["mean", the percentile's name] (describe)
        by = fixed_by[1]
        assert isinstance(by, str)
        return f"lognormal mean {self.mean:g}, {by} {d[by]:g}"


# ---------------------------------------------------------------------------------------------
# One replica
# ---------------------------------------------------------------------------------------------
@dataclass
class ReplicaModel:
    """What the simulation needs to know about one replica of one layout on one GPU type.

    Attributes
    ----------
    cost:
        Iteration-time model.
    max_batch:
        Running-request cap (batch slots).
    kv_capacity_tokens:
        KV-cache tokens that fit after weights and activations (per replica).
    prefill_flops_coef:
        Attention FLOPs of a prefill chunk are ``coef * (s * c + s**2 / 2)`` (whole replica
        stage, see :meth:`Sharded.attention_flops_prefill`).
    chunk_tokens:
        Token budget per iteration.
    prefilled:
        A decode-only replica of a disaggregated fleet: prompts arrive with their KV cache
        already computed (by a prefill replica), so admission costs no prefill; the request's
        "first token" here is its first decode step on this replica.
    """

    cost: StepCostModel
    max_batch: int
    kv_capacity_tokens: float
    prefill_flops_coef: float
    chunk_tokens: int = 8192
    label: str = ""
    prefilled: bool = False
    #: serial front-end cost per request (s), before the scheduler sees it
    #: (:attr:`gpuplan.forecast.inference_step.OverheadParams.frontend_s_per_request`)
    frontend_s_per_request: float = 0.0
    #: the scheduler takes in new requests once every this many decode-only iterations
    #: (SGLang ``--scheduler-recv-interval`` R, default 1: every iteration, times
    #: ``--num-continuous-decode-steps`` K, the decode passes a scheduler turn runs; the
    #: server args' help: "may also increase time-to-first-token latency"); an iteration
    #: with a prefill, or an idle scheduler, takes them in at once (SGLang
    #: ``SchedulerRecvSkipper``: a decode turn weighs 1, any other more than the interval)
    recv_interval: int = 1
    #: a hybrid model's recurrent state per request, in KV-cache tokens of the same pool
    #: (:attr:`gpuplan.forecast.inference_arch.MemoryPlan.state_bytes_per_seq` over the KV
    #: bytes per token): admitted with the request, freed with it
    state_tokens_per_request: float = 0.0
    #: a sliding-window or chunked model's local layers: a request holds ``min(length,
    #: window_tokens)`` of its tokens there, each worth ``window_ratio`` pool tokens
    #: (:attr:`gpuplan.forecast.inference_arch.MemoryPlan.window_kv_bytes_per_token` over
    #: the KV bytes per token)
    window_tokens: float = 0.0
    window_ratio: float = 0.0

    def pool_tokens(self, lengths: Num) -> FloatArray:
        """Pool tokens requests of ``lengths`` tokens (prompt + answer) hold at most: their
        KV, their recurrent state and their window in the local layers."""
        out: FloatArray = np.asarray(lengths, dtype=float) + self.state_tokens_per_request
        if self.window_ratio:
            out = out + self.window_ratio * np.minimum(lengths, self.window_tokens)
        return out

    def iteration_time(
        self, tokens: float, rows: float, ctx: float, pf_flops: float, pf_tokens: float
    ) -> float:
        return float(self.cost.time(tokens, rows, ctx, pf_flops, pf_tokens))

    def single_request(
        self, input_tokens: float, output_tokens: float, scenario: int = VALUE
    ) -> tuple[float, float]:
        """TTFT and TPOT of one request alone on the replica (no queue, no other load)."""
        ttft, t_dec = 0.0, 0.0
        done = 0.0
        budget = float(self.chunk_tokens)
        while done < input_tokens:
            c = min(budget, input_tokens - done)
            flops = self.prefill_flops_coef * (c * done + c * c / 2.0)
            ttft += float(self.cost.time(c, 1.0, 0.0, flops, c, scenario))
            done += c
        ctx = input_tokens + output_tokens / 2.0
        t_dec = float(self.cost.time(1.0, 1.0, ctx, 0.0, 0.0, scenario))
        return ttft + self.frontend_s_per_request, t_dec


class SimSummary(TypedDict):
    """Latency percentiles and load of one simulated replica (:meth:`SimResult.summary`)."""

    requests: int
    saturated: bool
    mean_running_requests: float
    throughput_output_tokens_per_s: float
    ttft_p50_s: float
    tpot_p50_s: float
    ttft_p90_s: float
    tpot_p90_s: float
    ttft_p99_s: float
    tpot_p99_s: float
    ttft_mean_s: float
    tpot_mean_s: float
    ttft_growth_s_per_s: float


@dataclass
class SimResult:
    """Per-request latencies of one simulated replica (warm-up requests dropped)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    qps: float
    duration_s: float
    output_tokens: int
    mean_running: float
    saturated: bool
    requests: int
    #: slope of TTFT against arrival time over the measured requests (s per s): 0 for a
    #: stable queue, ``1 - capacity / load`` for an overloaded one (its backlog grows)
    ttft_growth: float = 0.0

    @property
    def overloaded(self) -> bool:
        """Saturated (the queue overflowed), or TTFT still growing at the end of a run too
        short to overflow it: the replica serves under ``1 - MAX_TTFT_GROWTH`` of the load."""
        return self.saturated or self.ttft_growth > MAX_TTFT_GROWTH

    def percentile(self, what: str, pct: float) -> float:
        arr = self.ttft_s if what == "ttft" else self.tpot_s
        if self.saturated or arr.size == 0:
            return math.inf
        return float(np.percentile(arr, pct))

    def summary(self) -> SimSummary:
        return {
            "requests": self.requests,
            "saturated": self.saturated,
            "mean_running_requests": round(self.mean_running, 2),
            "throughput_output_tokens_per_s": self.output_tokens / self.duration_s
            if self.duration_s > 0
            else 0.0,
            "ttft_p50_s": self.percentile("ttft", PERCENTILES["p50"]),
            "tpot_p50_s": self.percentile("tpot", PERCENTILES["p50"]),
            "ttft_p90_s": self.percentile("ttft", PERCENTILES["p90"]),
            "tpot_p90_s": self.percentile("tpot", PERCENTILES["p90"]),
            "ttft_p99_s": self.percentile("ttft", PERCENTILES["p99"]),
            "tpot_p99_s": self.percentile("tpot", PERCENTILES["p99"]),
            "ttft_mean_s": float(self.ttft_s.mean())
            if self.ttft_s.size and not self.saturated
            else math.inf,
            "tpot_mean_s": float(self.tpot_s.mean())
            if self.tpot_s.size and not self.saturated
            else math.inf,
            "ttft_growth_s_per_s": round(self.ttft_growth, 4),
        }


def check_num_requests(num_requests: object) -> int:
    """``num_requests`` as an int if it is a whole number >= 1, else an :class:`InputError`.

    >>> check_num_requests(2000)
    2000
    """
    if (
        not isinstance(num_requests, (int, np.integer))
        or isinstance(num_requests, bool)
        or num_requests < 1
    ):
        raise InputError(
            f"--requests must be a whole number >= 1, got {num_requests!r}",
            hint="e.g. --requests 2000 (requests simulated per replica count tried)",
        )
    return int(num_requests)


def simulate(
    replica: ReplicaModel,
    qps: float,
    inputs: LengthDist,
    outputs: LengthDist,
    *,
    num_requests: int = 2000,
    warmup_fraction: float = 0.1,
    seed: int = 0,
    scenario: int = VALUE,
    max_queue: int | None = None,
    skip: bool = True,
) -> SimResult:
    """Discrete-event simulation of one continuous-batching replica under Poisson arrivals.

    Iterations that only decode are advanced in closed form between events (an arrival that
    can be admitted, or a request finishing): with ``n`` running requests the iteration
    time grows linearly with the iteration index (the KV cache each one reads grows by ``n``
    tokens), so ``K`` iterations take ``K*a + b*K*(K-1)/2``. Iterations with prompt chunks are
    simulated one by one.

    Returns per-request TTFT (arrival to first token) and TPOT ((last token - first token) /
    (answer length - 1)) of the requests after the warm-up fraction.

    The latencies are those of the steady state a fleet serving the load for hours sees.
    A request stays about ``R = TTFT + mean answer x TPOT`` in the replica, and the running
    requests settle at ``qps x R`` (Little's law) only after the first arrivals' lifetimes;
    when ``num_requests`` arrive in less than a few lifetimes (long answers at a high rate:
    1,000 requests at 100/s end before a 500-token answer at 30 ms does), the measured
    requests would see the ramp-up and the final drain instead. The run is then extended:
    arrivals over two mean lifetimes before the measured requests (warm-up) and over a p99
    lifetime after them (they finish under load), the lifetimes estimated from a first run
    and refined once (Kleinrock 1975, 'Queueing Systems' vol. 1, Sec. 2.1, Little's law;
    the warm-up deletion of Law & Kelton, 'Simulation Modeling and Analysis', Sec. 9.5.1).
    """
    if qps <= 0:
        raise InputError(f"--qps must be positive, got {qps}")
    n_req = check_num_requests(num_requests)
    n_warm = int(n_req * warmup_fraction)
    n_meas = n_req - n_warm
    warm_more, cool = 0, 0
    res: SimResult | None = None
    for _ in range(3):
        total = n_warm + warm_more + n_meas + cool
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1.0 / qps, total))
        lin = inputs.sample(rng, total)
        lout = outputs.sample(rng, total)
        res = simulate_requests(
            replica,
            arrivals,
            lin,
            lout,
            qps=qps,
            # the caller's fraction while unextended (the same requests measured as before);
            # extended, half a request over the count so int(total x fraction) is exact
            warmup_fraction=warmup_fraction if not cool else (n_warm + warm_more + 0.5) / total,
            scenario=scenario,
            max_queue=max_queue,
            skip=skip,
            measure_until=n_warm + warm_more + n_meas if cool else None,
        )
        if res.saturated or res.tpot_s.size == 0:
            return res
        # request lifetimes at the load measured so far (under-estimates while ramping)
        tpot = float(np.mean(res.tpot_s))
        life = float(np.mean(res.ttft_s)) + outputs.mean * tpot
        life_tail = float(np.percentile(res.ttft_s, 99)) + outputs.quantile(0.99) * tpot
        need_warm = math.ceil(qps * 2.0 * life)
        need_cool = math.ceil(qps * life_tail)
        if need_warm + need_cool <= max(n_warm, 1) and not cool:
            return res  # the lifetimes are short against the run: already a steady state
        if need_warm <= n_warm + warm_more and need_cool <= cool:
            return res
        warm_more = max(warm_more, need_warm - n_warm, 0)
        cool = max(cool, need_cool, 1)
    assert res is not None
    return res


def frontend_entries(arrivals: np.ndarray, c: float) -> np.ndarray:
    """When requests reach the scheduler through a serial front end of ``c`` s each:
    ``e_i = max(a_i, e_{i-1}) + c`` (a deterministic single-server FIFO queue, Lindley's
    recursion), in closed form ``e_i = c (i + 1) + max_{j <= i} (a_j - c j)``.

    >>> frontend_entries(np.array([0.0, 0.0, 0.0, 1.0]), 0.1).round(6).tolist()
    [0.1, 0.2, 0.3, 1.1]
    """
    a = np.asarray(arrivals, dtype=float)
    if c <= 0 or a.size == 0:
        return a
    i = np.arange(a.size, dtype=float)
    return c * (i + 1) + np.maximum.accumulate(a - c * i)


def simulate_requests(
    replica: ReplicaModel,
    arrivals: np.ndarray,
    lin: np.ndarray,
    lout: np.ndarray,
    *,
    qps: float | None = None,
    warmup_fraction: float = 0.0,
    scenario: int = VALUE,
    max_queue: int | None = None,
    skip: bool = True,
    concurrency: int | None = None,
    measure_until: int | None = None,
) -> SimResult:
    """The simulation of :func:`simulate` for given requests: arrival times (s, sorted) and
    prompt / answer lengths (tokens, answers >= 1). All arrivals at 0 is the burst of a
    serving benchmark at ``--request-rate inf`` (vLLM ``benchmark_serving``).

    ``concurrency``: a closed-loop client of that many slots (``benchmark_serving
    --max-concurrency N --request-rate inf``): the first ``N`` requests are sent at 0 and
    each later one when an earlier one finishes, so a request's TTFT runs from when the
    client sent it, not from 0 (``arrivals`` is then ignored).

    ``replica.recv_interval`` N > 1: requests that reached the front end wait for the
    scheduler's next poll, which comes after every N-th decode-only iteration, after an
    iteration that prefilled, or at once when the replica is idle.

    ``measure_until``: only the requests before this index (and from the warm-up fraction
    on) are measured; the later ones keep the load on while the measured ones finish, and
    throughput and mean running requests are those of the measured requests' arrival window
    (a steady state; :func:`simulate`). None: every request from the warm-up on, with the
    queue's drain at the end (a finite benchmark run).
    """
    lin = np.asarray(lin, dtype=np.int64)
    lout = np.maximum(np.asarray(lout, dtype=np.int64), 1)
    closed = concurrency is not None and concurrency > 0
    n_req = int(lin.size)
    slots = sent = 0
    if closed:
        slots = min(int(concurrency or 0), n_req)
        arrivals = np.full(n_req, math.inf)
        arrivals[:slots] = 0.0
    arrivals = np.asarray(arrivals, dtype=float)
    if qps is None:
        span = float(arrivals[-1] - arrivals[0]) if n_req > 1 and not closed else 0.0
        qps = (n_req - 1) / span if span > 0 else math.inf
    front = replica.frontend_s_per_request
    if closed:
        arrived = arrivals.copy()
        arrivals = arrivals.copy()
        # the slots' first requests pass the serial front end one after another
        arrivals[:slots] = frontend_entries(arrived[:slots], front)
        sent = slots  # requests the client has sent so far
    else:
        arrived = arrivals
        arrivals = frontend_entries(arrivals, front)
    need = replica.pool_tokens(lin + lout)
    if need.max() > replica.kv_capacity_tokens:
        # never admissible: the whole request does not fit in the KV cache
        return SimResult(np.array([]), np.array([]), qps, 0.0, 0, 0.0, True, n_req)
    first = np.full(n_req, np.nan)
    finish = np.full(n_req, np.nan)
    max_queue = max_queue if max_queue is not None else 4 * replica.max_batch + 200
    coef = replica.prefill_flops_coef
    chunk = replica.chunk_tokens
    cost = replica.cost

    t = 0.0
    it = 0  # iterations completed
    nxt = 0  # next arrival index
    recv_every = max(int(replica.recv_interval), 1)
    since_poll = recv_every  # decode-only iterations since the scheduler last took requests
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()  # [req, tokens done]
    heap: list[tuple[int, int]] = []  # (finish iteration, req)
    n_dec = 0
    s0 = 0.0  # ctx_sum = s0 + n_dec * it
    kv_used = 0.0
    running = 0
    busy_time = 0.0
    area_running = 0.0
    # the measured requests' arrival window (steady-state runs): the running requests' area
    # inside it
    m_start = int(n_req * warmup_fraction)
    m_end = n_req if measure_until is None else max(min(int(measure_until), n_req), m_start + 1)
    w0, w1 = (
        (float(arrived[m_start]), float(arrived[m_end - 1]))
        if measure_until is not None and not closed
        else (math.inf, -math.inf)
    )
    area_win = 0.0
    saturated = False

    def base_time(
        tokens: float, rows: float, ctx: float, pf_flops: float, pf_tokens: float
    ) -> float:
        return float(cost.time(tokens, rows, ctx, pf_flops, pf_tokens, scenario))

    last_entry = float(arrivals[slots - 1]) if closed and slots else 0.0

    def client_next(now: float) -> None:
        """A closed-loop slot freed at ``now`` sends the client's next request."""
        nonlocal sent, last_entry
        if not closed or sent >= n_req:
            return
        arrived[sent] = now
        last_entry = max(now, last_entry) + front
        arrivals[sent] = last_entry
        sent += 1

    while True:
        if since_poll >= recv_every or (running == 0 and not prefilling):
            since_poll = 0
            while nxt < n_req and arrivals[nxt] <= t:
                waiting.append(nxt)
                nxt += 1
        if len(waiting) > max_queue:
            saturated = True
            break
        # admission (FCFS, whole KV reserved)
        while (
            waiting
            and running < replica.max_batch
            and kv_used + need[waiting[0]] <= replica.kv_capacity_tokens
        ):
            r = waiting.popleft()
            kv_used += need[r]
            running += 1
            prefilling.append([r, 0])
        if prefilling:
            budget = max(chunk - n_dec, 1)
            pf_tok = 0.0
            pf_flops = 0.0
            done_now: list[int] = []
            for item in prefilling:
                r, done = item
                if replica.prefilled:  # KV cache arrived from a prefill replica
                    item[1] = int(lin[r])
                    done_now.append(r)
                    continue
                if budget <= 0:
                    break
                c = min(budget, int(lin[r]) - done)
                pf_flops += coef * (c * done + c * c / 2.0)
                pf_tok += c
                budget -= c
                item[1] = done + c
                if item[1] >= lin[r]:
                    done_now.append(r)
            ctx = s0 + n_dec * it
            gemm_tok = n_dec + pf_tok + (len(done_now) if replica.prefilled else 0)
            if replica.prefilled:  # the new requests' decode steps read their prompts' KV
                ctx += float(sum(int(lin[r]) for r in done_now))
            dt = base_time(gemm_tok, n_dec + len(done_now), ctx, pf_flops, pf_tok)
            t += dt
            busy_time += dt
            area_running += running * dt
            area_win += running * max(0.0, min(t, w1) - max(t - dt, w0))
            it += 1
            since_poll = recv_every  # a pass that prefilled: the next one takes requests
            for _ in done_now:
                prefilling.popleft()
            while heap and heap[0][0] <= it:
                f, r = heapq.heappop(heap)
                finish[r] = t
                client_next(t)
                kv_used -= need[r]
                running -= 1
                n_dec -= 1
                s0 -= lin[r] + 1 - (f - (int(lout[r]) - 1))
            for r in done_now:
                first[r] = t
                rem = int(lout[r]) - 1
                if rem <= 0:
                    finish[r] = t
                    client_next(t)
                    kv_used -= need[r]
                    running -= 1
                else:
                    heapq.heappush(heap, (it + rem, r))
                    n_dec += 1
                    # ctx of r at iteration j is lin + 1 + (j - it)
                    s0 += lin[r] + 1 - it
        elif n_dec > 0:
            # decode-only iterations until the next finish or an admissible arrival
            k_fin = heap[0][0] - it
            a = base_time(n_dec, n_dec, s0 + n_dec * it, 0.0, 0.0)
            b = base_time(n_dec, n_dec, s0 + n_dec * (it + 1), 0.0, 0.0) - a
            k = k_fin if skip else 1
            can_admit = running < replica.max_batch
            if skip and nxt < n_req and can_admit and math.isfinite(arrivals[nxt]):
                gap = max(arrivals[nxt] - t, 0.0)  # arrived, not yet polled: 0
                # smallest K with K*a + b*K*(K-1)/2 >= gap
                if b > 1e-15:
                    aa, bb = b / 2.0, a - b / 2.0
                    kk = (-bb + math.sqrt(bb * bb + 4 * aa * gap)) / (2 * aa)
                else:
                    kk = gap / a
                k_arr = max(1, math.ceil(kk - 1e-9))
                if recv_every > 1:  # on to the scheduler's first poll after the arrival
                    first_poll = max(recv_every - since_poll, 1)
                    if k_arr > first_poll:
                        first_poll += math.ceil((k_arr - first_poll) / recv_every) * recv_every
                    k_arr = first_poll
                k = max(1, min(k, k_arr))
            dt = k * a + b * k * (k - 1) / 2.0
            t += dt
            busy_time += dt
            area_running += running * dt
            area_win += running * max(0.0, min(t, w1) - max(t - dt, w0))
            it += k
            since_poll += k
            while heap and heap[0][0] <= it:
                f, r = heapq.heappop(heap)
                finish[r] = t
                client_next(t)
                kv_used -= need[r]
                running -= 1
                n_dec -= 1
                s0 -= lin[r] + 1 - (f - (int(lout[r]) - 1))
        elif nxt < n_req:
            t = max(t, arrivals[nxt])
        else:
            break

    start = m_start
    idx = np.arange(n_req)
    sel = (idx >= start) & (idx < m_end)
    done = sel & ~np.isnan(finish)
    if saturated or not done.any():
        return SimResult(np.array([]), np.array([]), qps, t, 0, 0.0, True, n_req)
    ttft = (first - arrived)[done]
    growth = 0.0
    if not closed and ttft.size > 2 and np.ptp(arrived[done]) > 0:
        growth = float(np.polyfit(arrived[done], ttft, 1)[0])
    multi = done & (lout > 1)
    tpot = ((finish - first) / np.maximum(lout - 1, 1))[multi]
    out_tokens = int(lout[done].sum())
    if w1 > w0:  # steady state: the measured requests' arrival window
        window = w1 - w0
        mean_running = area_win / window
    else:
        window = finish[done].max() - arrived[start]
        mean_running = area_running / t if t > 0 else 0.0
    return SimResult(
        ttft_s=ttft,
        tpot_s=tpot,
        qps=qps,
        duration_s=float(window),
        output_tokens=out_tokens,
        mean_running=mean_running,
        saturated=False,
        requests=int(done.sum()),
        ttft_growth=growth,
    )


# ---------------------------------------------------------------------------------------------
# Analytic steady state (for the fast search)
# ---------------------------------------------------------------------------------------------
class _Replicas:
    """The analytic model's view of one replica, or of several solved at once: element ``i``
    of a call's arrays is served by replica ``which[i]``, whose parameters are gathered per
    element (:class:`CostStack` prices the iterations of several)."""

    def __init__(self, replicas: Sequence[ReplicaModel]) -> None:
        self.replicas = list(replicas)
        self.one: StepCostModel | None = replicas[0].cost if len(replicas) == 1 else None
        self.stack = None if self.one is not None else CostStack.of([r.cost for r in replicas])
        self.coef = np.array([r.prefill_flops_coef for r in replicas], dtype=float)
        self.chunk = np.array([float(r.chunk_tokens) for r in replicas])
        self.kv_capacity = np.array([r.kv_capacity_tokens for r in replicas], dtype=float)
        self.max_batch = np.array([float(r.max_batch) for r in replicas])
        self.max_tokens = np.array([r.cost.max_tokens for r in replicas], dtype=float)

    def __len__(self) -> int:
        return len(self.replicas)

    def pool_tokens(self, lengths: float) -> FloatArray:
        return np.array([float(r.pool_tokens(lengths)) for r in self.replicas])

    def time(
        self,
        which: np.ndarray,
        tokens: Num,
        rows: Num,
        ctx: Num,
        pf_flops: Num,
        pf_tokens: Num,
        scenario: int,
    ) -> FloatArray:
        if self.one is not None:
            return np.asarray(self.one.time(tokens, rows, ctx, pf_flops, pf_tokens, scenario))
        assert self.stack is not None
        return self.stack.time(tokens, rows, ctx, pf_flops, pf_tokens, scenario, which)


def analytic_latency(
    replica: ReplicaModel,
    rate: Num,
    inputs: LengthDist,
    outputs: LengthDist,
    percentile: str = "p99",
    scenario: int = VALUE,
    iterations: int = 60,
    *,
    ignore_batch_cap: bool = False,
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Approximate TTFT and TPOT at arrival ``rate`` (array) per replica, and feasibility.

    Steady state of continuous batching: with iteration time ``tau``, Little's law gives
    ``n = rate * O * tau`` decoding requests and ``rate * I * tau`` prompt tokens per
    iteration; ``tau`` solves ``tau = t_iter(n + rate*I*tau, ...)`` by fixed-point iteration
    (it converges from below while the replica is stable). TPOT is ``tau``; TTFT is the wait
    for the running iteration plus the prompt's own chunks plus an M/D/1-like queueing
    delay for the prefill budget (utilisation ``rho`` = prompt tokens per iteration / free
    budget); the percentile uses the quantile of the prompt length. Infeasible: no fixed
    point, more running requests than batch slots, or KV cache overflow.
    """
    lam = np.atleast_1d(np.asarray(rate, dtype=float))
    return _analytic_latency(
        _Replicas([replica]),
        lam,
        np.zeros(lam.shape, dtype=int),
        inputs,
        outputs,
        percentile,
        scenario,
        iterations,
        ignore_batch_cap=ignore_batch_cap,
    )


def _analytic_latency(
    reps: _Replicas,
    lam: FloatArray,
    which: np.ndarray,
    inputs: LengthDist,
    outputs: LengthDist,
    percentile: str,
    scenario: int,
    iterations: int = 60,
    *,
    ignore_batch_cap: bool = False,
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """:func:`analytic_latency` of rate ``lam[i]`` on replica ``which[i]`` of ``reps``,
    elementwise (an element's answer does not depend on the others)."""
    i_mean, o_mean = inputs.mean, outputs.mean
    q = PERCENTILES[percentile] / 100.0
    i_q = inputs.quantile(q) if q > 0.5 else inputs.quantile(0.5)
    coef = reps.coef[which]
    # prompts per iteration are Poisson(lam * tau); the iteration time is convex in the
    # tokens it holds, so the mean is taken over that count, not at its mean (Jensen)

    def mean_iteration(tau: np.ndarray, lam: np.ndarray, at: np.ndarray) -> np.ndarray:
        n = (lam * o_mean * tau)[:, None]
        ks, w = prompts_per_iteration(lam * tau, per_row=True)
        t = reps.time(
            at[:, None],
            n + ks * i_mean,
            np.maximum(n, 1.0),
            n * (i_mean + o_mean / 2.0),
            ks * reps.coef[at][:, None] * i_mean**2 / 2.0,
            ks * i_mean,
            scenario,
        )
        return np.asarray((w * t).sum(axis=1), dtype=float)

    tau0 = reps.time(which, 1.0, 1.0, 0.0, 0.0, 0.0, scenario) * np.ones(lam.shape)
    tau = tau0.copy()
    # the longest iteration the cost model describes at each rate: its running requests
    # (``lam * O * tau``) within its token grid, and at most 1e4 one-token steps
    top = np.maximum(
        np.minimum(1e4 * tau0, reps.max_tokens[which] / np.maximum(lam * o_mean, 1e-12)), tau0
    )
    # smallest fixed point of tau = F(tau), F increasing, by a safeguarded Newton on
    # g = F(tau) - tau from below (Press et al., Numerical Recipes, 3rd ed., section 9.4,
    # rtsafe): the last point with g > 0 (``lo``) and the first with g < 0 (``hi``) bracket
    # the fixed point, and a step that leaves the bracket is a bisection. Where F is convex
    # (a plain step) the Newton steps never leave it. Where F' >= 1 with g > 0 and nothing
    # bracketed yet -- overloaded if F is convex, not if a speculative step's per-token cost
    # bends it -- the next point is ``top``: g > 0 there too is overload. Only unsettled
    # rates are evaluated again.
    active = np.ones(lam.shape, bool)
    lo = tau0.copy()
    hi = np.full_like(lam, np.inf)
    for _ in range(iterations):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        t, lm, t_top, t_0 = tau[idx], lam[idx], top[idx], tau0[idx]
        h = 1e-4 * t
        # F at tau and at tau + h in one evaluation (half the calls of two)
        at = which[idx]
        both = mean_iteration(
            np.concatenate([t, t + h]), np.concatenate([lm, lm]), np.concatenate([at, at])
        )
        f, f_h = both[: idx.size], both[idx.size :]
        slope = (f_h - f) / h
        below = f > t
        lo_i = np.where(below, t, lo[idx])
        hi_i = np.where(below, hi[idx], t)
        lo[idx], hi[idx] = lo_i, hi_i
        bracketed = np.isfinite(hi_i)
        done = (np.abs(f - t) <= 1e-7 * t) | (bracketed & (hi_i - lo_i <= 1e-7 * t))
        at_top = t >= t_top * (1.0 - 1e-9)
        diverged = ~done & ~bracketed & at_top
        newton = t + (f - t) / np.maximum(1.0 - slope, 1e-12)
        inside = (slope < 1.0) & (newton > lo_i) & (newton < hi_i)
        mid = 0.5 * (lo_i + np.where(bracketed, hi_i, 0.0))
        nxt = np.where(
            bracketed,
            np.where(inside, newton, mid),
            np.where(slope < 1.0, np.minimum(newton, t_top), t_top),
        )
        tau[idx] = np.where(done, t, np.where(diverged, np.inf, np.maximum(nxt, t_0)))
        active[idx[done | diverged]] = False
    tau = np.where(np.isfinite(tau), tau, 1e6)
    n = lam * o_mean * tau
    pf = lam * i_mean * tau
    check = mean_iteration(tau, lam, which)
    converged = np.abs(check - tau) <= 1e-3 * tau + 1e-9
    per_request = reps.pool_tokens(i_mean + o_mean)[which]
    feasible = converged & (n * per_request <= reps.kv_capacity[which]) & (tau < 1e5)
    if not ignore_batch_cap:
        feasible &= n <= reps.max_batch[which]
    budget = np.maximum(reps.chunk[which] - n, 1.0)
    rho = np.minimum(pf / budget, 0.999)
    # the prompts sharing the request's iteration: itself plus those that arrived during the
    # previous one, Poisson(lam * tau), at the percentile; the prompt's own tokens at the
    # prompt-length quantile; the wait for the running iteration, which holds as many
    mu = lam * tau
    k_q = np.floor(mu)
    if q > 0.5:  # the quantile only where the rate is feasible (the rest reads inf)
        k_q[feasible] = poisson_quantile(mu[feasible], q)
    others = np.minimum(k_q * i_mean, np.maximum(budget - np.minimum(i_q, budget), 0.0))
    own = np.minimum(i_q, budget)
    own_chunks = np.ceil(i_q / budget)
    t_own = reps.time(
        which,
        n + own + others,
        np.maximum(n, 1.0) + 1 + k_q,
        n * (i_mean + o_mean / 2.0),
        coef * (own**2 + k_q * i_mean**2) / 2.0,
        own + others,
        scenario,
    )
    t_running = reps.time(
        which,
        n + np.minimum(k_q * i_mean, budget),
        np.maximum(n, 1.0),
        n * (i_mean + o_mean / 2.0),
        coef * k_q * i_mean**2 / 2.0,
        np.minimum(k_q * i_mean, budget),
        scenario,
    )
    wait_iter = t_running if q > 0.5 else t_running / 2.0
    # prompts beyond the token budget queue for later iterations (M/D/1-like wait)
    queue = t_own * rho / (2 * (1 - rho)) * (math.log(1 / (1 - q)) if q > 0.5 else 1.0)
    ttft = wait_iter + own_chunks * t_own + queue
    # TPOT of one request averages its ``O`` iterations; ``lam*O*tau`` prompts (Poisson)
    # land in them, each adding ``t_pf`` to its iteration: the percentile of that count
    # (normal approximation) gives the percentile TPOT.
    base_dec = reps.time(
        which,
        np.maximum(n, 1.0),
        np.maximum(n, 1.0),
        n * (i_mean + o_mean / 2.0),
        0.0,
        0.0,
        scenario,
    )
    t_pf = np.maximum(tau - base_dec, 0.0) / np.maximum(lam * tau, 1e-12)  # per prompt
    z = NormalDist().inv_cdf(q) if q > 0.5 else 0.0
    n_pf = lam * o_mean * tau
    tpot = tau + z * np.sqrt(n_pf) * t_pf / max(o_mean, 1.0)
    ttft = np.where(feasible, ttft, np.inf)
    tpot = np.where(feasible, tpot, np.inf)
    return ttft, tpot, feasible


def poisson_quantile(mu: Num, q: float) -> FloatArray:
    """Smallest ``k`` with ``P(Poisson(mu) <= k) >= q``, elementwise.

    >>> int(poisson_quantile(1.0, 0.99))
    4
    """
    from scipy import special

    mu = np.asarray(mu, dtype=float)
    m = np.maximum(mu, 1e-300)
    # the Cornish-Fisher start (normal quantile with its skewness term, Johnson, Kemp and
    # Kotz, Univariate Discrete Distributions, 3rd ed., section 4.5), then unit steps up
    # while the CDF is below q and down while the count below reaches it: the smallest k
    # exactly, with a few evaluations of the CDF (scipy.special.pdtr) instead of its
    # continuous inverse (pdtrik, twenty times the cost)
    z = NormalDist().inv_cdf(q)
    k = np.maximum(np.floor(m + z * np.sqrt(m) + (z * z - 1.0) / 6.0), 0.0)
    for _ in range(1000):
        up = special.pdtr(k, m) < q
        if not up.any():
            break
        k = k + up
    for _ in range(1000):
        down = (k > 0) & (special.pdtr(np.maximum(k - 1.0, 0.0), m) >= q)
        if not down.any():
            break
        k = k - down
    return np.where(mu > 0, k, 0.0)


def max_rates_for_caps(
    replica: ReplicaModel,
    caps: Sequence[float] | FloatArray | IntArray,
    inputs: LengthDist,
    outputs: LengthDist,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str,
    scenario: int = VALUE,
    points: int = 160,
    refine: int = 24,
) -> FloatArray:
    """Largest per-replica arrival rate meeting the SLOs (analytic model), for each batch cap.

    The latencies do not depend on the cap (only the running-request count must stay below
    it), so one curve over a geometric grid of rates serves every cap; the bracket of each
    cap is then refined on a finer grid in one more vectorised call.
    """
    return _max_rates(
        _Replicas([replica]),
        [np.asarray(caps, dtype=float)],
        inputs,
        outputs,
        [(ttft_slo_s, tpot_slo_s)],
        percentile,
        scenario,
        points,
        refine,
    )[0]


def _max_rates(
    reps: _Replicas,
    caps: Sequence[FloatArray],
    inputs: LengthDist,
    outputs: LengthDist,
    slos: Sequence[tuple[float | None, float | None]],
    percentile: str,
    scenario: int = VALUE,
    points: int = 160,
    refine: int = 24,
) -> list[FloatArray]:
    """:func:`max_rates_for_caps` of every replica of ``reps`` at once: replica ``g`` with
    batch caps ``caps[g]`` and SLOs ``slos[g]`` (TTFT, TPOT; ``None``: no target). Caps
    whose brackets coincide (those the SLOs limit, not their slots) share their refinement."""
    n_rep = len(reps)
    has_ttft = np.array([t is not None for t, _ in slos])
    has_tpot = np.array([p is not None for _, p in slos])
    ttft_slo = np.array([np.inf if t is None else t for t, _ in slos])
    tpot_slo = np.array([np.inf if p is None else p for _, p in slos])
    top = np.array([float(np.max(c)) for c in caps])
    reps_idx = np.arange(n_rep)
    t1 = reps.time(
        reps_idx, top, top, top * (inputs.mean + outputs.mean / 2), 0.0, 0.0, scenario
    ) * np.ones(n_rep)
    hi = top / np.maximum(t1, 1e-9) / max(outputs.mean, 1.0) * 2.0 + 1e-6
    grid = np.geomspace(hi * 1e-4, hi, points, axis=1)  # (replicas, points)

    def passing(rates: FloatArray, which: IntArray) -> tuple[BoolArray, FloatArray]:
        ttft, tpot, feas = _analytic_latency(
            reps, rates, which, inputs, outputs, percentile, scenario, ignore_batch_cap=True
        )
        ok = feas & ((ttft <= ttft_slo[which]) | ~has_ttft[which])
        ok &= (tpot <= tpot_slo[which]) | ~has_tpot[which]
        tau = np.where(np.isfinite(tpot), tpot, np.inf)
        return ok, rates * outputs.mean * tau  # running requests ~ rate x O x TPOT

    ok, n = passing(grid.ravel(), np.repeat(reps_idx, points))
    ok, n = ok.reshape(grid.shape), n.reshape(grid.shape)
    # every cap of every replica, flat
    cap = np.concatenate([np.asarray(c, dtype=float) for c in caps])
    owner = np.repeat(reps_idx, [len(c) for c in caps])
    okc = ok[owner] & (n[owner] <= cap[:, None])
    # largest contiguous passing index from the low end, per cap
    first_fail = np.where(okc.all(axis=1), points, np.argmin(okc, axis=1))
    idx = first_fail - 1
    out = np.zeros(len(cap))
    live = np.flatnonzero(idx >= 0)
    if live.size:
        lo_r = grid[owner[live], idx[live]]
        hi_r = grid[owner[live], np.minimum(idx[live] + 1, points - 1)]
        # one refinement per distinct bracket (replica, grid step)
        key = owner[live] * (points + 1) + idx[live]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        fine = np.geomspace(
            lo_r[first], np.maximum(hi_r[first], lo_r[first] * (1 + 1e-9)), refine, axis=1
        )
        ok_u, n_u = passing(fine.ravel(), np.repeat(owner[live][first], refine))
        ok_f = ok_u.reshape(fine.shape)[inverse] & (
            n_u.reshape(fine.shape)[inverse] <= cap[live][:, None]
        )
        best = np.where(ok_f, fine[inverse], 0.0).max(axis=1)
        out[live] = np.maximum(best, lo_r)
    return list(np.split(out, np.cumsum([len(c) for c in caps])[:-1]))


def max_rate_meeting(
    replica: ReplicaModel,
    inputs: LengthDist,
    outputs: LengthDist,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str,
    scenario: int = VALUE,
) -> float:
    """Largest per-replica arrival rate (requests/s) whose analytic latencies meet the SLOs."""
    r = max_rates_for_caps(
        replica, [replica.max_batch], inputs, outputs, ttft_slo_s, tpot_slo_s, percentile, scenario
    )
    return float(r[0])


# ---------------------------------------------------------------------------------------------
# Fleet sizing
# ---------------------------------------------------------------------------------------------
class CandidateExtra(TypedDict, total=False):
    """What the fleet search keeps of a candidate for its report
    (:func:`gpuplan.forecast.inference.size_serving_fleet`)."""

    price_source: str | None
    memory: MemoryPlan
    sharded: Sharded
    rates: DeviceRates
    kv_max_batch: int
    multi_node: JSONDict | None
    pcie_tp: JSONDict | None


@dataclass
class Candidate:
    """One way to serve the load: a GPU type, a layout and a batch cap."""

    gpu: str
    tp: int
    pp: int
    ep: int
    replica: ReplicaModel
    usd_per_gpu_hour: float | None = None
    max_rate: float = 0.0
    replicas_analytic: int | None = None
    replicas: int | None = None
    sim: SimSummary | None = None
    reason: str | None = None
    extra: CandidateExtra = field(default_factory=CandidateExtra)
    #: measured-over-model (TTFT, TPOT) factors of the user's own server on this GPU and
    #: engine (``serve`` probe runs in the artifact); the replica model's latencies are
    #: multiplied by them before every SLO check
    latency_factors: tuple[float, float] = (1.0, 1.0)
    #: data-parallel attention ranks of a wide-EP replica (1 otherwise)
    dp: int = 1

    def slos(
        self, ttft_slo_s: float | None, tpot_slo_s: float | None
    ) -> tuple[float | None, float | None]:
        """The SLOs the *model's* latencies must meet: ``model x factor <= SLO``.

        >>> c = Candidate("h100", 1, 1, 1, None, latency_factors=(2.0, 1.25))  # type: ignore[arg-type]
        >>> c.slos(1.0, 0.05)
        (0.5, 0.04)
        """
        ft, fp = self.latency_factors
        return (
            None if ttft_slo_s is None else ttft_slo_s / ft,
            None if tpot_slo_s is None else tpot_slo_s / fp,
        )

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.dp

    def num_gpus(self, replicas: int | None) -> int | None:
        return None if replicas is None else replicas * self.gpus_per_replica

    def as_dict(self) -> dict[str, Any]:
        """The candidate's row of the report's candidate table (JSON values)."""
        # returned loosely typed, not as JSONDict: size_serving_fleet (forecast/inference.py)
        # still reads these rows by key in arithmetic and extends them; JSONDict once it narrows
        r = self.replicas if self.replicas is not None else self.replicas_analytic
        d: JSONDict = {
            "gpu": self.gpu,
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            **({"dp_attention": self.dp} if self.dp > 1 else {}),
            "max_batch": self.replica.max_batch,
            "replicas": r,
            "num_gpus": self.num_gpus(r),
            "verified_by_simulation": self.replicas is not None,
            "max_qps_per_replica": self.max_rate,
            "usd_per_hour": None
            if self.usd_per_gpu_hour is None or r is None
            else self.usd_per_gpu_hour * r * self.gpus_per_replica,
        }
        if self.latency_factors != (1.0, 1.0):
            d["serving_factors"] = {
                "ttft": self.latency_factors[0],
                "tpot": self.latency_factors[1],
            }
        if self.reason:
            d["reason"] = self.reason
        return d


def meets(
    sim: SimResult, ttft_slo_s: float | None, tpot_slo_s: float | None, percentile: str
) -> bool:
    pct = PERCENTILES[percentile]
    if sim.overloaded:
        return False
    if ttft_slo_s is not None and sim.percentile("ttft", pct) > ttft_slo_s:
        return False
    return not (tpot_slo_s is not None and sim.percentile("tpot", pct) > tpot_slo_s)


def verify_replicas(
    cand: Candidate,
    qps: float,
    inputs: LengthDist,
    outputs: LengthDist,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str,
    *,
    num_requests: int,
    seed: int,
    start: int,
    limit: int | None = None,
) -> tuple[int | None, SimResult | None]:
    """Smallest replica count (searching around ``start``) whose simulation meets the SLOs
    (the simulated latencies scaled by the candidate's ``latency_factors``)."""
    cache: dict[int, SimResult] = {}
    ttft_slo_s, tpot_slo_s = cand.slos(ttft_slo_s, tpot_slo_s)

    def ok(r: int) -> bool:
        if r < 1:
            return False
        if r not in cache:
            cache[r] = simulate(
                cand.replica, qps / r, inputs, outputs, num_requests=num_requests, seed=seed
            )
        return meets(cache[r], ttft_slo_s, tpot_slo_s, percentile)

    start = max(1, int(start))
    if ok(start):
        # exponential search downwards, then bisection between a failing lo and passing hi
        hi, d = start, 1
        lo = hi - d
        while ok(lo):
            hi = lo
            d *= 2
            lo = max(hi - d, 0)
    else:
        lo, d = start, 1
        hi = lo + d
        while not ok(hi):
            lo = hi
            d *= 2
            hi = lo + d
            if (limit is not None and hi > limit) or hi > 10**6:
                return None, None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, cache[hi]


def analytic_rates(
    candidates: list[Candidate],
    inputs: LengthDist,
    outputs: LengthDist,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str,
) -> None:
    """Set ``max_rate`` of every candidate; candidates sharing a replica cost model (one
    layout, several batch caps) and latency factors share one analytic curve, and the
    curves of every plain cost model (:meth:`CostStack.stackable`) are solved together."""
    groups: dict[tuple[int, tuple[float, float]], list[Candidate]] = {}
    for c in candidates:
        if not c.reason:
            groups.setdefault((id(c.replica.cost), c.latency_factors), []).append(c)
    plain = [g for g in groups.values() if CostStack.stackable(g[0].replica.cost)]
    batches = [plain] if plain else []
    batches += [[g] for g in groups.values() if not CostStack.stackable(g[0].replica.cost)]
    for batch in batches:
        rates = _max_rates(
            _Replicas([g[0].replica for g in batch]),
            [np.array([float(c.replica.max_batch) for c in g]) for g in batch],
            inputs,
            outputs,
            [g[0].slos(ttft_slo_s, tpot_slo_s) for g in batch],
            percentile,
        )
        for g, r in zip(batch, rates, strict=True):
            for c, x in zip(g, r, strict=True):
                c.max_rate = float(x)


def size_fleet(
    candidates: list[Candidate],
    qps: float,
    inputs: LengthDist,
    outputs: LengthDist,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str = "p99",
    *,
    num_requests: int = 2000,
    seed: int = 0,
    verify: int = 4,
    progress: Callable[[], object] | None = None,
) -> tuple[Candidate | None, list[Candidate]]:
    """Cheapest candidate (by cost when every candidate has a price, else by GPU count; at
    equal cost, the one with more capacity at the SLOs: replicas x maximum rate per replica).

    The analytic model ranks every candidate; the cheapest ``verify`` are then checked by the
    discrete-event simulation, which decides the replica count. Returns the winner and all
    candidates (with their analytic or simulated replica counts, or why they cannot serve).
    """
    check_num_requests(num_requests)  # before the analytic search, not after it
    analytic_rates(candidates, inputs, outputs, ttft_slo_s, tpot_slo_s, percentile)
    for c in candidates:
        if c.reason:
            continue
        if c.max_rate <= 0:
            c.reason = "cannot meet the SLOs at any load (analytic model)"
            continue
        c.replicas_analytic = max(1, math.ceil(qps / c.max_rate))
    live = [c for c in candidates if not c.reason and c.replicas_analytic]
    # by cost where a layout has a price; a layout without one (a GPU the catalog prices no
    # instance of) cannot be shown cheaper: it ranks after every priced one, by GPU count
    by_price = any(c.usd_per_gpu_hour for c in live)

    def key(c: Candidate, r: int | None) -> tuple[int, float]:
        n = float(c.num_gpus(r) or math.inf)
        if not by_price:
            return 0, n
        return (0, n * float(c.usd_per_gpu_hour)) if c.usd_per_gpu_hour else (1, n)

    def rank(c: Candidate, r: int | None) -> tuple[int, float, float]:
        # equal cost: the fleet with more capacity left at the SLOs first (two TP 1 replicas
        # of an 8B model on PCIe L40S before one TP 2 replica of the same two cards, whose
        # all-reduces cross PCIe and whose one queue saturates sooner)
        return *key(c, r), -float(r or 0) * c.max_rate

    # one candidate per (gpu, tp, pp, ep): the batch cap with the fewest analytic replicas
    # (the largest such cap: it queues least)
    per_layout: dict[tuple[str, int, int, int], Candidate] = {}
    for c in live:
        k = (c.gpu, c.tp, c.pp, c.ep)
        cur = per_layout.get(k)
        if cur is None or (c.replicas_analytic, -c.replica.max_batch) < (
            cur.replicas_analytic,
            -cur.replica.max_batch,
        ):
            per_layout[k] = c
    order = sorted(
        per_layout.values(),
        key=lambda c: (*rank(c, c.replicas_analytic), -c.replica.max_batch),
    )
    best: Candidate | None = None
    checked = 0
    for c in order:
        if checked >= verify:
            break
        if best is not None:
            (kind_c, cost_c), (kind_b, cost_b) = (
                key(c, c.replicas_analytic),
                key(best, best.replicas),
            )
            if kind_c > kind_b or cost_c > 1.5 * cost_b:
                break
        limit = None
        if best is not None and best.replicas is not None:
            limit = math.ceil(key(best, best.replicas)[1] / max(key(c, 1)[1], 1e-12)) + 1
        r, sim = verify_replicas(
            c,
            qps,
            inputs,
            outputs,
            ttft_slo_s,
            tpot_slo_s,
            percentile,
            num_requests=num_requests,
            seed=seed,
            start=c.replicas_analytic or 1,
            limit=limit,
        )
        checked += 1
        if progress is not None:
            progress()
        if r is None:
            c.reason = c.reason or "simulation: more replicas than the best candidate"
            continue
        c.replicas = r
        c.sim = sim.summary() if sim else None
        if best is None or rank(c, r) < rank(best, best.replicas):
            best = c
    return best, candidates


# ---------------------------------------------------------------------------------------------
# Disaggregated prefill and decode
# ---------------------------------------------------------------------------------------------
def kv_transfer_time_s(kv_bytes: float, link_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """Time to move one request's KV cache from its prefill replica to its decode replica.

    ``latency + kv_bytes / link_bytes_per_s``: the prompt's KV cache (every layer, the
    part each GPU holds, ``prompt tokens x KV bytes per token per GPU``) crosses the link
    between the pools, each GPU sending its own shard in parallel. DistServe (Zhong et al.,
    OSDI 2024, section 3.3 and 4.3) and Splitwise (Patel et al., ISCA 2024, section 4.3)
    model the transfer this way and add it to the time to first token; NVIDIA Dynamo moves
    it with NIXL over the same RDMA fabric
    (https://docs.nvidia.com/dynamo/latest/architecture/disagg_serving.html).

    >>> kv_transfer_time_s(2.0e9, 50.0e9)
    0.04
    """
    if link_bytes_per_s <= 0:
        raise InputError(f"link bandwidth must be positive, got {link_bytes_per_s}")
    return float(latency_s) + float(kv_bytes) / float(link_bytes_per_s)


@dataclass(frozen=True)
class DisaggregatedLoop:
    """A closed-loop client against separate prefill and decode pools
    (:func:`disaggregated_closed_loop`); means over the requests in the steady state."""

    output_tokens_per_s: float
    requests_per_s: float
    #: decode time per output token after the first (benchmark_serving's TPOT)
    tpot_s: float
    #: from the send to the first token: prefill wait and pass, the KV transfer, and any wait
    #: for a decode slot (the decode worker reserves the request's KV before prefill starts)
    ttft_s: float
    #: mean running requests per decode worker
    decode_batch: float
    #: busy fraction of the prefill pool
    prefill_utilization: float
    #: what limits the rate: "clients" (the loop's own latency), "prefill" (the prefill pool
    #: saturates) or "decode slots" (every decode worker is at its batch or KV cap)
    bound: str


def disaggregated_closed_loop(
    prefill: ReplicaModel,
    decode: ReplicaModel,
    *,
    prefill_workers: int,
    decode_workers: int,
    input_tokens: float,
    output_tokens: float,
    concurrency: int,
    kv_transfer_s: float = 0.0,
    scenario: int = VALUE,
    grid: int = 256,
) -> DisaggregatedLoop:
    """``concurrency`` clients, each sending its next request when the last one finishes
    (``benchmark_serving --max-concurrency N --request-rate inf``), against
    ``prefill_workers`` prefill replicas and ``decode_workers`` decode replicas (NVIDIA Dynamo,
    SGLang PD disaggregation; DistServe, Zhong et al., OSDI 2024).

    Method: mean value analysis of a closed queueing network (Reiser & Lavenberg, J. ACM
    27(2), 1980), one station per phase; the steady-state rate ``X`` (requests/s) solves
    Little's law for the loop, ``N = X * (TTFT(X) + (O - 1) * TPOT(X))``, the left side
    increasing in ``X``:

    * **Decode** (each worker an occupancy-dependent delay): a worker holds
      ``b = X * (O - 1) * TPOT(b) / decode_workers`` requests (Little's law), and ``TPOT(b)``
      is the decode-only iteration of ``b`` sequences at the mean context ``I + O / 2``
      (:meth:`StepCostModel.time`; no prompt shares the iteration: disaggregated); ``b`` is
      the smallest fixed point, capped by the batch slots and the KV cache.
    * **Prefill**: a worker packs ``k = chunk // I`` prompts into a pass of ``t_k`` (a prompt
      longer than the chunk takes its chunked passes, :meth:`ReplicaModel.single_request`),
      so the pool serves ``prefill_workers * k / t_k`` prompts/s; a prompt alone takes
      :meth:`ReplicaModel.single_request`, plus the M/D/1 wait ``t_k * rho / (2 (1 - rho))``
      at utilisation ``rho``.
    * **KV transfer**: ``kv_transfer_s`` (:func:`kv_transfer_time_s`) joins the TTFT.

    When every decode worker is full before the clients are, the rate is the decode pool's
    and the remaining clients wait for a slot, in TTFT (Little's law for the loop).
    """
    if prefill_workers < 1 or decode_workers < 1 or concurrency < 1:
        raise InputError(
            "a disaggregated closed loop needs at least one prefill worker, one decode worker "
            f"and one client (got {prefill_workers}, {decode_workers}, {concurrency})"
        )
    i_len, o_len = float(input_tokens), float(output_tokens)
    n_clients = float(concurrency)
    after_first = max(o_len - 1.0, 0.0)
    ctx = i_len + o_len / 2.0
    dc = decode.cost

    def tpot(b: FloatArray) -> FloatArray:
        rows = np.maximum(b, 1.0)
        return np.asarray(dc.time(rows, rows, rows * ctx, 0.0, 0.0, scenario), dtype=float)

    alone, _ = prefill.single_request(i_len, 1.0, scenario)
    k = max(1, int(prefill.chunk_tokens // max(i_len, 1.0)))
    if k == 1:  # one prompt per pass, in chunks when it is longer than the budget
        t_k = alone - prefill.frontend_s_per_request
    else:
        t_k = float(
            prefill.cost.time(
                k * i_len,
                k,
                0.0,
                k * prefill.prefill_flops_coef * i_len**2 / 2.0,
                k * i_len,
                scenario,
            )
        )
    prefill_rate = prefill_workers * k / t_k
    per_request = float(decode.pool_tokens(i_len + o_len))
    b_cap = float(max(min(decode.max_batch, decode.kv_capacity_tokens / per_request), 1.0))
    t_cap = float(tpot(np.array([b_cap]))[0])
    decode_rate = decode_workers * b_cap / (after_first * t_cap) if after_first > 0 else math.inf

    def occupancy(x: FloatArray) -> FloatArray:
        """Smallest ``b`` with ``b = x (O - 1) TPOT(b) / workers`` (bisection, vectorised)."""
        lo, hi = np.zeros_like(x), np.full_like(x, b_cap)
        for _ in range(48):
            mid = (lo + hi) / 2.0
            above = mid >= x * after_first * tpot(mid) / decode_workers
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid)
        return hi

    def loop(x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(clients the loop holds at rate x, TTFT, TPOT)."""
        b = occupancy(x)
        t = tpot(b)
        rho = np.minimum(x / prefill_rate, 1.0 - 1e-12)
        ttft = alone + t_k * rho / (2.0 * (1.0 - rho)) + kv_transfer_s
        return x * (ttft + after_first * t), ttft, t

    x_max = min(prefill_rate, decode_rate) * (1.0 - 1e-9)
    lo, hi = 0.0, x_max
    for _ in range(3):  # a grid, then two finer grids around the crossing
        xs = np.linspace(lo, hi, grid)
        held_grid, _, _ = loop(xs)
        above = np.flatnonzero(held_grid >= n_clients)
        if above.size == 0:
            lo = hi = float(xs[-1])
            break
        j = int(above[0])
        lo, hi = float(xs[max(j - 1, 0)]), float(xs[j])
    x = float(lo + hi) / 2.0 if hi > lo else hi
    held_a, ttft_a, tpot_a = loop(np.array([x]))
    held, first_s, step_s = float(held_a[0]), float(ttft_a[0]), float(tpot_a[0])
    if held < n_clients * (1.0 - 1e-3):
        bound = "decode slots" if decode_rate <= prefill_rate else "prefill"
        # the clients not in the loop wait for a slot
        first_s = n_clients / x - after_first * step_s
    elif x >= 0.95 * prefill_rate:
        bound = "prefill"
    else:
        bound = "clients"
    b = float(occupancy(np.array([x]))[0])
    return DisaggregatedLoop(
        output_tokens_per_s=x * o_len,
        requests_per_s=x,
        tpot_s=step_s,
        ttft_s=first_s,
        decode_batch=b,
        prefill_utilization=x / prefill_rate,
        bound=bound,
    )
