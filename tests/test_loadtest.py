"""course_lib.loadtest: Poisson arrivals, Little's law, summaries, bounds and the loopback rule."""

from __future__ import annotations

import math
import random
from statistics import mean, pvariance

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import loadtest
from course_lib.metrics import RequestMetrics, summarize
from course_lib.server.launch import is_loopback


def test_poisson_arrivals_have_exponential_gaps_and_poisson_counts():
    counts, gaps = [], []
    for seed in range(300):
        times = loadtest.poisson_arrival_times(3.0, 4.0, seed)
        assert times == sorted(times) and all(0 <= t < 4.0 for t in times)
        counts.append(len(times))
    for seed in range(20):  # long windows: the gaps that fit a short window are biased short
        times = loadtest.poisson_arrival_times(3.0, 200.0, 1000 + seed)
        gaps += [b - a for a, b in zip(times, times[1:])]
    assert mean(counts) == pytest.approx(12.0, rel=0.05)
    assert pvariance(counts) == pytest.approx(12.0, rel=0.25)  # Poisson: variance = mean
    assert mean(gaps) == pytest.approx(1 / 3, rel=0.03)
    # Exponential CDF at the mean: 1 - 1/e of the gaps are shorter than 1/rate.
    assert sum(g < 1 / 3 for g in gaps) / len(gaps) == pytest.approx(1 - math.exp(-1), abs=0.02)
    assert loadtest.poisson_arrival_times(3.0, 4.0, 7) == loadtest.poisson_arrival_times(3.0, 4.0, 7)
    with pytest.raises(ValueError):
        loadtest.poisson_arrival_times(0.0, 1.0, 0)


records_strategy = st.lists(
    st.tuples(st.floats(0, 10), st.floats(0.001, 5)).map(lambda p: {"sent_at": p[0], "done_at": p[0] + p[1]}),
    max_size=20)


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.floats(-1, 5), st.floats(0.1, 10))
def test_mean_in_flight_matches_a_fine_time_grid(records, start, length):
    end = start + length
    steps = 4000
    grid = [start + (i + 0.5) * length / steps for i in range(steps)]
    sampled = mean(sum(r["sent_at"] <= t < r["done_at"] for r in records) for t in grid)
    assert loadtest.mean_in_flight(records, start, end) == pytest.approx(sampled, abs=len(records) * 2 / steps + 1e-9)


def test_littles_law_over_a_whole_run():
    rng = random.Random(1)
    records = []
    for at in loadtest.poisson_arrival_times(5.0, 20.0, 2):
        records.append({"sent_at": at, "done_at": at + rng.expovariate(2.0)})
    start, end = min(r["sent_at"] for r in records), max(r["done_at"] for r in records)
    arrival_rate = len(records) / (end - start)
    mean_time = mean(r["done_at"] - r["sent_at"] for r in records)
    assert loadtest.mean_in_flight(records, start, end) == pytest.approx(arrival_rate * mean_time)


def _record(sent, chunks, tokens, status=200):
    return {"sent_at": sent, "chunk_times": chunks, "num_output_tokens": tokens, "status": status,
            "done_at": (chunks[-1] if chunks else sent) + 0.001, "error": None, "finish_reason": "length"}


def test_summarize_agrees_with_course_lib_metrics_and_counts_refusals():
    records = [_record(0.0, [0.2, 0.3, 0.5], 3), _record(0.1, [0.6, 0.7], 2), _record(0.2, [1.5], 1),
               _record(0.3, [], 0, status=429)]
    summary = loadtest.summarize(records, loadtest.Slo(ttft_s=0.6, tpot_s=0.2))
    reference = summarize([RequestMetrics(arrival_time=r["sent_at"], first_token_time=r["chunk_times"][0],
                                          finish_time=r["chunk_times"][-1], num_output_tokens=r["num_output_tokens"])
                           for r in records[:3]])
    assert summary["ttft"]["p50"] == pytest.approx(reference.ttft.median)
    assert summary["tpot"]["p99"] == pytest.approx(reference.tpot.p99)
    assert summary["num_ok"] == 3 and summary["num_rejected"] == 1 and summary["num_failed"] == 0
    # Good: the first two (TTFT 0.2 and 0.5 <= 0.6, TPOT 0.15 and 0.1); the third misses TTFT; the 429 counts as a miss.
    assert summary["slo_attainment"] == pytest.approx(2 / 4)


def test_only_loopback_targets_and_bounded_runs():
    assert is_loopback("http://127.0.0.1:8000") and is_loopback("http://localhost:1") and is_loopback("http://[::1]:80")
    assert not is_loopback("http://10.0.0.1:8000") and not is_loopback("http://example.com")
    schedule = [{"at": 0.0, "prompt": "x", "max_tokens": 1}]
    with pytest.raises(ValueError, match="this machine"):
        loadtest.run(loadtest.open_loop, "http://192.168.1.10:8000", schedule)
    with pytest.raises(ValueError, match="at most"):
        loadtest.run(loadtest.open_loop, "http://127.0.0.1:9", schedule * (loadtest.MAX_REQUESTS + 1))
    with pytest.raises(ValueError, match="at most"):
        loadtest.run(loadtest.open_loop, "http://127.0.0.1:9", [{"at": 10_000.0, "prompt": "x", "max_tokens": 1}])
    with pytest.raises(ValueError, match="num_clients"):
        loadtest.closed_loop("http://127.0.0.1:9", ["x"], max_tokens=1, num_clients=0, duration_s=1)


def test_a_refused_connection_is_a_failed_record_not_a_crash():
    from course_lib.server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    records = loadtest.run(loadtest.open_loop, url, [{"at": 0.0, "prompt": "x", "max_tokens": 2}])
    assert records[0]["error"] and records[0]["status"] is None
    assert loadtest.summarize(records)["num_failed"] == 1


def test_a_run_with_progress_shows_a_bar_of_the_schedule_seconds(capsys):
    from course_lib.server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there: each request fails at once
    schedule = [{"at": 0.0, "prompt": "x", "max_tokens": 2}, {"at": 1.2, "prompt": "y", "max_tokens": 2}]
    records = loadtest.run(loadtest.open_loop, url, schedule, progress=True)
    assert len(records) == 2 and all(record["error"] for record in records)
    bar = capsys.readouterr().err   # outside a notebook tqdm.auto is the text bar, on stderr
    assert "load test, 2 requests: " in bar and "0/1 s" in bar and "1/1 s" in bar, bar
    assert "load test" not in capsys.readouterr().err   # nothing without progress=True
    loadtest.run(loadtest.open_loop, url, schedule[:1])
    assert "load test" not in capsys.readouterr().err
