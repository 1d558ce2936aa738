"""course_lib.sim.disaggregation: hand-checked timelines, invariants over random workloads, and the
interference that separate pools remove."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim.disaggregation import (
    CostModel,
    SimRequest,
    kv_transfer_ms,
    make_workload,
    simulate_colocated,
    simulate_disaggregated,
)

COST = CostModel(step_overhead_ms=10.0, decode_ms_per_seq=1.0, prefill_ms_per_token=0.5)


def test_step_cost_is_linear():
    assert COST.step_ms(100, 4) == 10.0 + 4 * 1.0 + 100 * 0.5
    with pytest.raises(ValueError, match="prefill_ms_per_token"):
        CostModel(prefill_ms_per_token=-1.0)


def test_one_request_colocated_by_hand():
    result = simulate_colocated([SimRequest(5.0, 20, 3)], COST, num_instances=1)
    # prefill step at 5 ms: 10 + 0.5 * 20 = 20 ms -> first token at 25; then decode steps of 10 + 1 = 11 ms
    assert result.traces[0].token_times_ms == [25.0, 36.0, 47.0]
    assert result.ttft_ms == [20.0] and result.tpot_ms == [11.0]


def test_a_prompt_stretches_the_running_decode_by_hand():
    requests = [SimRequest(0.0, 10, 4), SimRequest(16.0, 40, 1)]
    result = simulate_colocated(requests, COST, num_instances=1)
    # r0: prefill 0-15 (token 1), decode 15-26 (token 2); r1 arrived at 16, joins the step at 26:
    # 10 + 1 * 1 + 0.5 * 40 = 31 ms -> r0's token 3 and r1's only token at 57; r0's token 4 at 68.
    assert result.traces[0].token_times_ms == [15.0, 26.0, 57.0, 68.0]
    assert result.traces[1].token_times_ms == [57.0]
    assert max(result.gaps_ms) == 31.0


def test_chunking_caps_the_gap_by_hand():
    requests = [SimRequest(0.0, 10, 4), SimRequest(16.0, 40, 1)]
    result = simulate_colocated(requests, COST, num_instances=1, max_batch=4, token_budget=21)
    # at 26: 1 decode + 20 prompt tokens = 21 ms; at 47: 1 decode + the last 20 -> r1's token at 68
    assert result.traces[0].token_times_ms == [15.0, 26.0, 47.0, 68.0]
    assert result.traces[1].token_times_ms == [68.0]


def test_disaggregated_by_hand():
    requests = [SimRequest(0.0, 20, 3)]
    result = simulate_disaggregated(requests, COST, transfer_ms=lambda tokens: tokens * 0.25)
    # prefill 0-20 ms (first token); KV arrives at 25; decode steps of 11 ms
    assert result.traces[0].token_times_ms == [20.0, 36.0, 47.0]


def test_kv_transfer_ms_worked_example():
    assert math.isclose(kv_transfer_ms(2000, 131_072, 50.0, 1.0), 1.0 + 5.24288)
    with pytest.raises(ValueError, match="link_gb_per_s"):
        kv_transfer_ms(10, 100, 0.0)


workloads = st.builds(
    make_workload,
    num_requests=st.integers(1, 40),
    rate_per_s=st.floats(1.0, 200.0),
    prompt_tokens=st.tuples(st.integers(1, 50), st.integers(50, 900)),
    output_tokens=st.tuples(st.integers(1, 5), st.integers(5, 40)),
    seed=st.integers(0, 1000),
)


def _check_traces(requests, result):
    assert len(result.traces) == len(requests)
    for request, trace in zip(requests, result.traces):
        assert trace.request == request
        assert len(trace.token_times_ms) == request.output_tokens
        assert all(b > a for a, b in zip(trace.token_times_ms, trace.token_times_ms[1:]))
        assert trace.ttft_ms >= COST.step_ms(request.prompt_tokens, 0) - 1e-9


@settings(max_examples=40, deadline=None)
@given(requests=workloads, instances=st.integers(1, 3), max_batch=st.integers(1, 16))
def test_colocated_invariants(requests, instances, max_batch):
    _check_traces(requests, simulate_colocated(requests, COST, num_instances=instances, max_batch=max_batch))
    chunked = simulate_colocated(requests, COST, num_instances=instances, max_batch=max_batch,
                                 token_budget=max_batch + 64)
    _check_traces(requests, chunked)
    # a step never holds more than the budget, so no gap exceeds one full step
    assert max(chunked.gaps_ms, default=0.0) <= COST.step_ms(max_batch + 64, max_batch) + 1e-9


@settings(max_examples=40, deadline=None)
@given(requests=workloads, prefill=st.integers(1, 3), decode=st.integers(1, 3), max_batch=st.integers(1, 16),
       transfer=st.floats(0.0, 50.0))
def test_disaggregated_invariants(requests, prefill, decode, max_batch, transfer):
    result = simulate_disaggregated(requests, COST, num_prefill_instances=prefill, num_decode_instances=decode,
                                    max_batch=max_batch, transfer_ms=transfer)
    _check_traces(requests, result)
    for trace in result.traces:
        gaps = trace.gaps_ms
        if gaps:
            assert gaps[0] >= transfer + COST.step_ms(0, 1) - 1e-9  # the second token waits for the copy
        # decode instances run decodes only: after joining, every gap is one decode-only step
        assert all(gap <= COST.step_ms(0, max_batch) + 1e-9 for gap in gaps[1:])


def test_separate_pools_remove_the_interference():
    requests = make_workload(150, rate_per_s=8.0, prompt_tokens=(200, 3000), output_tokens=(50, 200), seed=1)
    cost = CostModel()
    colocated = simulate_colocated(requests, cost, num_instances=2).summary()
    disaggregated = simulate_disaggregated(requests, cost, transfer_ms=5.0).summary()
    assert disaggregated["gaps_p99_ms"] < colocated["gaps_p99_ms"] / 3
    assert disaggregated["tpot_p99_ms"] < colocated["tpot_p99_ms"]


def test_same_seed_same_result():
    assert make_workload(30, seed=4) == make_workload(30, seed=4)
    assert make_workload(30, seed=4) != make_workload(30, seed=5)
    first = simulate_colocated(make_workload(30, seed=4)).summary()
    assert first == simulate_colocated(make_workload(30, seed=4)).summary()


@pytest.mark.parametrize("call, phrase", [
    (lambda: SimRequest(0.0, 0, 1), "prompt_tokens"),
    (lambda: simulate_colocated([], CostModel()), "non-empty"),
    (lambda: simulate_colocated([SimRequest(0.0, 1, 1)], token_budget=8, max_batch=8), "token_budget"),
    (lambda: simulate_disaggregated([SimRequest(0.0, 1, 1)], num_decode_instances=0), "num_decode_instances"),
    (lambda: simulate_disaggregated([SimRequest(0.0, 1, 2)], transfer_ms=lambda n: -1.0), "transfer_ms"),
    (lambda: make_workload(5, prompt_tokens=(10, 5)), "prompt_tokens"),
])
def test_bad_input_is_named(call, phrase):
    with pytest.raises(ValueError, match=phrase):
        call()
