"""Tests of course_lib.metrics against hand-computed timestamps and numpy's percentiles."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from course_lib.metrics import RequestMetrics, percentile, summarize


def three_requests() -> list[RequestMetrics]:
    """Hand-made timestamps (seconds). Expected values are worked out in the tests below."""
    return [
        # TTFT 0.5, TPOT (1.5 - 0.5) / 4 = 0.25, e2e 1.5, queue 0.1
        RequestMetrics(arrival_time=0.0, first_scheduled_time=0.1, first_token_time=0.5, finish_time=1.5,
                       num_prompt_tokens=10, num_output_tokens=5),
        # one output token: TTFT 0.2, TPOT undefined, e2e 0.2
        RequestMetrics(arrival_time=0.2, first_scheduled_time=0.2, first_token_time=0.4, finish_time=0.4,
                       num_prompt_tokens=20, num_output_tokens=1),
        # TTFT 0.3, TPOT (3.0 - 1.3) / 17 = 0.1, e2e 2.0
        RequestMetrics(arrival_time=1.0, first_scheduled_time=1.2, first_token_time=1.3, finish_time=3.0,
                       num_prompt_tokens=30, num_output_tokens=18),
    ]


def test_per_request_latencies():
    first, single, third = three_requests()
    assert first.ttft == pytest.approx(0.5)
    assert first.tpot == pytest.approx(0.25)
    assert first.e2e_latency == pytest.approx(1.5)
    assert first.queue_time == pytest.approx(0.1)
    assert single.tpot is None  # 1 output token: no inter-token gap
    assert single.ttft == pytest.approx(0.2)
    assert third.tpot == pytest.approx(0.1)
    # e2e = TTFT + (n - 1) * TPOT
    assert third.e2e_latency == pytest.approx(third.ttft + 17 * third.tpot)


def test_unfinished_request_has_no_latencies_yet():
    metrics = RequestMetrics(arrival_time=5.0)
    assert metrics.ttft is None and metrics.tpot is None and metrics.e2e_latency is None
    assert metrics.queue_time is None


def test_record_methods_fill_the_fields():
    metrics = RequestMetrics(arrival_time=1.0)
    metrics.record_scheduled(1.25)
    metrics.record_scheduled(2.0)  # rescheduled after a preemption: the first time stays
    for now in (1.5, 1.75, 2.0, 2.25):
        metrics.record_token(now)
    metrics.record_finish(2.25)
    assert metrics.first_scheduled_time == 1.25
    assert metrics.first_token_time == 1.5
    assert metrics.token_times == [1.5, 1.75, 2.0, 2.25]
    assert metrics.num_output_tokens == 4
    assert metrics.ttft == pytest.approx(0.5)
    assert metrics.tpot == pytest.approx(0.25)


def test_summarize_hand_computed():
    summary = summarize(three_requests())
    assert summary.num_requests == 3
    assert summary.duration == pytest.approx(3.0)  # first arrival 0.0 to last finish 3.0
    assert summary.total_input_tokens == 60 and summary.total_output_tokens == 24
    assert summary.input_tokens_per_s == pytest.approx(20.0)
    assert summary.output_tokens_per_s == pytest.approx(8.0)
    assert summary.requests_per_s == pytest.approx(1.0)

    # TTFT sorted [0.2, 0.3, 0.5]: p90 at rank 2 * 0.9 = 1.8 -> 0.3 + 0.8 * 0.2 = 0.46.
    assert summary.ttft.count == 3
    assert summary.ttft.mean == pytest.approx(1.0 / 3)
    assert summary.ttft.median == pytest.approx(0.3)
    assert summary.ttft.p90 == pytest.approx(0.46)
    assert summary.ttft.p99 == pytest.approx(0.496)

    # TPOT leaves out the 1-token request: [0.1, 0.25].
    assert summary.tpot.count == 2
    assert summary.tpot.mean == pytest.approx(0.175)
    assert summary.tpot.median == pytest.approx(0.175)
    assert summary.tpot.p90 == pytest.approx(0.1 + 0.9 * 0.15)
    assert summary.tpot.p99 == pytest.approx(0.1 + 0.99 * 0.15)

    # e2e sorted [0.2, 1.5, 2.0].
    assert summary.e2e_latency.mean == pytest.approx(3.7 / 3)
    assert summary.e2e_latency.median == pytest.approx(1.5)
    assert summary.e2e_latency.p90 == pytest.approx(1.9)
    assert summary.e2e_latency.p99 == pytest.approx(1.99)


def test_summarize_with_an_explicit_duration():
    summary = summarize(three_requests(), duration=6.0)
    assert summary.output_tokens_per_s == pytest.approx(4.0)
    assert summary.requests_per_s == pytest.approx(0.5)


def test_tpot_is_none_when_every_answer_has_one_token():
    summary = summarize([three_requests()[1]])
    assert summary.tpot is None
    assert "no request with >= 2 output tokens" in summary.as_table()


def test_table_and_dict():
    summary = summarize(three_requests())
    table = summary.as_table()
    assert "TTFT" in table and "TPOT" in table and "end-to-end" in table
    assert "333.3" in table  # mean TTFT in ms
    assert "output tokens/s" in table and "8.0" in table
    as_dict = summary.as_dict()
    assert as_dict["ttft"]["p90"] == pytest.approx(0.46)
    assert as_dict["output_tokens_per_s"] == pytest.approx(8.0)
    json.dumps(as_dict)  # JSON-ready


def test_summarize_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
    with pytest.raises(ValueError, match=r"metrics\[1\]"):
        summarize([three_requests()[0], RequestMetrics(arrival_time=0.0)])
    with pytest.raises(ValueError, match="duration"):
        summarize(three_requests(), duration=0.0)


@pytest.mark.parametrize("size", [1, 2, 5, 101])
def test_percentile_matches_numpy_linear(size):
    rng = random.Random(size)
    values = [rng.uniform(0, 10) for _ in range(size)]
    for q in (0, 1, 37.5, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q"):
        percentile([1.0], 101)
