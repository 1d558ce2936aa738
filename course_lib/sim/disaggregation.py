"""Prefill/decode disaggregation: the same workload on colocated servers vs separate pools.

A *colocated* server runs prefills and decodes in the same steps, so every prompt that arrives
stretches the step that all running decodes are waiting on. A *disaggregated* deployment
(Splitwise, DistServe) gives prefills their own instances; when a prompt is done, its KV cache is
copied to a decode instance, whose steps then hold decodes only. The price is the copy: the
second output token waits for the transfer.

No model runs here. A step's duration comes from a small linear cost model
(:class:`CostModel`): a fixed cost per step (reading the weights once), a cost per decoding
sequence (reading its KV cache) and a cost per prefill token (compute). Each instance serves the
requests assigned to it round-robin, in arrival order, with continuous batching: requests join
and leave at step boundaries. Times are in milliseconds; every function is deterministic (the
workload generator takes a seed).

Per request the simulator records when each output token appeared; TTFT, TPOT and the gaps
between tokens follow (see :class:`RequestTrace`).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from course_lib.exercises import exercise

__all__ = [
    "CostModel",
    "RequestTrace",
    "SimRequest",
    "SimResult",
    "kv_transfer_ms",
    "make_workload",
    "simulate_colocated",
    "simulate_disaggregated",
]


@dataclass(frozen=True)
class SimRequest:
    """One request of a workload: when it arrives (ms), its prompt length and how many tokens it generates."""

    arrival_ms: float
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.arrival_ms) or self.arrival_ms < 0:
            raise ValueError(f"arrival_ms must be a finite number >= 0, got {self.arrival_ms!r}")
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class CostModel:
    """Duration of one engine step, in ms: a linear model of a GPU serving a mid-sized model.

    step_ms = step_overhead_ms + decode_ms_per_seq * decoding sequences + prefill_ms_per_token * prompt tokens.

    The defaults are of the order of an 8B model in 16-bit on one data-centre GPU: reading 16 GB of
    weights at ~2 TB/s takes ~8 ms whatever the batch (decode is memory-bound), each sequence adds
    the reading of its KV cache, and a prompt token costs ~2 x 8e9 FLOPs, ~0.05 ms at a realistic
    ~300 TFLOP/s (prefill is compute-bound, so its time grows with the tokens).
    """

    step_overhead_ms: float = 8.0
    decode_ms_per_seq: float = 0.1
    prefill_ms_per_token: float = 0.05

    def __post_init__(self) -> None:
        for name in ("step_overhead_ms", "decode_ms_per_seq", "prefill_ms_per_token"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def step_ms(self, num_prefill_tokens: int, num_decodes: int) -> float:
        """Duration of a step that prefills ``num_prefill_tokens`` tokens and decodes ``num_decodes`` sequences."""
        if num_prefill_tokens < 0 or num_decodes < 0:
            raise ValueError(f"token and sequence counts must be >= 0, got {num_prefill_tokens}, {num_decodes}")
        return (self.step_overhead_ms + self.decode_ms_per_seq * num_decodes
                + self.prefill_ms_per_token * num_prefill_tokens)


@dataclass
class RequestTrace:
    """What one request experienced: the time (ms) each of its output tokens appeared."""

    request: SimRequest
    token_times_ms: list[float] = field(default_factory=list)

    @property
    def ttft_ms(self) -> float:
        """Time to first token: first token time - arrival."""
        return self.token_times_ms[0] - self.request.arrival_ms

    @property
    def tpot_ms(self) -> float | None:
        """Mean gap between output tokens after the first; None for a one-token answer."""
        if len(self.token_times_ms) < 2:
            return None
        return (self.token_times_ms[-1] - self.token_times_ms[0]) / (len(self.token_times_ms) - 1)

    @property
    def gaps_ms(self) -> list[float]:
        """The gaps between consecutive output tokens (len = output tokens - 1)."""
        times = self.token_times_ms
        return [later - earlier for earlier, later in zip(times, times[1:])]


@dataclass
class SimResult:
    """The traces of one simulated deployment, in the workload's order, and how to summarize them."""

    name: str
    traces: list[RequestTrace]

    @property
    def ttft_ms(self) -> list[float]:
        return [trace.ttft_ms for trace in self.traces]

    @property
    def tpot_ms(self) -> list[float]:
        """TPOT of every request with at least two output tokens."""
        return [trace.tpot_ms for trace in self.traces if trace.tpot_ms is not None]

    @property
    def gaps_ms(self) -> list[float]:
        """Every gap between consecutive output tokens, all requests pooled."""
        return [gap for trace in self.traces for gap in trace.gaps_ms]

    def summary(self) -> dict[str, float]:
        """Median and p99 of TTFT, TPOT and the token gaps (ms)."""
        result = {}
        for metric in ("ttft_ms", "tpot_ms", "gaps_ms"):
            values = getattr(self, metric)
            if values:
                result[f"{metric[:-3]}_p50_ms"] = float(np.percentile(values, 50))
                result[f"{metric[:-3]}_p99_ms"] = float(np.percentile(values, 99))
        return result


def make_workload(num_requests: int = 200, rate_per_s: float = 20.0, prompt_tokens: tuple[int, int] = (200, 2000),
                  output_tokens: tuple[int, int] = (50, 300), seed: int = 0) -> list[SimRequest]:
    """A reproducible workload: Poisson arrivals at ``rate_per_s``, lengths uniform in the given ranges.

    Returns ``num_requests`` requests sorted by arrival time (the first arrives at 0 ms).
    """
    if not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests must be an integer >= 1, got {num_requests!r}")
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s!r}")
    for name, (low, high) in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        if not 1 <= low <= high:
            raise ValueError(f"{name} must be a range (low, high) with 1 <= low <= high, got {(low, high)}")
    rng = random.Random(seed)
    clock = 0.0
    requests = []
    for index in range(num_requests):
        if index:
            clock += rng.expovariate(rate_per_s) * 1000.0
        requests.append(SimRequest(clock, rng.randint(*prompt_tokens), rng.randint(*output_tokens)))
    return requests


@exercise("lab02-prefill-vs-decode", "05_beyond_the_basics", "kv_transfer_ms")
def kv_transfer_ms(num_tokens: int, kv_bytes_per_token: float, link_gb_per_s: float, latency_ms: float = 0.0) -> float:
    """Time to copy the KV cache of ``num_tokens`` tokens between instances, in ms.

    latency_ms + num_tokens * kv_bytes_per_token / (link_gb_per_s * 1e9 bytes/s) * 1000.
    (GB here is 10**9 bytes, the unit link speeds are quoted in.)
    """
    if num_tokens < 0 or kv_bytes_per_token < 0 or latency_ms < 0:
        raise ValueError("num_tokens, kv_bytes_per_token and latency_ms must be >= 0")
    if not link_gb_per_s > 0:
        raise ValueError(f"link_gb_per_s must be > 0, got {link_gb_per_s!r}")
    return latency_ms + num_tokens * kv_bytes_per_token / (link_gb_per_s * 1e9) * 1000.0


def _check_common(requests: Sequence[SimRequest], max_batch: int) -> None:
    if not requests or not all(isinstance(request, SimRequest) for request in requests):
        raise ValueError("requests must be a non-empty sequence of SimRequest")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")


def _check_instances(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _serve_colocated(requests: list[SimRequest], traces: dict[int, RequestTrace], cost: CostModel, max_batch: int,
                     token_budget: int | None) -> None:
    """One colocated instance: each step decodes every running request, then prefills.

    token_budget None: waiting prompts are admitted whole (up to max_batch requests in flight).
    Otherwise decode-maximal batching: decodes take one token each, prompt chunks fill the rest.
    """
    waiting = deque(sorted(range(len(requests)), key=lambda index: requests[index].arrival_ms))
    prefilling: list[list[int]] = []  # [request index, prompt tokens still to run]
    decoding: list[int] = []
    clock = 0.0
    while waiting or prefilling or decoding:
        if not prefilling and not decoding and requests[waiting[0]].arrival_ms > clock:
            clock = requests[waiting[0]].arrival_ms  # idle until the next arrival
        budget = math.inf if token_budget is None else token_budget - len(decoding)
        chunks: list[tuple[list[int], int]] = []
        for entry in prefilling:
            if budget <= 0:
                break
            size = min(entry[1], budget)
            chunks.append((entry, size))
            budget -= size
        while (waiting and requests[waiting[0]].arrival_ms <= clock and budget > 0
               and len(prefilling) + len(decoding) < max_batch):
            index = waiting.popleft()
            entry = [index, requests[index].prompt_tokens]
            prefilling.append(entry)
            size = min(entry[1], budget)
            chunks.append((entry, size))
            budget -= size
        num_prefill_tokens = sum(size for _, size in chunks)
        clock += cost.step_ms(num_prefill_tokens, len(decoding))
        still_decoding = []
        for index in decoding:
            traces[index].token_times_ms.append(clock)
            if len(traces[index].token_times_ms) < requests[index].output_tokens:
                still_decoding.append(index)
        for entry, size in chunks:
            entry[1] -= size
            if entry[1] == 0:  # the prompt's last token ran: its logits give the first output token
                index = entry[0]
                traces[index].token_times_ms.append(clock)
                if requests[index].output_tokens > 1:
                    still_decoding.append(index)
        prefilling = [entry for entry in prefilling if entry[1] > 0]
        decoding = still_decoding


def simulate_colocated(requests: Sequence[SimRequest], cost: CostModel | None = None, *, num_instances: int = 2,
                       max_batch: int = 64, token_budget: int | None = None, name: str | None = None) -> SimResult:
    """Serve ``requests`` on ``num_instances`` identical servers that each prefill and decode.

    Request i goes to instance i % num_instances. token_budget None: whole prompts join the decodes'
    step (a long prompt stalls every running decode); an int: chunked prefill with decode-maximal
    batching under that many tokens per step (must be > max_batch so decodes always fit).
    """
    cost = cost or CostModel()
    _check_common(requests, max_batch)
    _check_instances("num_instances", num_instances)
    if token_budget is not None and (not isinstance(token_budget, int) or token_budget <= max_batch):
        raise ValueError(f"token_budget must be None or an integer > max_batch ({max_batch}), got {token_budget!r}")
    traces = {index: RequestTrace(request) for index, request in enumerate(requests)}
    for instance in range(num_instances):
        indices = list(range(instance, len(requests), num_instances))
        local_traces = {local: traces[index] for local, index in enumerate(indices)}
        _serve_colocated([requests[index] for index in indices], local_traces, cost, max_batch, token_budget)
    default_name = f"colocated x{num_instances}" + ("" if token_budget is None else f", chunked ({token_budget})")
    return SimResult(name or default_name, [traces[index] for index in range(len(requests))])


def _serve_prefill(requests: list[SimRequest], cost: CostModel, max_prefill_tokens: int) -> list[float]:
    """One prefill instance: batches of waiting prompts (FIFO, at most max_prefill_tokens unless one is longer).

    Returns the time each request's prefill ended (= its first token), in the order given.
    """
    order = deque(sorted(range(len(requests)), key=lambda index: requests[index].arrival_ms))
    done_ms = [0.0] * len(requests)
    clock = 0.0
    while order:
        clock = max(clock, requests[order[0]].arrival_ms)
        batch = [order.popleft()]
        tokens = requests[batch[0]].prompt_tokens
        while (order and requests[order[0]].arrival_ms <= clock
               and tokens + requests[order[0]].prompt_tokens <= max_prefill_tokens):
            tokens += requests[order[0]].prompt_tokens
            batch.append(order.popleft())
        clock += cost.step_ms(tokens, 0)
        for index in batch:
            done_ms[index] = clock
    return done_ms


def _serve_decode(ready_ms: list[float], tokens_left: list[int], cost: CostModel, max_batch: int) -> list[list[float]]:
    """One decode instance: requests join when their KV has arrived; every step gives each one token.

    Returns, per request, the times of its decode tokens (len = tokens_left).
    """
    order = deque(sorted((index for index in range(len(ready_ms)) if tokens_left[index] > 0),
                         key=lambda index: ready_ms[index]))
    times: list[list[float]] = [[] for _ in ready_ms]
    running: list[int] = []
    clock = 0.0
    while order or running:
        if not running:
            clock = max(clock, ready_ms[order[0]])
        while order and ready_ms[order[0]] <= clock and len(running) < max_batch:
            running.append(order.popleft())
        clock += cost.step_ms(0, len(running))
        for index in running:
            times[index].append(clock)
        running = [index for index in running if len(times[index]) < tokens_left[index]]
    return times


def simulate_disaggregated(requests: Sequence[SimRequest], cost: CostModel | None = None, *,
                           num_prefill_instances: int = 1, num_decode_instances: int = 1,
                           transfer_ms: Callable[[int], float] | float = 0.0, max_batch: int = 64,
                           max_prefill_tokens: int = 4096, name: str | None = None) -> SimResult:
    """Serve ``requests`` with separate prefill and decode pools joined by a KV transfer.

    Request i is prefilled on prefill instance i % num_prefill_instances; the prefill produces its
    first token. Its KV cache then travels to decode instance i % num_decode_instances, which takes
    ``transfer_ms(prompt_tokens)`` ms (a function of the prompt length, or a constant); only then
    can the request join that instance's decode steps.
    """
    cost = cost or CostModel()
    _check_common(requests, max_batch)
    _check_instances("num_prefill_instances", num_prefill_instances)
    _check_instances("num_decode_instances", num_decode_instances)
    if not isinstance(max_prefill_tokens, int) or max_prefill_tokens < 1:
        raise ValueError(f"max_prefill_tokens must be an integer >= 1, got {max_prefill_tokens!r}")
    transfer = transfer_ms if callable(transfer_ms) else (lambda num_tokens: float(transfer_ms))
    first_token_ms = [0.0] * len(requests)
    for instance in range(num_prefill_instances):
        indices = list(range(instance, len(requests), num_prefill_instances))
        done = _serve_prefill([requests[index] for index in indices], cost, max_prefill_tokens)
        for index, finish in zip(indices, done):
            first_token_ms[index] = finish
    traces = [RequestTrace(request, [first_token_ms[index]]) for index, request in enumerate(requests)]
    for instance in range(num_decode_instances):
        indices = list(range(instance, len(requests), num_decode_instances))
        ready = []
        for index in indices:
            delay = float(transfer(requests[index].prompt_tokens))
            if not math.isfinite(delay) or delay < 0:
                raise ValueError(f"transfer_ms must give a finite time >= 0, got {delay!r}")
            ready.append(first_token_ms[index] + delay)
        tokens_left = [requests[index].output_tokens - 1 for index in indices]
        for index, times in zip(indices, _serve_decode(ready, tokens_left, cost, max_batch)):
            traces[index].token_times_ms.extend(times)
    default_name = f"disaggregated {num_prefill_instances}P + {num_decode_instances}D"
    return SimResult(name or default_name, traces)
