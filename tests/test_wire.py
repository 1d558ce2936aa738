"""course_lib.wire (metrics from a streamed answer) against outside implementations: the official
``openai`` client's reading of the same stream, and prometheus_client's own histograms."""

from __future__ import annotations

import math
import random
import time

import httpx
import numpy as np
import openai
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from course_lib.server.launch import start_server
from course_lib.server.models import tiny_random_model
from course_lib.wire import histogram_quantile, parse_stream, request_metrics


@pytest.fixture(scope="module")
def server():
    model, tokenizer = tiny_random_model()
    with start_server(model, tokenizer, model_name="tiny", num_blocks=32) as running:
        yield running


def _raw(server, path, body):
    sent_at, lines = time.perf_counter(), []
    with httpx.stream("POST", f"{server.url}{path}", json=body, timeout=30) as response:
        for line in response.iter_lines():
            lines.append((time.perf_counter(), line))
    return sent_at, lines


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_parse_stream_reads_what_the_openai_client_reads(server, kind):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    common = {"model": "tiny", "max_tokens": 9, "temperature": 0, "stream": True,
              "stream_options": {"include_usage": True}}
    if kind == "chat":
        messages = [{"role": "user", "content": "Tell me something."}]
        chunks = list(client.chat.completions.create(messages=messages, **common))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        sent_at, lines = _raw(server, "/v1/chat/completions", {"messages": messages, **common})
    else:
        chunks = list(client.completions.create(prompt="Tell me something.", **common))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        sent_at, lines = _raw(server, "/v1/completions", {"prompt": "Tell me something.", **common})
    usage = next(c.usage for c in chunks if c.usage is not None)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    parsed = parse_stream(lines)
    assert parsed["text"] == text and parsed["done"]
    assert parsed["num_output_tokens"] == usage.completion_tokens
    assert parsed["finish_reason"] == reasons[-1]
    with_text = [c for c in chunks if c.choices and ((c.choices[0].delta.content if kind == "chat" else c.choices[0].text))]
    assert len(parsed["chunk_times"]) == len(with_text)
    metrics = request_metrics(sent_at, parsed)
    assert 0 < metrics["ttft"] <= metrics["e2e"]
    assert metrics["tpot"] == pytest.approx((parsed["chunk_times"][-1] - parsed["chunk_times"][0])
                                            / (usage.completion_tokens - 1))


def test_request_metrics_by_hand():
    parsed = {"chunk_times": [10.30, 10.35, 10.45], "num_output_tokens": 4}
    assert request_metrics(10.0, parsed) == pytest.approx({"ttft": 0.30, "tpot": 0.05, "e2e": 0.45})
    assert request_metrics(1.0, {"chunk_times": [1.5], "num_output_tokens": 1})["tpot"] is None


def _prometheus_buckets(values, bounds):
    registry = CollectorRegistry()
    histogram = Histogram("latency_seconds", "test", buckets=bounds, registry=registry)
    for value in values:
        histogram.observe(value)
    family = next(text_string_to_metric_families(generate_latest(registry).decode()))
    return sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))


def test_histogram_quantile_on_prometheus_client_histograms():
    rng = random.Random(0)
    bounds = [0.05 * k for k in range(1, 41)]  # 0.05 .. 2.0
    values = [rng.uniform(0.0, 2.0) for _ in range(5000)]
    buckets = _prometheus_buckets(values, bounds)
    for q in (0.1, 0.5, 0.9, 0.99):
        # Uniform data fills each bucket evenly, so the interpolated estimate is within a bucket of the truth.
        assert histogram_quantile(q, buckets) == pytest.approx(np.percentile(values, 100 * q), abs=0.05)


def test_histogram_quantile_edge_cases():
    assert histogram_quantile(0.99, [(0.1, 2), (0.5, 5), (math.inf, 6)]) == 0.5  # rank in +Inf: largest finite le
    assert histogram_quantile(0.5, [(0.1, 2), (0.5, 5), (math.inf, 6)]) == pytest.approx(0.1 + 0.4 / 3)
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0), (math.inf, 0)]))
    assert histogram_quantile(0.5, [(0.05, 0), (0.1, 0), (0.2, 10), (math.inf, 10)]) == pytest.approx(0.15)
