"""What the server exposes at ``GET /metrics``, in the Prometheus text format.

Histograms are observed once per finished request from the server's own timestamps (arrival =
when the HTTP handler received the request):

- ``course_time_to_first_token_seconds``: arrival to first token (queueing + prefill);
- ``course_time_per_output_token_seconds``: (finish - first token) / (output tokens - 1), for
  requests with at least 2 output tokens;
- ``course_e2e_request_latency_seconds``: arrival to finish.

Gauges and counters are read from the engine loop at scrape time: requests waiting and running,
KV blocks in use, free and in the pool (what a KV-aware router balances by: ``balancing``),
preemptions, prompt tokens and how many of them came from the prefix cache (hit rate = hits /
queries), requests finished by reason, requests rejected by status.

Each server has its own ``CollectorRegistry``, so several servers in one process (a notebook
with replicas) keep separate numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

disable_created_metrics()  # the *_created series only add noise for a reader of /metrics

__all__ = ["ServerMetrics", "TTFT_BUCKETS", "TPOT_BUCKETS", "E2E_BUCKETS"]

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
                10.0, 20.0, 40.0)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)


class _StateCollector:
    """Gauges and counters computed from the engine loop's state at every scrape."""

    def __init__(self, read_state: Callable[[], object]) -> None:
        self._read_state = read_state

    def collect(self):
        state = self._read_state()
        gauges = {
            "course_num_requests_waiting": ("Requests admitted and waiting for a place in the batch.", state.num_waiting),
            "course_num_requests_running": ("Requests in the batch (holding KV blocks).", state.num_running),
            "course_kv_blocks_used": ("KV-cache blocks held by running requests.", state.kv_blocks_used),
            "course_kv_blocks_free": ("KV-cache blocks a new request could take now (cached prefixes count: they "
                                      "can be evicted).", state.kv_blocks_total - state.kv_blocks_used),
            "course_kv_blocks_total": ("KV-cache blocks in the pool.", state.kv_blocks_total),
            "course_kv_cache_usage_ratio": ("Share of the KV pool in use (0 to 1).",
                                            state.kv_blocks_used / max(state.kv_blocks_total, 1)),
        }
        for name, (documentation, value) in gauges.items():
            yield GaugeMetricFamily(name, documentation, value=value)
        counters = {
            "course_num_preemptions": ("Requests preempted (KV freed, recomputed later).", state.num_preemptions),
            "course_prefix_cache_queries": ("Prompt tokens looked up in the prefix cache.", state.num_prompt_tokens),
            "course_prefix_cache_hits": ("Prompt tokens whose KV came from the prefix cache.",
                                         state.num_prefix_cached_tokens),
        }
        for name, (documentation, value) in counters.items():
            yield CounterMetricFamily(name, documentation, value=value)


class ServerMetrics:
    """The registry of one server: histograms fed by ``observe_finished``, the rest read from state."""

    def __init__(self, read_state: Callable[[], object]) -> None:
        self.registry = CollectorRegistry()
        self.ttft = Histogram("course_time_to_first_token_seconds", "Arrival to first token, seconds.",
                              buckets=TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram("course_time_per_output_token_seconds",
                              "Mean gap between output tokens after the first, seconds.",
                              buckets=TPOT_BUCKETS, registry=self.registry)
        self.e2e = Histogram("course_e2e_request_latency_seconds", "Arrival to last token, seconds.",
                             buckets=E2E_BUCKETS, registry=self.registry)
        self.finished = Counter("course_request_success", "Requests finished, by finish reason.",
                                ["finish_reason"], registry=self.registry)
        self.rejected = Counter("course_requests_rejected", "Requests refused at the door, by HTTP status.",
                                ["status"], registry=self.registry)
        self.generation_tokens = Counter("course_generation_tokens", "Output tokens generated.",
                                         registry=self.registry)
        self.registry.register(_StateCollector(read_state))

    def observe_finished(self, timing, finish_reason: str) -> None:
        """Record one finished request (``RequestTiming``); aborted ones count only by reason."""
        self.finished.labels(finish_reason=finish_reason).inc()
        self.generation_tokens.inc(timing.num_output_tokens)
        if finish_reason == "abort" or timing.first_token_time is None or timing.finish_time is None:
            return
        self.ttft.observe(timing.first_token_time - timing.arrival_time)
        self.e2e.observe(timing.finish_time - timing.arrival_time)
        if timing.num_output_tokens >= 2:
            self.tpot.observe((timing.finish_time - timing.first_token_time) / (timing.num_output_tokens - 1))

    def observe_rejected(self, status: int) -> None:
        self.rejected.labels(status=str(status)).inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
