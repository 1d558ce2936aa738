"""The HTTP server against the official ``openai`` client, on a real server on 127.0.0.1.

A tiny random model keeps every request fast; what is tested is the server: the OpenAI wire
format (checked by the ``openai`` client's own parsing), streaming, disconnects that free KV
blocks, admission control (400 / 429 + Retry-After) and the Prometheus metrics.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from course_lib import loadtest
from course_lib.server.admission import AdmissionLimits, admission_policy
from course_lib.server.launch import start_server
from course_lib.server.models import tiny_random_model

MODEL = "tiny"


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_model()


@pytest.fixture(scope="module")
def server(tiny):
    model, tokenizer = tiny
    with start_server(model, tokenizer, model_name=MODEL, num_blocks=64, max_num_seqs=4) as running:
        yield running


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def scrape(url: str) -> dict[str, float]:
    """{sample name with labels: value} of a server's /metrics."""
    samples = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return samples


def test_health_and_models(server, client):
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    assert [m.id for m in client.models.list()] == [MODEL]


def test_completion_matches_the_engine(server, client, tiny):
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    model, tokenizer = tiny
    answer = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=6, temperature=0)
    expected = LLMEngine(model, tokenizer, num_blocks=16).generate(
        ["Hello there"], SamplingParams(temperature=0, max_tokens=6))[0]
    assert answer.choices[0].text == expected.text
    assert answer.usage.completion_tokens == len(expected.token_ids)
    assert answer.usage.prompt_tokens == len(tokenizer.encode("Hello there"))
    assert answer.choices[0].finish_reason in ("length", "stop")


def test_streamed_completion_equals_the_whole_answer(client):
    whole = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=8, temperature=0)
    pieces, usage, reasons = [], None, []
    for chunk in client.completions.create(model=MODEL, prompt="Once upon", max_tokens=8, temperature=0,
                                           stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.text)
            reasons.append(choice.finish_reason)
    assert "".join(pieces) == whole.choices[0].text
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert reasons[-1] == whole.choices[0].finish_reason and all(r is None for r in reasons[:-1])


def test_chat_streaming_and_not(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=7, temperature=0)
    assert whole.choices[0].message.role == "assistant"
    stream = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=7, temperature=0,
                                                 stream=True))
    assert stream[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == whole.choices[0].message.content


def test_bad_requests_get_openai_errors(server, client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, temperature=-1)
    with pytest.raises(openai.BadRequestError, match="n' must be 1"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, n=2)
    # 64 blocks of 16 tokens hold 1024 tokens: this request could never fit, whatever the load.
    with pytest.raises(openai.BadRequestError, match="KV blocks"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=1500)
    assert httpx.post(f"{server.url}/v1/completions", content=b"{not json").status_code == 400


def test_client_that_disconnects_mid_stream_frees_its_blocks(server):
    before = scrape(server.url)
    body = {"model": MODEL, "prompt": "Count to a thousand:", "max_tokens": 900, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=30) as response:
        for index, _line in enumerate(response.iter_lines()):
            if index >= 6:
                break  # leaving the block closes the connection mid-stream
    loop = server.backend
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (loop.state().num_running or loop.state().kv_blocks_used):
        time.sleep(0.02)
    state = loop.state()
    assert state.num_running == 0 and state.num_waiting == 0 and state.kv_blocks_used == 0
    after = scrape(server.url)
    aborted = 'course_request_success_total{finish_reason=abort}'
    assert after.get(aborted, 0) == before.get(aborted, 0) + 1
    assert after.get('course_generation_tokens_total', 0) - before.get('course_generation_tokens_total', 0) < 900


def test_metrics_count_what_was_served(server, client):
    before = scrape(server.url)
    for _ in range(3):
        client.completions.create(model=MODEL, prompt="Metrics please", max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    after = scrape(server.url)
    assert after["course_e2e_request_latency_seconds_count"] - before["course_e2e_request_latency_seconds_count"] == 3
    assert after["course_time_per_output_token_seconds_count"] - before["course_time_per_output_token_seconds_count"] == 3
    assert after["course_generation_tokens_total"] - before["course_generation_tokens_total"] == 12
    assert after["course_kv_blocks_total"] == 64
    # The same prompt three times: the second and third hit the prefix cache (whole 16-token blocks only).
    assert after["course_prefix_cache_queries_total"] > before["course_prefix_cache_queries_total"]


def test_overload_gets_429s_while_admitted_requests_keep_their_latency(tiny):
    model, tokenizer = tiny
    options = dict(model_name=MODEL, num_blocks=64, max_num_seqs=2, max_num_batched_tokens=64)
    step_times: list[float] = []
    hook = model.register_forward_hook(lambda *_: step_times.append(time.perf_counter()))
    try:
        with start_server(model, tokenizer, **options) as unguarded:
            _burst(unguarded.url, 2, 4)  # warm-up
            without = _burst(unguarded.url, 24, 40)
        limits = AdmissionLimits(max_waiting=2, kv_budget_blocks=64, retry_after_s=2)
        with start_server(model, tokenizer, admission=admission_policy, limits=limits, **options) as guarded:
            _burst(guarded.url, 2, 4)
            with_admission = _burst(guarded.url, 24, 40)
            metrics = scrape(guarded.url)
    finally:
        hook.remove()

    assert all(r["status"] == 200 for r in without)
    refused = [r for r in with_admission if r["status"] == 429]
    admitted = [r for r in with_admission if r["status"] == 200]
    assert refused and admitted and len(refused) + len(admitted) == 24
    assert all(r["retry_after"] == 2 for r in refused)
    assert metrics['course_requests_rejected_total{status=429}'] == len(refused)

    # Latency counted in engine steps (forward passes) while the request was open, not in seconds:
    # the same claim, but a busy machine (CI runs tests side by side) slows every step alike.
    def steps_open(record: dict) -> int:
        return sum(record["sent_at"] <= t <= record["done_at"] for t in step_times)

    # Admitted: at most 2 running + 2 waiting, so nobody waits behind more than one batch. Without
    # admission the last of 24 waits behind eleven batches of 40 steps.
    worst_without = max(steps_open(r) for r in without)
    worst_admitted = max(steps_open(r) for r in admitted)
    assert worst_admitted < 0.5 * worst_without, (worst_admitted, worst_without)
    # A refusal is fast: it never waited for the engine, so it came back before even the quickest
    # admitted request could have streamed its 40 tokens.
    quickest_admitted = min(steps_open(r) for r in admitted)
    assert max(steps_open(r) for r in refused) < quickest_admitted, (
        [steps_open(r) for r in refused], quickest_admitted)


def _burst(url: str, count: int, max_tokens: int) -> list[dict]:
    """``loadtest.burst``'s records, their times moved onto the ``time.perf_counter()`` clock.

    The burst's own clock starts a moment after ``before``, so each window lands a little early;
    it keeps its length, which is what counting the engine steps inside it needs.
    """
    before = time.perf_counter()
    records = loadtest.burst(url, [f"Request number {i} says hello" for i in range(count)], max_tokens=max_tokens)
    return [{**record, "sent_at": before + record["sent_at"], "done_at": before + record["done_at"]}
            for record in records]


def test_reset_prefix_cache_needs_an_idle_server(server):
    assert httpx.post(f"{server.url}/reset_prefix_cache").json() == {"status": "ok"}
    assert scrape(server.url)["course_prefix_cache_queries_total"] == 0


def test_a_load_test_record_holds_the_servers_refusal(server):
    too_long = loadtest.burst(server.url, ["hello"], max_tokens=100_000)[0]
    assert too_long["status"] == 400 and "max_tokens=100000" in too_long["error"] and too_long["chunk_times"] == []
    fine = loadtest.burst(server.url, ["hello"], max_tokens=3)[0]
    assert fine["status"] == 200 and fine["num_output_tokens"] == 3 and len(fine["chunk_times"]) >= 1
    assert fine["finish_reason"] == "length" and fine["error"] is None
    assert fine["sent_at"] <= fine["chunk_times"][0] <= fine["done_at"]


def test_metrics_report_free_kv_blocks(server):
    samples = scrape(server.url)
    assert samples["course_kv_blocks_free"] + samples["course_kv_blocks_used"] == samples["course_kv_blocks_total"]


def test_router_balances_by_the_replicas_metrics(tiny):
    """A metrics policy behind the router: every replica reports through kv_load before the first decision,
    each decision sees the request's max_tokens, and the engine view's route events carry the free blocks."""
    from course_lib.server.balancing import KVAwareRouter, MetricsRouting, kv_load
    from course_lib.server.router import start_router

    model, tokenizer = tiny
    seen = []

    class Recording(KVAwareRouter):
        def choose(self, prompt_token_ids, max_tokens, home):
            seen.append((len(prompt_token_ids), max_tokens, home, [load["blocks_free"] for load in self.loads]))
            return super().choose(prompt_token_ids, max_tokens, home)

    policy = MetricsRouting(Recording(2), kv_load, home=lambda prompt, outstanding: None, scrape_interval_s=0.05)
    with start_server(model, tokenizer, model_name=MODEL, num_blocks=32) as first, \
            start_server(model, tokenizer, model_name=MODEL, num_blocks=64) as second, \
            start_router([first.url, second.url], policy, tokenizer, policy_name="kv-aware") as router:
        answer = httpx.post(f"{router.url}/v1/completions", json={"prompt": [5] * 40, "max_tokens": 7}, timeout=30)
        assert answer.status_code == 200 and answer.headers["x-course-replica"] == "1"  # 64 free beat 32
        time.sleep(0.3)  # a few scrapes later
        assert len(policy.history) >= 4 and set(policy.loads) == {0, 1}
        info = httpx.get(f"{router.url}/server_info").json()
    assert seen[0][:3] == (40, 7, None) and seen[0][3] == [32, 64]
    assert info["router"]["policy"] == "kv-aware"


def test_router_says_when_a_replicas_metrics_cannot_be_read(tiny):
    from course_lib.server.balancing import KVAwareRouter, MetricsRouting
    from course_lib.server.router import start_router

    def broken(text):
        raise KeyError("course_kv_blocks_free")

    model, tokenizer = tiny
    policy = MetricsRouting(KVAwareRouter(1), broken, scrape_interval_s=None)
    with start_server(model, tokenizer, model_name=MODEL, num_blocks=32) as only, \
            start_router([only.url], policy, tokenizer) as router:
        answer = httpx.post(f"{router.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert answer.status_code == 503
    assert "reading replica 0's /metrics failed: KeyError" in answer.json()["error"]["message"]
