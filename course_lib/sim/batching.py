"""Batching policies on a simulated clock: who joins the batch, and what each request experiences.

The simulator replaces the model by a **step-cost model**. One step runs the whole batch once:
the requests that were just admitted run their prompt (prefill) and get their first token, every
other request in the batch gets one more token (decode). The step takes

    step_time = overhead_s + per_prefill_token_s * (prompt tokens run this step)
                           + per_decode_seq_s * (sequences decoding this step)

``overhead_s`` stands for what a step pays whatever is in it (reading the weights once, launching
the kernels, Python), the two other terms for the work that grows with the batch. ``fit_step_cost``
turns two or more timings of the real model into these numbers.

A **policy** decides, before every step, which waiting requests join the batch. It is a callable
``policy(state: BatchState) -> list[SimRequest]`` that returns a subset of ``state.waiting``; the
batch may never hold more than ``state.max_batch_size`` requests. Requests leave the batch by
themselves the step their last token is produced. When the batch is empty and the policy admits
nothing, the clock moves to the next arrival, or by ``poll_interval_s`` if requests are waiting
(a policy may be waiting for a timeout).

The reference policies (``static_policy``, ``dynamic_policy``, ``continuous_policy``,
``priority_policy``) are the ones the lab's checks compare a student's with.

Every request leaves a raw **trace**: arrival time, prompt length and the time each output token
was produced (``RequestTrace``), the same record the real engine's ``RequestMetrics`` holds, so
latency metrics computed from traces work on both.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from course_lib.metrics import RequestMetrics
from course_lib.exercises import exercise

__all__ = [
    "BatchState",
    "PolicyError",
    "RequestTrace",
    "SimRequest",
    "SimResult",
    "StepCost",
    "StepRecord",
    "continuous_policy",
    "dynamic_policy",
    "fit_step_cost",
    "poisson_workload",
    "priority_policy",
    "simulate",
    "static_policy",
]


@dataclass(frozen=True)
class SimRequest:
    """One request of a workload: when it arrives, how long its prompt is, how many tokens it wants.

    request_id: int, unique in the workload. arrival_time: seconds (>= 0). prompt_len: prompt tokens
    (>= 1). output_len: output tokens it will generate (>= 1). priority: lower runs first under a
    priority policy (0 = most urgent).
    """

    request_id: int
    arrival_time: float
    prompt_len: int
    output_len: int
    priority: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.arrival_time, (int, float)) and math.isfinite(self.arrival_time)
                and self.arrival_time >= 0):
            raise ValueError(f"arrival_time must be a finite number >= 0, got {self.arrival_time!r}")
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class BatchState:
    """What a policy sees before a step.

    now: the clock in seconds. waiting: requests that have arrived and are not in the batch, in
    arrival order (ties by request_id). running: requests in the batch (they all decode this step).
    max_batch_size: the most requests the batch may hold. all_arrived: True when no request will
    arrive any more (a policy that waits for a full batch must give up waiting then).
    """

    now: float
    waiting: tuple[SimRequest, ...]
    running: tuple[SimRequest, ...]
    max_batch_size: int
    all_arrived: bool


Policy = Callable[[BatchState], Sequence[SimRequest]]


@dataclass
class RequestTrace:
    """Raw timestamps of one request (seconds on one clock).

    arrival_time: when it arrived. num_prompt_tokens: its prompt length. token_times: when each
    output token was produced, in order (token_times[0] is the first token, token_times[-1] the
    finish). first_scheduled_time: when it joined a batch (None if it never did). priority: as given.
    """

    request_id: int
    arrival_time: float
    num_prompt_tokens: int
    token_times: list[float] = field(default_factory=list)
    first_scheduled_time: float | None = None
    priority: int = 0

    def to_metrics(self) -> RequestMetrics:
        """The same record as a ``course_lib.metrics.RequestMetrics`` (for ``summarize``)."""
        return RequestMetrics(
            arrival_time=self.arrival_time,
            first_scheduled_time=self.first_scheduled_time,
            first_token_time=self.token_times[0] if self.token_times else None,
            finish_time=self.token_times[-1] if self.token_times else None,
            num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=len(self.token_times),
            token_times=list(self.token_times),
        )

    @classmethod
    def from_metrics(cls, request_id, metrics: RequestMetrics, arrival_time: float | None = None) -> RequestTrace:
        """A trace from the engine's ``RequestMetrics``; ``arrival_time`` overrides the recorded one."""
        return cls(
            request_id=request_id,
            arrival_time=metrics.arrival_time if arrival_time is None else arrival_time,
            num_prompt_tokens=metrics.num_prompt_tokens,
            token_times=list(metrics.token_times),
            first_scheduled_time=metrics.first_scheduled_time,
        )


@dataclass(frozen=True)
class StepRecord:
    """One simulated step: when it ran, who was in it, and the work it did.

    prefill_ids: requests that ran their prompt this step; decode_ids: requests that decoded one token.
    """

    start: float
    end: float
    prefill_ids: tuple[int, ...]
    decode_ids: tuple[int, ...]
    num_prefill_tokens: int

    @property
    def batch_size(self) -> int:
        return len(self.prefill_ids) + len(self.decode_ids)

    @property
    def num_tokens(self) -> int:
        """Tokens the model ran this step: every prompt token plus one per decoding request."""
        return self.num_prefill_tokens + len(self.decode_ids)


@dataclass(frozen=True)
class SimResult:
    """What a simulation produced: one trace per request (in request_id order) and every step."""

    traces: list[RequestTrace]
    steps: list[StepRecord]
    max_batch_size: int


@dataclass(frozen=True)
class StepCost:
    """step_time = overhead_s + per_prefill_token_s * prompt tokens + per_decode_seq_s * decoding requests.

    The defaults are rough SmolLM2-135M numbers on a laptop CPU (a decode step of one request takes
    about 15 ms, and each prompt token about 1 ms more).
    """

    overhead_s: float = 0.012
    per_prefill_token_s: float = 0.001
    per_decode_seq_s: float = 0.002

    def __post_init__(self) -> None:
        for name in ("overhead_s", "per_prefill_token_s", "per_decode_seq_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.overhead_s + self.per_prefill_token_s + self.per_decode_seq_s <= 0:
            raise ValueError("at least one cost must be > 0, or the clock never moves")

    def step_time(self, num_prefill_tokens: int, num_decode_seqs: int) -> float:
        """Seconds for one step that runs ``num_prefill_tokens`` prompt tokens and ``num_decode_seqs`` decodes."""
        return (self.overhead_s + self.per_prefill_token_s * num_prefill_tokens
                + self.per_decode_seq_s * num_decode_seqs)


def fit_step_cost(num_tokens: Sequence[int], seconds: Sequence[float]) -> StepCost:
    """Fit ``seconds = overhead + per_token * num_tokens`` (least squares) to timed forward passes.

    num_tokens: tokens in each timed forward pass (at least two different values); seconds: its time.
    A decoding request runs one token, so per_decode_seq_s is set to the per-token cost too: a rough
    model that ignores attention's cost growing with the context (small for short contexts).
    """
    if len(num_tokens) != len(seconds) or len(set(num_tokens)) < 2:
        raise ValueError("fit_step_cost needs equally long num_tokens and seconds with >= 2 different token counts")
    mean_x = sum(num_tokens) / len(num_tokens)
    mean_y = sum(seconds) / len(seconds)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(num_tokens, seconds))
    variance = sum((x - mean_x) ** 2 for x in num_tokens)
    per_token = max(covariance / variance, 0.0)
    overhead = max(mean_y - per_token * mean_x, 0.0)
    return StepCost(overhead_s=overhead, per_prefill_token_s=per_token, per_decode_seq_s=per_token)


def poisson_workload(
    num_requests: int,
    rate_per_s: float,
    *,
    seed: int = 0,
    prompt_len_range: tuple[int, int] = (16, 128),
    short_output_range: tuple[int, int] = (4, 16),
    long_output_range: tuple[int, int] = (48, 96),
    long_fraction: float = 0.25,
    num_priorities: int = 1,
) -> list[SimRequest]:
    """A reproducible workload: Poisson arrivals, mixed prompt and output lengths.

    Gaps between arrivals are exponential with mean 1 / rate_per_s (the first request arrives at 0).
    Prompt lengths are uniform in prompt_len_range (inclusive). Output lengths are a mix: a fraction
    ``long_fraction`` of requests draw from long_output_range, the rest from short_output_range, so
    a few long answers sit among many short ones, as in chat traffic. Priorities are uniform in
    0..num_priorities - 1. Returns requests with ids 0..num_requests - 1 in arrival order.
    """
    if not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests must be an integer >= 1, got {num_requests!r}")
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0 requests per second, got {rate_per_s!r}")
    if not 0 <= long_fraction <= 1:
        raise ValueError(f"long_fraction must be in [0, 1], got {long_fraction!r}")
    for name, (low, high) in (("prompt_len_range", prompt_len_range), ("short_output_range", short_output_range),
                              ("long_output_range", long_output_range)):
        if not 1 <= low <= high:
            raise ValueError(f"{name} must be (low, high) with 1 <= low <= high, got {(low, high)}")
    if not isinstance(num_priorities, int) or num_priorities < 1:
        raise ValueError(f"num_priorities must be an integer >= 1, got {num_priorities!r}")
    rng = random.Random(seed)
    requests = []
    clock = 0.0
    for request_id in range(num_requests):
        if request_id > 0:
            clock += rng.expovariate(rate_per_s)
        output_range = long_output_range if rng.random() < long_fraction else short_output_range
        requests.append(SimRequest(
            request_id=request_id,
            arrival_time=clock,
            prompt_len=rng.randint(*prompt_len_range),
            output_len=rng.randint(*output_range),
            priority=rng.randrange(num_priorities),
        ))
    return requests


# ---------------------------------------------------------------------------------------------
# Reference policies
# ---------------------------------------------------------------------------------------------


@exercise("lab02-prefill-vs-decode", "04_batching", "static_batching")
def static_policy(state: BatchState) -> list[SimRequest]:
    """Static batching: start a batch only when the previous one is gone, and only when it is full.

    Admit the first max_batch_size waiting requests when the batch is empty and either that many
    are waiting or no more will arrive (then whatever waits). Otherwise admit nothing.
    """
    if state.running:
        return []
    if len(state.waiting) >= state.max_batch_size or (state.all_arrived and state.waiting):
        return list(state.waiting[: state.max_batch_size])
    return []


@exercise("lab02-prefill-vs-decode", "04_batching", "dynamic_batching")
def dynamic_policy(state: BatchState, timeout_s: float) -> list[SimRequest]:
    """Dynamic batching: like static, but a batch also closes when its oldest request waited timeout_s.

    When the batch is empty, admit the first max_batch_size waiting requests if that many wait or if
    the oldest waiting request arrived at least timeout_s ago (now - arrival_time >= timeout_s).
    """
    if state.running or not state.waiting:
        return []
    oldest = state.waiting[0]
    if len(state.waiting) >= state.max_batch_size or state.now - oldest.arrival_time >= timeout_s:
        return list(state.waiting[: state.max_batch_size])
    return []


@exercise("lab02-prefill-vs-decode", "04_batching", "continuous_batching")
def continuous_policy(state: BatchState) -> list[SimRequest]:
    """Continuous (iteration-level) batching: before every step, fill the free places in arrival order."""
    free = state.max_batch_size - len(state.running)
    return list(state.waiting[: max(free, 0)])


@exercise("lab02-prefill-vs-decode", "04_batching", "priority_batching")
def priority_policy(state: BatchState) -> list[SimRequest]:
    """Continuous batching that fills free places by priority (lower first), then arrival, then id."""
    free = state.max_batch_size - len(state.running)
    ordered = sorted(state.waiting, key=lambda r: (r.priority, r.arrival_time, r.request_id))
    return ordered[: max(free, 0)]


# ---------------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------------


class PolicyError(ValueError):
    """A policy returned something the batch cannot do (an unknown request, too many, not a list)."""


def simulate(
    workload: Sequence[SimRequest],
    policy: Policy,
    *,
    max_batch_size: int,
    cost: StepCost | None = None,
    poll_interval_s: float = 0.001,
    max_iterations: int = 1_000_000,
) -> SimResult:
    """Run ``workload`` under ``policy`` until every request has produced all its tokens.

    Before each step the policy picks requests to join (see the module docstring); the admitted ones
    prefill and get their first token at the end of the step, the others in the batch decode one
    token; a request leaves the batch when it has output_len tokens. Raises PolicyError when the
    policy returns a request that is not waiting, the same request twice, or more than the batch has
    room for; RuntimeError when it makes no progress within ``max_iterations`` loop turns.
    """
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if not poll_interval_s > 0:
        raise ValueError(f"poll_interval_s must be > 0 seconds, got {poll_interval_s!r}")
    ids = [request.request_id for request in workload]
    if len(set(ids)) != len(ids):
        raise ValueError("workload: request_ids must be unique")
    cost = cost or StepCost()

    arrival_order = sorted(workload, key=lambda r: (r.arrival_time, r.request_id))
    traces = {r.request_id: RequestTrace(r.request_id, r.arrival_time, r.prompt_len, priority=r.priority)
              for r in workload}
    steps: list[StepRecord] = []
    next_arrival = 0  # index into arrival_order of the first request that has not arrived
    waiting: list[SimRequest] = []
    running: list[SimRequest] = []
    now = 0.0
    for _ in range(max_iterations):
        while next_arrival < len(arrival_order) and arrival_order[next_arrival].arrival_time <= now:
            waiting.append(arrival_order[next_arrival])
            next_arrival += 1
        if not (waiting or running or next_arrival < len(arrival_order)):
            return SimResult([traces[i] for i in sorted(traces)], steps, max_batch_size)
        state = BatchState(now, tuple(waiting), tuple(running), max_batch_size,
                           all_arrived=next_arrival == len(arrival_order))
        admitted = _validated(policy(state), state)
        if not running and not admitted:
            now = _next_wake_time(now, waiting, arrival_order, next_arrival, poll_interval_s)
            continue
        admitted_ids = {r.request_id for r in admitted}
        waiting = [r for r in waiting if r.request_id not in admitted_ids]
        num_prefill_tokens = sum(r.prompt_len for r in admitted)
        end = now + cost.step_time(num_prefill_tokens, len(running))
        for request in admitted:
            traces[request.request_id].first_scheduled_time = now
        for request in running + admitted:
            traces[request.request_id].token_times.append(end)
        steps.append(StepRecord(now, end, tuple(r.request_id for r in admitted),
                                tuple(r.request_id for r in running), num_prefill_tokens))
        running = [r for r in running + admitted if len(traces[r.request_id].token_times) < r.output_len]
        now = end
    raise RuntimeError(
        f"the simulation made no progress in {max_iterations} iterations: at t = {now:.3f} s, "
        f"{len(waiting)} requests wait, {len(running)} run; does the policy ever admit them?"
    )


def _validated(admitted, state: BatchState) -> list[SimRequest]:
    """Check a policy's answer against the state; return it as a list."""
    if not isinstance(admitted, (list, tuple)):
        raise PolicyError(f"a policy must return a list of requests from state.waiting, got {type(admitted).__name__}")
    waiting_ids = {r.request_id for r in state.waiting}
    seen = set()
    for request in admitted:
        request_id = getattr(request, "request_id", None)
        if request_id not in waiting_ids:
            raise PolicyError(f"the policy admitted {request!r}, which is not in state.waiting")
        if request_id in seen:
            raise PolicyError(f"the policy admitted request {request_id} twice")
        seen.add(request_id)
    if len(state.running) + len(admitted) > state.max_batch_size:
        raise PolicyError(
            f"the policy admitted {len(admitted)} requests while {len(state.running)} run: the batch would hold "
            f"{len(state.running) + len(admitted)} > max_batch_size = {state.max_batch_size}"
        )
    return list(admitted)


def _next_wake_time(now: float, waiting, arrival_order, next_arrival: int, poll_interval_s: float) -> float:
    """Nothing runs: jump to the next arrival, or poll again soon if requests are waiting."""
    candidates = []
    if next_arrival < len(arrival_order):
        candidates.append(arrival_order[next_arrival].arrival_time)
    if waiting:
        candidates.append(now + poll_interval_s)
    return min(candidates)
