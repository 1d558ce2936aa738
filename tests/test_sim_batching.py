"""Tests of the batching simulator (course_lib.sim.batching) and its figures (course_lib.viz.batching)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from course_lib.metrics import summarize
from course_lib.sim import batching as sim
from course_lib.viz import batching as viz

POLICIES = {
    "static": sim.static_policy,
    "dynamic": functools.partial(sim.dynamic_policy, timeout_s=0.02),
    "continuous": sim.continuous_policy,
    "priority": sim.priority_policy,
}

HAND_COST = sim.StepCost(overhead_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.0)
HAND_WORKLOAD = [
    sim.SimRequest(0, 0.00, 10, 3),
    sim.SimRequest(1, 0.01, 10, 6),
    sim.SimRequest(2, 0.02, 10, 2),
    sim.SimRequest(3, 0.03, 10, 2),
]


def rounded(result):
    return {t.request_id: [round(x, 6) for x in t.token_times] for t in result.traces}


def test_hand_workload_static_matches_the_worked_example():
    result = sim.simulate(HAND_WORKLOAD, sim.static_policy, max_batch_size=2, cost=HAND_COST)
    assert rounded(result) == {
        0: [0.04, 0.05, 0.06],
        1: [0.04, 0.05, 0.06, 0.07, 0.08, 0.09],
        2: [0.12, 0.13],
        3: [0.12, 0.13],
    }


def test_hand_workload_continuous_matches_the_worked_example():
    result = sim.simulate(HAND_WORKLOAD, sim.continuous_policy, max_batch_size=2, cost=HAND_COST)
    assert rounded(result) == {
        0: [0.02, 0.04, 0.05],
        1: [0.04, 0.05, 0.07, 0.08, 0.1, 0.11],
        2: [0.07, 0.08],
        3: [0.1, 0.11],
    }
    summary = summarize([t.to_metrics() for t in result.traces])
    assert summary.ttft.median == pytest.approx(0.04)
    assert summary.ttft.p99 == pytest.approx(0.0694)
    assert summary.output_tokens_per_s == pytest.approx(13 / 0.11)


def test_hand_workload_dynamic_starts_on_timeout():
    result = sim.simulate(HAND_WORKLOAD, functools.partial(sim.dynamic_policy, timeout_s=0.005), max_batch_size=2,
                          cost=HAND_COST)
    times = rounded(result)
    assert times[0][0] == 0.025  # started alone after waiting 5 ms
    assert times[1][0] == times[2][0] == 0.075
    assert times[3][0] == 0.145


def test_priority_serves_urgent_requests_first():
    workload = [sim.SimRequest(0, 0.0, 8, 5, priority=1)] + [
        sim.SimRequest(i, 0.001 * i, 8, 2, priority=1 if i < 3 else 0) for i in range(1, 6)]
    result = sim.simulate(workload, sim.priority_policy, max_batch_size=1)
    first_token = {t.request_id: t.token_times[0] for t in result.traces}
    assert max(first_token[3], first_token[4], first_token[5]) < min(first_token[1], first_token[2])


def test_simulator_refuses_a_policy_that_overfills_the_batch():
    def greedy(state):
        return list(state.waiting)

    with pytest.raises(sim.PolicyError, match="max_batch_size"):
        sim.simulate(HAND_WORKLOAD, greedy, max_batch_size=1)


def test_simulator_refuses_unknown_and_duplicate_requests():
    with pytest.raises(sim.PolicyError, match="not in state.waiting"):
        sim.simulate(HAND_WORKLOAD, lambda state: [sim.SimRequest(99, 0.0, 1, 1)], max_batch_size=2)
    with pytest.raises(sim.PolicyError, match="twice"):
        sim.simulate(HAND_WORKLOAD, lambda state: [state.waiting[0]] * 2 if state.waiting else [], max_batch_size=4)


def test_simulator_reports_a_policy_that_never_admits():
    with pytest.raises(RuntimeError, match="no progress"):
        sim.simulate(HAND_WORKLOAD, lambda state: [], max_batch_size=2, max_iterations=500)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"max_batch_size": 2, "poll_interval_s": 0}, "poll_interval_s"),
])
def test_simulate_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sim.simulate(HAND_WORKLOAD, sim.continuous_policy, **kwargs)


def test_bad_requests_and_costs_are_rejected():
    with pytest.raises(ValueError, match="output_len"):
        sim.SimRequest(0, 0.0, 4, 0)
    with pytest.raises(ValueError, match="arrival_time"):
        sim.SimRequest(0, -1.0, 4, 2)
    with pytest.raises(ValueError, match="overhead_s"):
        sim.StepCost(overhead_s=-0.1)
    with pytest.raises(ValueError, match="rate_per_s"):
        sim.poisson_workload(3, 0.0)
    with pytest.raises(ValueError, match="unique"):
        sim.simulate([HAND_WORKLOAD[0], HAND_WORKLOAD[0]], sim.continuous_policy, max_batch_size=2)


def test_poisson_workload_is_reproducible_and_in_range():
    first = sim.poisson_workload(50, 5.0, seed=4, num_priorities=3)
    assert first == sim.poisson_workload(50, 5.0, seed=4, num_priorities=3)
    assert first != sim.poisson_workload(50, 5.0, seed=5, num_priorities=3)
    assert first[0].arrival_time == 0.0
    assert all(a.arrival_time <= b.arrival_time for a, b in zip(first, first[1:]))
    assert all(16 <= r.prompt_len <= 128 and r.priority in (0, 1, 2) for r in first)
    assert any(r.output_len >= 48 for r in first) and any(r.output_len <= 16 for r in first)


def test_fit_step_cost_recovers_a_line():
    cost = sim.fit_step_cost([1, 32, 64], [0.012 + 0.001 * n for n in (1, 32, 64)])
    assert cost.overhead_s == pytest.approx(0.012)
    assert cost.per_prefill_token_s == pytest.approx(0.001)
    assert cost.per_decode_seq_s == pytest.approx(0.001)
    with pytest.raises(ValueError, match="different token counts"):
        sim.fit_step_cost([8, 8], [0.1, 0.2])


workloads = st.lists(
    st.tuples(st.floats(0, 2, allow_nan=False), st.integers(1, 40), st.integers(1, 12), st.integers(0, 2)),
    min_size=1, max_size=14,
).map(lambda specs: [sim.SimRequest(i, a, p, o, priority) for i, (a, p, o, priority) in enumerate(specs)])


@settings(max_examples=60, deadline=None)
@given(workload=workloads, max_batch_size=st.integers(1, 5), policy=st.sampled_from(sorted(POLICIES)))
def test_every_request_finishes_in_order_within_the_budget(workload, max_batch_size, policy):
    result = sim.simulate(workload, POLICIES[policy], max_batch_size=max_batch_size)
    by_id = {r.request_id: r for r in workload}
    for trace in result.traces:
        request = by_id[trace.request_id]
        assert len(trace.token_times) == request.output_len
        assert trace.first_scheduled_time >= request.arrival_time
        assert trace.token_times[0] > trace.first_scheduled_time
        assert all(a < b for a, b in zip(trace.token_times, trace.token_times[1:]))
    for step in result.steps:
        assert 1 <= step.batch_size <= max_batch_size
        assert step.num_tokens == step.num_prefill_tokens + len(step.decode_ids)
        assert step.num_prefill_tokens == sum(by_id[i].prompt_len for i in step.prefill_ids)
    assert all(a.end <= b.start for a, b in zip(result.steps, result.steps[1:]))
    # Every token comes from exactly one step: prefill gives the first, each decode one more.
    assert sum(step.batch_size for step in result.steps) == sum(r.output_len for r in workload)


@settings(max_examples=60, deadline=None)
@given(workload=workloads, max_batch_size=st.integers(1, 5))
def test_static_and_dynamic_never_add_to_a_running_batch(workload, max_batch_size):
    for policy in (POLICIES["static"], POLICIES["dynamic"]):
        result = sim.simulate(workload, policy, max_batch_size=max_batch_size)
        for step in result.steps:
            assert not (step.prefill_ids and step.decode_ids)


@settings(max_examples=60, deadline=None)
@given(workload=workloads, max_batch_size=st.integers(1, 5))
def test_continuous_starts_requests_as_early_as_its_free_places_allow(workload, max_batch_size):
    """Continuous batching never leaves a place empty while a request waits."""
    result = sim.simulate(workload, sim.continuous_policy, max_batch_size=max_batch_size)
    by_id = {r.request_id: r for r in workload}
    for step in result.steps:
        waiting_before = [r for r in workload if r.arrival_time <= step.start
                          and result.traces[r.request_id].first_scheduled_time > step.start]
        if waiting_before:
            assert step.batch_size == max_batch_size
        assert all(by_id[i].arrival_time <= step.start for i in step.prefill_ids)


def test_continuous_beats_static_on_mean_ttft_on_realistic_workloads():
    """Not a theorem for every workload (step costs differ), so checked on the course's seeded workloads."""
    for seed in range(10):
        workload = sim.poisson_workload(40, 10.0, seed=seed)
        means = {}
        for name in ("static", "continuous"):
            traces = sim.simulate(workload, POLICIES[name], max_batch_size=4).traces
            means[name] = summarize([t.to_metrics() for t in traces]).ttft.mean
        assert means["continuous"] < means["static"], (seed, means)


def test_trace_round_trips_through_request_metrics():
    trace = sim.RequestTrace(3, 0.5, 12, [0.7, 0.8, 1.0], first_scheduled_time=0.6)
    metrics = trace.to_metrics()
    assert (metrics.ttft, metrics.e2e_latency, metrics.num_output_tokens) == (pytest.approx(0.2), 0.5, 3)
    back = sim.RequestTrace.from_metrics(3, metrics)
    assert back == trace
    assert sim.RequestTrace.from_metrics(3, metrics, arrival_time=0.0).arrival_time == 0.0


def test_policy_timelines_figure():
    results = {name: sim.simulate(HAND_WORKLOAD, policy, max_batch_size=2, cost=HAND_COST)
               for name, policy in POLICIES.items()}
    figure = viz.policy_timelines(results)
    assert isinstance(figure, Figure)
    assert len(figure.axes) == len(POLICIES)
    assert figure.axes[-1].get_xlabel() == "time (s)"
    assert all(ax.get_ylabel() == "request id" and ax.get_title() for ax in figure.axes)
    with pytest.raises(ValueError, match="at least one"):
        viz.policy_timelines({})


def test_policy_timeline_titles_count_the_places_a_policy_used():
    def one_at_a_time(state):
        return [] if state.running or not state.waiting else [state.waiting[0]]

    results = {"one at a time": sim.simulate(HAND_WORKLOAD, one_at_a_time, max_batch_size=4, cost=HAND_COST),
               "continuous": sim.simulate(HAND_WORKLOAD, sim.continuous_policy, max_batch_size=4, cost=HAND_COST)}
    titles = [ax.get_title() for ax in viz.policy_timelines(results).axes]
    assert "at most 1 of the 4 places" in titles[0], titles
    assert "at most 4 of the 4 places" in titles[1], titles


def test_latency_vs_throughput_figure():
    figure = viz.latency_vs_throughput({"continuous": [(100.0, 0.5, "b=4"), (50.0, 0.3, "b=1")],
                                        "static": [(40.0, 1.0, "")]})
    assert isinstance(figure, Figure)
    (ax,) = figure.axes
    assert "tokens/s" in ax.get_xlabel() and "(s)" in ax.get_ylabel() and ax.get_title()
    assert len(ax.get_lines()) == 2
    with pytest.raises(ValueError, match="no points"):
        viz.latency_vs_throughput({"static": []})


def test_latency_vs_throughput_in_steps_and_seconds_figure():
    steps = {"one at a time": [(1.0, 20.0, "")], "continuous": [(1.8, 12.0, "2"), (4.4, 8.0, "8")]}
    seconds = {"one at a time": [(10.0, 2.0, "")], "continuous": [(15.0, 1.5, "2"), (30.0, 1.0, "8")]}
    figure = viz.latency_vs_throughput_in_steps_and_seconds(steps, seconds, title="burst")
    left, right = figure.axes
    assert "step" in left.get_xlabel() and "steps" in left.get_ylabel()
    assert "tokens/s" in right.get_xlabel() and "(s)" in right.get_ylabel()
    assert len(left.get_lines()) == len(right.get_lines()) == 2
    with pytest.raises(ValueError, match="no points"):
        viz.latency_vs_throughput_in_steps_and_seconds(steps, {"static": []})
