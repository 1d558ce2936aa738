"""Serving metrics: what one request experienced and what a whole run delivered.

Per request (all times are ``time.perf_counter()`` seconds, the same clock for every field):

- **TTFT**, time to first token = first_token_time - arrival_time. Includes queueing and prefill.
- **TPOT**, time per output token = (finish_time - first_token_time) / (num_output_tokens - 1):
  the mean gap between consecutive tokens *after* the first. A 1-token answer has no gap, so its
  TPOT is undefined: ``tpot`` is None and ``summarize`` leaves the request out of the TPOT statistics.
- **End-to-end latency** = finish_time - arrival_time; for n >= 2 tokens it equals TTFT + (n - 1) * TPOT.
- **Queue time** = first_scheduled_time - arrival_time.

Per run (``summarize``): mean, median, p90 and p99 of each latency, and throughput over the
measured duration: input (prompt) tokens/s, output tokens/s and requests/s.

Percentiles use linear interpolation between order statistics, numpy's default ("linear"):
for sorted values v[0..n-1] the q-th percentile sits at rank r = (n - 1) * q / 100 and is
v[floor(r)] + (r - floor(r)) * (v[floor(r) + 1] - v[floor(r)]). So the median of [1, 2, 3, 4] is
2.5 and the p90 of [0, 10] is 9.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from course_lib.exercises import exercise


@dataclass
class RequestMetrics:
    """Timestamps and token counts of one request, filled in by the engine as the request runs.

    arrival_time: when the request was added. first_scheduled_time: when it first got a place in a
    batch. first_token_time: when its first output token was sampled. finish_time: when it finished.
    num_prompt_tokens: prompt length (cached prefix tokens included). num_output_tokens: tokens
    generated. token_times: the time each output token was sampled (``token_times[0]`` is
    ``first_token_time``). The ``record_*`` methods keep these fields consistent; an engine may also
    set the fields directly.
    """

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    token_times: list[float] = field(default_factory=list)

    def record_scheduled(self, now: float) -> None:
        """Note that the request was put in a batch at ``now`` (only the first time counts)."""
        if self.first_scheduled_time is None:
            self.first_scheduled_time = now

    def record_token(self, now: float) -> None:
        """Note that one output token was sampled at ``now``."""
        if self.first_token_time is None:
            self.first_token_time = now
        self.token_times.append(now)
        self.num_output_tokens += 1

    def record_finish(self, now: float) -> None:
        """Note that the request finished at ``now``."""
        self.finish_time = now

    @property
    def ttft(self) -> float | None:
        """Time to first token in seconds, or None before the first token."""
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def tpot(self) -> float | None:
        """Mean seconds per output token after the first; None if unfinished or fewer than 2 tokens."""
        if self.first_token_time is None or self.finish_time is None or self.num_output_tokens < 2:
            return None
        return (self.finish_time - self.first_token_time) / (self.num_output_tokens - 1)

    @property
    def e2e_latency(self) -> float | None:
        """Seconds from arrival to finish, or None while the request runs."""
        if self.finish_time is None:
            return None
        return self.finish_time - self.arrival_time

    @property
    def queue_time(self) -> float | None:
        """Seconds from arrival to first being scheduled, or None before that."""
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time


@exercise("lab02-prefill-vs-decode", "04_batching", "percentile")
def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of ``values`` with linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty sequence is undefined")
    if not (0 <= q <= 100):
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lower = math.floor(rank)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (rank - lower) * (ordered[upper] - ordered[lower])


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency over ``count`` requests, in seconds."""

    count: int
    mean: float
    median: float
    p90: float
    p99: float

    @classmethod
    @exercise("lab02-prefill-vs-decode", "04_batching", "compute_metrics")
    def of(cls, values: Sequence[float]) -> LatencyStats:
        return cls(
            count=len(values),
            mean=sum(values) / len(values),
            median=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
        )


@dataclass(frozen=True)
class MetricsSummary:
    """What a run delivered. Latencies in seconds; ``tpot`` is None when no request had >= 2 tokens.

    duration: the seconds the throughputs are measured over (by default first arrival to last finish).
    """

    num_requests: int
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    ttft: LatencyStats
    tpot: LatencyStats | None
    e2e_latency: LatencyStats
    input_tokens_per_s: float
    output_tokens_per_s: float
    requests_per_s: float

    def as_dict(self) -> dict:
        """Plain nested dict (JSON-ready): latencies as {"count", "mean", "median", "p90", "p99"}."""
        return asdict(self)

    def as_table(self) -> str:
        """A fixed-width text table: latencies in milliseconds, then throughput."""
        lines = [f"{'latency (ms)':<14}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}{'n':>6}"]
        for name, stats in (("TTFT", self.ttft), ("TPOT", self.tpot), ("end-to-end", self.e2e_latency)):
            if stats is None:
                lines.append(f"{name:<14}{'(no request with >= 2 output tokens)':>46}")
                continue
            cells = "".join(f"{1000 * v:>10.1f}" for v in (stats.mean, stats.median, stats.p90, stats.p99))
            lines.append(f"{name:<14}{cells}{stats.count:>6}")
        lines.append("")
        lines.append(f"{self.num_requests} requests in {self.duration:.2f} s")
        lines.append(f"input tokens/s   {self.input_tokens_per_s:>10.1f}  ({self.total_input_tokens} tokens)")
        lines.append(f"output tokens/s  {self.output_tokens_per_s:>10.1f}  ({self.total_output_tokens} tokens)")
        lines.append(f"requests/s       {self.requests_per_s:>10.2f}")
        return "\n".join(lines)


@exercise("lab02-prefill-vs-decode", "04_batching", "compute_metrics")
def summarize(metrics: Sequence[RequestMetrics], duration: float | None = None) -> MetricsSummary:
    """Latency statistics and throughput of finished requests.

    metrics: one RequestMetrics per request, each finished (finish_time and first_token_time set).
    duration: seconds to divide token and request counts by; default: from the earliest arrival to
    the latest finish. Requests with fewer than 2 output tokens are left out of TPOT (undefined).
    """
    if not metrics:
        raise ValueError("summarize needs at least one RequestMetrics")
    for index, m in enumerate(metrics):
        if m.finish_time is None or m.first_token_time is None:
            raise ValueError(f"metrics[{index}] is not finished (finish_time or first_token_time is None)")
    if duration is None:
        duration = max(m.finish_time for m in metrics) - min(m.arrival_time for m in metrics)
    if not duration > 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")

    tpots = [m.tpot for m in metrics if m.tpot is not None]
    total_input = sum(m.num_prompt_tokens for m in metrics)
    total_output = sum(m.num_output_tokens for m in metrics)
    return MetricsSummary(
        num_requests=len(metrics),
        duration=duration,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        ttft=LatencyStats.of([m.ttft for m in metrics]),
        tpot=LatencyStats.of(tpots) if tpots else None,
        e2e_latency=LatencyStats.of([m.e2e_latency for m in metrics]),
        input_tokens_per_s=total_input / duration,
        output_tokens_per_s=total_output / duration,
        requests_per_s=len(metrics) / duration,
    )
