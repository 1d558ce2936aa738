"""Checks for Lab 0.2, chapter 4 (batching policies and serving metrics).

A student's policy is checked two ways against the reference policies of
:mod:`course_lib.sim.batching`: its decision on hand-made states (``check_policy_state``, with a
hint aimed at the usual mistake), and a whole simulation on a workload (``check_policy_run``:
every request's token timestamps must match the reference run's). A student's ``percentile`` is
compared with :func:`course_lib.metrics.percentile`, and ``compute_metrics`` with
:func:`course_lib.metrics.summarize` on the same traces.

Policies are named "static", "dynamic", "continuous" and "priority"; a dynamic policy takes
``(state, timeout_s)``, the others ``(state)``.

Test cells describe inputs as plain data: requests as ``(request_id, arrival_time, prompt_len,
output_len[, priority])`` tuples, traces as ``(request_id, arrival_time, num_prompt_tokens,
token_times)``, and the chapter's hand-worked example as ``"hand"``. The ``BatchState`` and
``RequestTrace`` objects a student's function receives are built with ``checks.make`` (where the
student's code runs); what it returns is read through public attributes (``request_id``).
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any, Callable

from course_lib.checks import (
    CheckFailed,
    call_student,
    fail,
    make,
    register_reference_names,
    require_own_implementation,
    short_repr,
    smollm2,
)
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.metrics import percentile, summarize
from course_lib.sim.batching import (
    BatchState,
    PolicyError,
    RequestTrace,
    SimRequest,
    StepCost,
    continuous_policy,
    dynamic_policy,
    poisson_workload,
    priority_policy,
    simulate,
    static_policy,
)

__all__ = [
    "METRIC_NAMES",
    "check_compute_metrics",
    "check_percentile",
    "check_policy_run",
    "check_policy_state",
    "check_policy_states",
    "check_compute_metrics_on_engine",
    "crafted_states",
    "engine_traces",
    "hand_traces",
    "lent_state",
    "make_state",
    "random_traces",
    "random_workload",
    "reference_metrics",
    "simulated_traces",
]

register_reference_names(
    "static_policy", "dynamic_policy", "continuous_policy", "priority_policy", "percentile", "summarize",
    "reference_metrics",
)

REFERENCE_POLICIES = {
    "static": reference(static_policy),
    "dynamic": reference(dynamic_policy),
    "continuous": reference(continuous_policy),
    "priority": reference(priority_policy),
}
reference_percentile = reference(percentile)
_reference_summarize = reference(summarize)

# The chapter's hand-worked example: four 10-token prompts, and a cost model with easy arithmetic.
HAND_WORKLOAD = ((0, 0.00, 10, 3), (1, 0.01, 10, 6), (2, 0.02, 10, 2), (3, 0.03, 10, 2))
HAND_COST = StepCost(overhead_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.0)

METRIC_NAMES = ("ttft", "tpot", "e2e")
STAT_NAMES = ("mean", "p50", "p99")
THROUGHPUT_NAMES = ("requests_per_s", "output_tokens_per_s")


# ---------------------------------------------------------------------------------------------
# Inputs the test cells use
# ---------------------------------------------------------------------------------------------


def _request(spec) -> SimRequest:
    """A SimRequest from (request_id, arrival_time[, priority]) (prompt 8, output 4 tokens) or
    (request_id, arrival_time, prompt_len, output_len[, priority])."""
    if isinstance(spec, SimRequest):
        return spec
    if len(spec) <= 3:
        request_id, arrival_time, *rest = spec
        return SimRequest(request_id, float(arrival_time), prompt_len=8, output_len=4, priority=rest[0] if rest else 0)
    request_id, arrival_time, prompt_len, output_len, *rest = spec
    return SimRequest(request_id, float(arrival_time), prompt_len, output_len, priority=rest[0] if rest else 0)


def _spec(request: SimRequest) -> tuple[int, float, int, int, int]:
    return (request.request_id, request.arrival_time, request.prompt_len, request.output_len, request.priority)


def lent_state(now: float, waiting, running, max_batch_size: int, all_arrived: bool) -> BatchState:
    """A BatchState from request tuples, kept in the order given (built where the student's code runs)."""
    return BatchState(float(now), tuple(_request(spec) for spec in waiting), tuple(_request(spec) for spec in running),
                      max_batch_size, all_arrived)


def _lend(state: BatchState) -> BatchState:
    """``state`` for the student's policy, rebuilt with ``checks.make``."""
    return make(lent_state, state.now, [_spec(r) for r in state.waiting], [_spec(r) for r in state.running],
                state.max_batch_size, state.all_arrived)


def make_state(now: float, waiting, running=(), *, max_batch_size: int = 4, all_arrived: bool = False) -> BatchState:
    """A BatchState from short tuples: each request is (request_id, arrival_time[, priority]).

    Prompt and output lengths do not matter to a policy's decision, so they are fixed (8 and 4).
    ``waiting`` is put in arrival order, as the simulator does.
    """
    request = _request

    waiting_requests = sorted((request(spec) for spec in waiting), key=lambda r: (r.arrival_time, r.request_id))
    return BatchState(float(now), tuple(waiting_requests), tuple(request(spec) for spec in running),
                      max_batch_size, all_arrived)


def crafted_states(policy: str) -> list[tuple[str, BatchState]]:
    """Hand-made (description, state) pairs that separate a correct ``policy`` from the usual mistakes."""
    _policy_name(policy)
    three_waiting = [(0, 0.00), (1, 0.01), (2, 0.02)]
    five_waiting = [(0, 0.00), (1, 0.01), (2, 0.02), (3, 0.03), (4, 0.04)]
    states = [
        ("empty batch, nothing waiting", make_state(0.1, [])),
        ("empty batch, 5 waiting, room for 4", make_state(0.1, five_waiting)),
        ("empty batch, 3 waiting, room for 4, more to come", make_state(0.03, three_waiting)),
        ("empty batch, 3 waiting, room for 4, no more to come",
         make_state(0.03, three_waiting, all_arrived=True)),
        ("2 running, 3 waiting, room for 4", make_state(0.5, three_waiting, [(7, 0.0), (8, 0.0)])),
        ("4 running (full), 3 waiting", make_state(0.5, three_waiting, [(7, 0.0), (8, 0.0), (9, 0.0), (10, 0.0)],
                                                   all_arrived=True)),
    ]
    if policy == "dynamic":
        states += [
            ("empty batch, oldest waited exactly the timeout (0.05 s)", make_state(0.05, [(0, 0.0), (1, 0.04)])),
            ("empty batch, oldest waited 0.049 s < timeout", make_state(0.049, [(0, 0.0), (1, 0.04)])),
            ("empty batch, oldest waited 0.2 s > timeout, 6 waiting", make_state(
                0.2, [(i, 0.01 * i) for i in range(6)])),
        ]
    if policy == "priority":
        states += [
            ("1 running, urgent requests arrived last",
             make_state(0.5, [(0, 0.0, 1), (1, 0.1, 1), (2, 0.2, 0), (3, 0.3, 0)], [(9, 0.0, 1)])),
            ("empty batch, ties in priority broken by arrival",
             make_state(0.5, [(0, 0.0, 2), (1, 0.1, 1), (2, 0.2, 1), (3, 0.3, 0), (4, 0.4, 2)])),
        ]
    return states


def random_workload(seed: int, num_requests: int = 30, rate_per_s: float = 15.0, num_priorities: int = 1
                    ) -> list[tuple[int, float, int, int, int]]:
    """A reproducible mixed workload (``poisson_workload``) as (id, arrival, prompt_len, output_len, priority)."""
    return [_spec(r) for r in poisson_workload(num_requests, rate_per_s, seed=seed, num_priorities=num_priorities)]


def _workload(workload) -> list[SimRequest]:
    if isinstance(workload, str):
        if workload != "hand":
            raise ValueError(f"workload must be 'hand' or a list of request tuples, got {workload!r}")
        workload = HAND_WORKLOAD
    return [_request(spec) for spec in workload]


def _cost(cost) -> StepCost:
    if cost is None:
        return StepCost()
    if isinstance(cost, str):
        if cost != "hand":
            raise ValueError(f"cost must be 'hand', None or a StepCost, got {cost!r}")
        return HAND_COST
    return cost


def _trace_spec(trace: RequestTrace) -> tuple[int, float, int, list[float]]:
    return (trace.request_id, trace.arrival_time, trace.num_prompt_tokens, list(trace.token_times))


def _trace(spec) -> RequestTrace:
    if isinstance(spec, RequestTrace):
        return spec
    request_id, arrival_time, num_prompt_tokens, token_times = spec
    return RequestTrace(request_id, float(arrival_time), num_prompt_tokens, [float(t) for t in token_times])


HAND_TRACES = (
    (0, 0.00, 10, (0.02, 0.04, 0.05)),
    (1, 0.01, 10, (0.04, 0.05, 0.07, 0.08, 0.10, 0.11)),
    (2, 0.02, 10, (0.07, 0.08)),
    (3, 0.03, 10, (0.10, 0.11)),
)
"""The chapter's worked example of the metrics: the hand workload under continuous batching
(max_batch_size 2, the hand cost), as in the notebook's table. Written out rather than simulated
here, so that the kit (where the continuous policy is the student's exercise) has them too; a
test checks them against the simulator."""


def hand_traces() -> list[tuple[int, float, int, list[float]]]:
    """The hand workload under continuous batching (max_batch_size 2, the hand cost), as trace tuples."""
    return [(request_id, arrival, prompt_len, list(times)) for request_id, arrival, prompt_len, times in HAND_TRACES]


def random_traces(seed: int, num_requests: int = 20) -> list[tuple[int, float, int, list[float]]]:
    """Reproducible traces with irregular token gaps, a 1-token request and an unsorted arrival order,
    as (request_id, arrival_time, num_prompt_tokens, token_times) tuples."""
    rng = random.Random(seed)
    traces = []
    for request_id in range(num_requests):
        arrival = rng.uniform(0, 2)
        num_tokens = 1 if request_id == 3 else rng.randint(1, 12)
        clock = arrival + rng.uniform(0.01, 0.5)
        times = []
        for _ in range(num_tokens):
            times.append(clock)
            clock += rng.uniform(0.005, 0.08)
        traces.append((request_id, arrival, rng.randint(4, 64), times))
    rng.shuffle(traces)
    return traces


# ---------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------


def _policy_name(policy: str) -> str:
    if policy not in REFERENCE_POLICIES:
        raise ValueError(f"policy must be one of {sorted(REFERENCE_POLICIES)}, got {policy!r}")
    return policy


def _bound(function: Callable, policy: str, timeout_s: float | None) -> Callable:
    if policy == "dynamic":
        if timeout_s is None:
            raise ValueError("the dynamic policy needs timeout_s")
        return functools.partial(function, timeout_s=timeout_s)
    return function


def _describe_state(state: BatchState) -> str:
    def ids(requests):
        return [r.request_id for r in requests]

    return (f"now={state.now:g} s, waiting={ids(state.waiting)}, running={ids(state.running)}, "
            f"max_batch_size={state.max_batch_size}, all_arrived={state.all_arrived}")


def _admitted_ids(got: Any, where: str) -> list[int]:
    """The request ids a policy's answer admits (read once, through ``request_id``)."""
    try:
        return [request.request_id for request in list(got)]
    except (AttributeError, TypeError):
        fail(f"{where} must return a list of requests taken from state.waiting",
             expected="list[SimRequest]", got=short_repr(got),
             hint="return [] to admit nothing; otherwise a list of the SimRequest objects in state.waiting.")
        raise


@recorded_check
def check_policy_states(student_policy: Callable, policy: str, timeout_s: float | None = None) -> None:
    """``check_policy_state`` on every hand-made state of ``crafted_states(policy)``."""
    for description, state in crafted_states(policy):
        _check_policy_state(student_policy, policy, state, timeout_s, description)


@recorded_check
def check_policy_state(student_policy: Callable, policy: str, state: BatchState, timeout_s: float | None = None,
                       description: str = "") -> None:
    """The student's policy must admit the same requests (as a set) as the reference on ``state``."""
    _check_policy_state(student_policy, policy, state, timeout_s, description)


def _check_policy_state(student_policy: Callable, policy: str, state: BatchState, timeout_s: float | None,
                        description: str) -> None:
    _policy_name(policy)
    require_own_implementation(student_policy, f"{policy}_batching")
    student = _bound(student_policy, policy, timeout_s)
    reference_policy = _bound(REFERENCE_POLICIES[policy], policy, timeout_s)
    call = f"{policy}_batching(state{'' if timeout_s is None else f', timeout_s={timeout_s}'})"
    got = call_student(student, call, _lend(state), copy_args=False, show_args=False)
    where = f"{call} on the state [{description}] {_describe_state(state)}"
    got_ids = sorted(_admitted_ids(got, where))
    expected_ids = sorted(r.request_id for r in reference_policy(state))
    if got_ids == expected_ids:
        return
    fail(f"{where}: admitted the wrong requests (shown by request_id)", expected=expected_ids, got=got_ids,
         hint=_policy_hint(policy, state, got_ids, expected_ids))


def _policy_hint(policy: str, state: BatchState, got_ids: list[int], expected_ids: list[int]) -> str:
    running_ids = {r.request_id for r in state.running}
    if set(got_ids) & running_ids:
        return "a request in state.running is already in the batch; admit only requests from state.waiting."
    room = state.max_batch_size - len(state.running)
    if len(got_ids) > max(room, 0):
        return (f"the batch holds at most max_batch_size = {state.max_batch_size} requests and {len(state.running)} "
                f"already run, so at most {max(room, 0)} may join.")
    if policy in ("static", "dynamic") and state.running and got_ids:
        return (f"{policy} batching never adds to a batch that is running: it waits until the batch is empty "
                "(state.running == ()) before it forms the next one.")
    if policy == "static" and not got_ids and state.all_arrived:
        return ("no more requests will arrive (state.all_arrived), so waiting for a full batch would wait forever: "
                "run whatever is waiting.")
    if policy == "static" and got_ids and not state.all_arrived and len(state.waiting) < state.max_batch_size:
        return "static batching waits for a full batch (max_batch_size waiting) unless all requests have arrived."
    if policy == "dynamic" and len(got_ids) != len(expected_ids):
        waited = state.now - state.waiting[0].arrival_time if state.waiting else 0.0
        return (f"a dynamic batch closes when max_batch_size requests wait OR when the oldest has waited "
                f"timeout_s or more (here it waited {waited:.3f} s: compare now - arrival_time >= timeout_s).")
    if policy == "priority":
        return ("fill the free places with the most urgent requests: sort by (priority, arrival_time, request_id), "
                "lower priority numbers first.")
    if len(got_ids) == len(expected_ids):
        return "take the requests that have waited longest: state.waiting is in arrival order, take from the front."
    return (f"with {max(room, 0)} free places and {len(state.waiting)} waiting, admit min(free places, waiting) "
            "requests.")


@recorded_check
def check_policy_run(student_policy: Callable, policy: str, workload, max_batch_size: int,
                     timeout_s: float | None = None, cost: StepCost | str | None = None) -> None:
    """Simulating ``workload`` with the student's policy must give the reference run's token times.

    workload: "hand" (the chapter's example) or request tuples (``random_workload``). cost: None
    (``StepCost()``), "hand" or a StepCost. The simulator runs here; before every step the student's
    policy gets the state (built with ``checks.make``) and its answer is read back as request ids.
    """
    _policy_name(policy)
    require_own_implementation(student_policy, f"{policy}_batching")
    workload = _workload(workload)
    cost = _cost(cost)
    student = _bound(student_policy, policy, timeout_s)
    reference_policy = _bound(REFERENCE_POLICIES[policy], policy, timeout_s)
    call = f"simulate({len(workload)} requests, {policy}_batching, max_batch_size={max_batch_size})"

    def guarded(state):
        try:
            got = student(_lend(state))
        except (NotImplementedError, CheckFailed, PolicyError):
            raise
        except Exception as error:
            raise CheckFailed(f"{call}: your policy raised {type(error).__name__}: {error} on the state "
                              f"{_describe_state(state)}") from error
        waiting = {request.request_id: request for request in state.waiting}
        admitted = []
        for request_id in _admitted_ids(got, f"{call}: your policy, on the state {_describe_state(state)},"):
            if request_id not in waiting:
                raise PolicyError(f"the policy admitted request {request_id!r}, which is not in state.waiting")
            admitted.append(waiting[request_id])
        return admitted

    try:
        got = simulate(workload, guarded, max_batch_size=max_batch_size, cost=cost, max_iterations=200_000)
    except PolicyError as error:
        raise CheckFailed(f"{call}: the simulator refused your policy's answer: {error}\n"
                          "  hint: admit only requests from state.waiting, each once, and never more than "
                          "max_batch_size - len(state.running).") from error
    except RuntimeError as error:
        raise CheckFailed(f"{call}: {error}\n  hint: when the batch is empty and no more requests will arrive, "
                          "the policy must admit the waiting ones.") from error
    expected = simulate(workload, reference_policy, max_batch_size=max_batch_size, cost=cost)
    for got_trace, expected_trace in zip(got.traces, expected.traces):
        if len(got_trace.token_times) == len(expected_trace.token_times) and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip(got_trace.token_times, expected_trace.token_times)
        ):
            continue
        request_id = expected_trace.request_id
        first_step = next(
            (step for step in expected.steps if request_id in step.prefill_ids), None)
        got_first_step = next((step for step in got.steps if request_id in step.prefill_ids), None)
        fail(f"{call}: request {request_id} (arrived at {expected_trace.arrival_time:.4f} s) was not served "
             "as under the reference policy: its first token came at a different time",
             expected=f"first token at {expected_trace.token_times[0]:.4f} s "
                      f"(admitted at {first_step.start:.4f} s)" if first_step else "never admitted",
             got=f"first token at {got_trace.token_times[0]:.4f} s (admitted at {got_first_step.start:.4f} s)"
                 if got_first_step else "never admitted",
             hint="check your policy on the crafted states above: the first step where it admits a different "
                  "set of requests makes every later timestamp differ.")


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@recorded_check
def check_percentile(student_percentile: Callable, values: list[float], q: float) -> None:
    """``student_percentile(values, q)`` must equal the linear-interpolation percentile of ``values``."""
    require_own_implementation(student_percentile, "percentile")
    call = f"percentile({short_repr(values)}, {q})"
    given = list(values)
    got = call_student(student_percentile, call, given, q, show_args=False)
    expected = reference_percentile(values, q)
    ordered = sorted(values)
    n = len(ordered)
    # What q taken as a fraction would give, asked before the comparison (the kit's recording must hold it).
    as_fraction = reference_percentile(values, min(q * 100, 100)) if n > 1 and q < 1 else None
    if _is_number(got) and math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
        return
    hint = ("sort the values; the q-th percentile sits at rank r = (n - 1) * q / 100: take "
            "v[floor(r)] + (r - floor(r)) * (v[floor(r) + 1] - v[floor(r)]).")
    if _is_number(got):
        nearest = {ordered[min(int(q / 100 * n), n - 1)], ordered[min(max(math.ceil(q / 100 * n) - 1, 0), n - 1)]}
        if got in nearest and got != expected:
            hint = (f"that is a nearest-rank value (index from q / 100 * n); this course interpolates at rank "
                    f"(n - 1) * q / 100 = {(n - 1) * q / 100:g}, so the median of [1, 2, 3, 4] is 2.5.")
        elif as_fraction is not None and math.isclose(got, as_fraction):
            hint = "q is in percent (0..100), not a fraction: the 99th percentile is q = 99."
        elif n > 1 and values != ordered and math.isclose(_unsorted_percentile(values, q), got,
                                                          rel_tol=1e-9, abs_tol=1e-12):
            hint = "sort the values first: percentiles are read from the ordered list."
    else:
        hint = "return one number (a float)."
    fail(call, expected=expected, got=got, hint=hint)


def _unsorted_percentile(values, q):
    """What interpolating between the neighbours of rank (n - 1) * q / 100 gives on the list as given.

    numpy's interpolation, not the exercise's code: a student kit with Lab 0.2 locked ships this module.
    """
    import numpy as np

    return float(np.interp((len(values) - 1) * q / 100, np.arange(len(values)), np.asarray(values, dtype=float)))


def reference_metrics(traces) -> dict:
    """What ``compute_metrics(traces)`` must return, computed with ``course_lib.metrics.summarize``."""
    summary = _reference_summarize([_trace(trace).to_metrics() for trace in traces])

    def stats(latency):
        if latency is None:
            return None
        return {"mean": latency.mean, "p50": latency.median, "p99": latency.p99}

    return {
        "ttft": stats(summary.ttft),
        "tpot": stats(summary.tpot),
        "e2e": stats(summary.e2e_latency),
        "requests_per_s": summary.requests_per_s,
        "output_tokens_per_s": summary.output_tokens_per_s,
    }


@recorded_check
def check_compute_metrics(student_compute_metrics: Callable, traces) -> None:
    """``student_compute_metrics(traces)`` must match ``reference_metrics(traces)`` (relative 1e-6).

    traces: RequestTrace objects or (request_id, arrival_time, num_prompt_tokens, token_times) tuples.
    """
    require_own_implementation(student_compute_metrics, "compute_metrics")
    _check_compute_metrics(student_compute_metrics, [_trace(trace) for trace in traces])


def _check_compute_metrics(student_compute_metrics: Callable, traces: list[RequestTrace]) -> None:
    call = f"compute_metrics({len(traces)} traces)"
    lent = [make(RequestTrace, t.request_id, t.arrival_time, t.num_prompt_tokens, list(t.token_times))
            for t in traces]
    got = call_student(student_compute_metrics, call, lent, copy_args=False, show_args=False)
    if not isinstance(got, dict):
        fail(f"{call} must return a dict", expected=["ttft", "tpot", "e2e", *THROUGHPUT_NAMES],
             got=type(got).__name__)
    expected = reference_metrics(traces)
    missing = [key for key in expected if key not in got]
    if missing:
        fail(f"{call}: keys missing from the result", expected=sorted(expected), got=sorted(got),
             hint='the result has "ttft", "tpot", "e2e" (each {"mean", "p50", "p99"}), "requests_per_s" '
                  'and "output_tokens_per_s".')
    for key in THROUGHPUT_NAMES:
        if not (_is_number(got[key]) and math.isclose(got[key], expected[key], rel_tol=1e-6)):
            fail(f"{call}[{key!r}]", expected=expected[key], got=got[key], hint=_throughput_hint(key, traces, got[key]))
    for metric in METRIC_NAMES:
        if expected[metric] is None:
            if got[metric] is not None:
                fail(f"{call}[{metric!r}] must be None: no request has 2 or more tokens", expected=None,
                     got=got[metric], hint="TPOT needs at least two tokens; with no such request it is undefined.")
            continue
        if not isinstance(got[metric], dict):
            fail(f"{call}[{metric!r}] must be a dict with keys {STAT_NAMES}", expected=expected[metric],
                 got=got[metric])
        for stat in STAT_NAMES:
            value = got[metric].get(stat)
            if not (_is_number(value) and math.isclose(value, expected[metric][stat], rel_tol=1e-6, abs_tol=1e-12)):
                fail(f"{call}[{metric!r}][{stat!r}] in seconds", expected=expected[metric][stat], got=value,
                     hint=_latency_hint(metric, stat, traces, value))


def _throughput_hint(key: str, traces, got) -> str:
    first_token_duration = max(t.token_times[-1] for t in traces) - min(t.token_times[0] for t in traces)
    count = len(traces) if key == "requests_per_s" else sum(len(t.token_times) for t in traces)
    if _is_number(got) and first_token_duration > 0 and math.isclose(got, count / first_token_duration, rel_tol=1e-6):
        return "measure the duration from the earliest *arrival* to the latest finish, not from the first token."
    unit = "requests" if key == "requests_per_s" else "output tokens (len(token_times), summed)"
    return f"{unit} divided by the duration: latest finish (last token time) minus earliest arrival, in seconds."


def _latency_hint(metric: str, stat: str, traces, got) -> str:
    if metric == "tpot":
        long_enough = [t for t in traces if len(t.token_times) >= 2]
        by_n = [(t.token_times[-1] - t.token_times[0]) / len(t.token_times) for t in long_enough]
        if stat == "mean" and _is_number(got) and by_n and math.isclose(got, sum(by_n) / len(by_n), rel_tol=1e-6):
            return ("n tokens have n - 1 gaps between them: TPOT = (last token time - first token time) / "
                    "(n - 1), and the first token's time belongs to TTFT.")
        if any(len(t.token_times) < 2 for t in traces):
            return ("leave requests with fewer than 2 tokens out of TPOT (it is undefined for them), and divide "
                    "by n - 1, the number of gaps.")
        return "per request, TPOT = (token_times[-1] - token_times[0]) / (len(token_times) - 1)."
    start = "arrival_time"
    if metric == "ttft":
        what = "TTFT = token_times[0] - arrival_time (queueing counts: the user waited)"
    else:
        what = "end-to-end = token_times[-1] - arrival_time"
    if stat != "mean":
        return f"{what}; then use your percentile with q = {50 if stat == 'p50' else 99}."
    return f"{what}, measured from {start} for every request, then averaged."


# ---------------------------------------------------------------------------------------------
# Metrics of real engine runs
# ---------------------------------------------------------------------------------------------


STEP_CLOCK = StepCost(overhead_s=0.030, per_prefill_token_s=0.001, per_decode_seq_s=0.001)
"""The clock of ``engine_traces``: a step lasts 30 ms plus 1 ms per token it runs (prompt or decode)."""


def engine_traces(max_num_seqs: int, num_requests: int = 4, max_tokens: int = 6,
                  arrival_every_steps: int = 2) -> list[RequestTrace]:
    """Traces of a small real run: chat prompts through SmolLM2 on the course's engine, on a step clock.

    Request i is added before engine step ``i * arrival_every_steps``; ``max_num_seqs`` limits the
    batch. The engine really runs every step, and its scheduler decides who runs when; the clock
    that stamps arrivals and tokens is ``STEP_CLOCK``, advanced by each step's cost from the tokens
    it ran (``engine.stats``). So the traces, and the metrics expected from them, are the same on
    every machine, busy or not, while the schedule is the engine's own.
    """
    import torch

    from course_lib.checks import one_thread
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    model, tokenizer = smollm2()
    questions = ["Name a colour.", "Say hi.", "Count to three.", "Name a fruit.", "Name a city.", "Say yes."]
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}]))
               for q in (questions * 3)[:num_requests]]
    engine = LLMEngine(model, tokenizer, max_num_seqs=max_num_seqs, max_num_batched_tokens=256, num_blocks=64,
                       enable_prefix_caching=False, enable_chunked_prefill=False)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    clock, step, arrivals, token_times = 0.0, 0, {}, {}
    with one_thread(), torch.inference_mode():
        while len(arrivals) < len(prompts) or engine.has_unfinished():
            while len(arrivals) < len(prompts) and step >= len(arrivals) * arrival_every_steps:
                number = len(arrivals)
                engine.add_request(prompts[number], params, request_id=number)
                arrivals[number], token_times[number] = clock, []
            step += 1
            if not engine.has_unfinished():   # nothing to run until the next arrival: an idle step
                clock = round(clock + STEP_CLOCK.overhead_s, 9)
                continue
            tokens_before = engine.stats.num_batched_tokens
            outputs = engine.step()
            tokens_run = engine.stats.num_batched_tokens - tokens_before
            clock = round(clock + STEP_CLOCK.overhead_s + STEP_CLOCK.per_prefill_token_s * tokens_run, 9)
            for output in outputs:
                token_times[output.request_id] += [clock] * len(output.new_token_ids)
    return [RequestTrace(number, arrivals[number], len(prompts[number]), token_times[number])
            for number in sorted(arrivals)]


@recorded_check
def check_compute_metrics_on_engine(student_compute_metrics: Callable, max_num_seqs: int, num_requests: int = 4) -> None:
    """``compute_metrics`` on the traces of a real engine run (``engine_traces``: made here, on the course's
    engine, stamped with a step clock so that the expected metrics hold on any machine)."""
    require_own_implementation(student_compute_metrics, "compute_metrics")
    _check_compute_metrics(student_compute_metrics, engine_traces(max_num_seqs, num_requests))


def simulated_traces(seed: int, policy: str = "continuous", max_batch_size: int = 4,
                     num_requests: int = 30) -> list[tuple[int, float, int, list[float]]]:
    """Trace tuples of a simulated run of ``random_workload(seed)`` under a reference policy."""
    run = simulate(_workload(random_workload(seed, num_requests)), REFERENCE_POLICIES[_policy_name(policy)],
                   max_batch_size=max_batch_size)
    return [_trace_spec(trace) for trace in run.traces]
