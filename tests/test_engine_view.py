"""The engine view's data: ``LLMEngine.last_plan``, frames (``engine_view.snapshot``), the bounded
per-viewer queues (``EngineMonitor``), the engine loop's events, and ``/engine/stream`` over HTTP
(one server, and a router merging two replicas). The browser side is tests/test_serve_browser.py.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.checks import one_thread
from course_lib.engine import LLMEngine
from course_lib.model import LlamaModel, random_weights
from course_lib.sampling import SamplingParams
from course_lib.server.engine_loop import EngineLoop
from course_lib.server.engine_view import EngineMonitor, Subscription, snapshot
from tests.tiny_models import ByteTokenizer, tiny_config

TINY = tiny_config(vocab_size=300, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_model():
    return LlamaModel(TINY, random_weights(TINY, seed=0)).eval()


@pytest.fixture(autouse=True)
def single_thread():
    with one_thread():
        yield


def engine(model, **options) -> LLMEngine:
    return LLMEngine(model, ByteTokenizer(), **{"num_blocks": 32, "block_size": 4, **options})


# ---- the hook: LLMEngine.last_plan -------------------------------------------------------------


def test_last_plan_is_what_the_latest_step_ran(tiny_model):
    llm = engine(tiny_model, max_num_batched_tokens=8, max_num_seqs=4)
    assert llm.last_plan is None
    first = llm.add_request(list(range(1, 13)), GREEDY)   # 12 prompt tokens: two chunks under a budget of 8
    llm.step()
    plan = llm.last_plan
    assert [(c.request.request_id, c.start, c.num_tokens, c.samples) for c in plan.chunks] == [(first, 0, 8, False)]
    before = llm.stats.num_batched_tokens
    llm.step()
    assert [(c.start, c.num_tokens, c.samples) for c in llm.last_plan.chunks] == [(8, 4, True)]
    assert llm.last_plan.num_batched_tokens == llm.stats.num_batched_tokens - before == 4


def test_watching_the_plan_changes_nothing(tiny_model):
    prompts = [[5, 6, 7, 8, 9], list(range(20, 50)), [3] * 9]
    plain = [o.token_ids for o in engine(tiny_model).generate(prompts, GREEDY)]
    watched, plans = engine(tiny_model), []
    for prompt in prompts:
        watched.add_request(prompt, GREEDY)
    while watched.has_unfinished():
        watched.step()
        plans.append(snapshot(watched))   # what the engine view does after every step
    assert [len(p["running"]) for p in plans][0] == 3
    fresh = engine(tiny_model)
    assert [o.token_ids for o in fresh.generate(prompts, GREEDY)] == plain


# ---- frames -------------------------------------------------------------------------------------------


def test_a_frame_shows_shared_prefix_blocks_with_their_reference_counts(tiny_model):
    llm = engine(tiny_model)
    prefix = list(range(40, 52))                         # 12 tokens: three full blocks of 4
    llm.generate([prefix + [1, 2]], GREEDY)              # computes and caches the prefix's blocks
    ids = [llm.add_request(prefix + [tail], GREEDY) for tail in (3, 4)]
    llm.step()
    frame = snapshot(llm, tags={ids[1]: "route-7"}, step_s=0.01)
    running = {r["id"]: r for r in frame["running"]}
    assert set(running) == {str(i) for i in ids}
    for request_id in ids:
        entry = running[str(request_id)]
        assert entry["cached"] == 12 and entry["state"] == "prefill" and entry["chunk"] == [12, 1, 0]
    assert running[str(ids[1])]["tag"] == "route-7" and running[str(ids[0])]["tag"] is None
    pool = frame["pool"]
    tables = [llm.allocator.block_table(i) for i in ids]
    shared_blocks = tables[0][:3]
    assert shared_blocks == tables[1][:3]
    assert pool["shared"] == sorted([block, 2] for block in shared_blocks)
    assert all(pool["owner"][block] == 0 for block in tables[0])
    assert pool["owner"][tables[1][3]] == 1                  # the second request's own last block
    assert set(shared_blocks) <= set(pool["cached"])
    assert pool["free"] == llm.allocator.num_free_blocks
    assert sum(owner >= 0 for owner in pool["owner"]) == llm.allocator.num_blocks - llm.allocator.num_free_blocks
    assert frame["scheduled_tokens"] == 2 and frame["budget"] == 1024 and frame["step_ms"] == 10.0
    json.dumps(frame)                                        # plain data, ready for the wire


def test_a_decode_a_recompute_and_the_waiting_queue_are_labelled(tiny_model):
    # 6 blocks of 4 tokens: two requests of 8 prompt tokens growing to 14 cannot both fit.
    llm = engine(tiny_model, num_blocks=6, max_num_seqs=2)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    first, second = (llm.add_request(list(range(start, start + 8)), params) for start in (10, 30))
    llm.add_request([7, 7, 7], params)                      # waits: max_num_seqs is 2
    seen_states, preempted = set(), []
    while llm.has_unfinished():
        llm.step()
        frame = snapshot(llm)
        seen_states |= {r["state"] for r in frame["running"] + frame["waiting"]}
        preempted += [r.request_id for r in llm.last_plan.preempted]
        assert frame["num_waiting"] == len(llm.scheduler.waiting)
    assert preempted, "the pool was meant to be too small for both requests"
    assert {"prefill", "decode", "waiting", "preempted"} <= seen_states


class _ListlessScheduler:
    """A student's scheduler that keeps its queues to itself (only the protocol's methods)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if name in ("running", "waiting", "config"):
            raise AttributeError(name)
        return getattr(self._inner, name)


class _BareAllocator:
    """An allocator with the protocol's members only: no ref_counts, no prefix-cache map."""

    def __init__(self, inner):
        self._inner = inner
        self.num_blocks, self.block_size = inner.num_blocks, inner.block_size

    def __getattr__(self, name):
        if name in ("ref_counts", "_block_of_hash"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_frame_says_what_a_students_parts_do_not_expose(tiny_model):
    llm = engine(tiny_model)
    llm.add_request([1, 2, 3, 4, 5], GREEDY)
    llm.step()
    llm.scheduler = _ListlessScheduler(llm.scheduler)
    llm.allocator = _BareAllocator(llm.allocator)
    frame = snapshot(llm)
    assert frame["running"] is None and frame["waiting"] is None and frame["num_waiting"] is None
    assert frame["budget"] is None and frame["pool"]["cached"] is None and frame["pool"]["shared"] == []


# ---- the monitor: bounded, never blocking ------------------------------------------------------------


def test_a_viewer_that_never_reads_holds_only_the_latest_frames():
    monitor = EngineMonitor(max_frames=3, max_events=5, max_frames_per_s=1e9)
    woken = []
    viewer = monitor.subscribe(lambda: woken.append(1))
    for step in range(100):
        monitor.publish([{"kind": "preempt", "time": time.time(), "step": step}], {"step": step}, now=step,
                        num_waiting=0, num_running=1, kv_blocks_used=2)
    assert len(woken) == 1                                  # one wake-up until the viewer takes what is there
    frame, events, skipped = viewer.take()
    assert frame == {"step": 99} and skipped == 2           # frames 97, 98 dropped unseen; older ones gone
    assert [e["step"] for e in events] == [95, 96, 97, 98, 99] and viewer.lost_events == 95
    monitor.publish([], {"step": 100}, now=100, num_waiting=0, num_running=0, kv_blocks_used=0)
    assert len(woken) == 2 and viewer.take()[0] == {"step": 100}
    monitor.unsubscribe(viewer)
    assert monitor.num_viewers == 0


def test_frames_are_built_only_for_viewers_and_at_most_so_often():
    monitor = EngineMonitor(max_frames_per_s=10)
    assert not monitor.wants_frame(now=0.0, going_idle=True)       # nobody watches
    monitor.subscribe(lambda: None)
    assert monitor.wants_frame(now=0.0, going_idle=False)
    monitor.publish([], {"step": 1}, now=0.0, num_waiting=0, num_running=0, kv_blocks_used=0)
    assert not monitor.wants_frame(now=0.05, going_idle=False)     # 50 ms later: too soon at 10 per second
    assert monitor.wants_frame(now=0.05, going_idle=True)          # but the last step before idle always shows
    assert monitor.wants_frame(now=0.11, going_idle=False)


def test_history_keeps_the_last_minute_only():
    monitor = EngineMonitor(history_s=60, sample_interval_s=1)
    now = time.time()
    monitor.publish([{"kind": "finish", "time": now - 120, "ttft": 1.0},
                     {"kind": "finish", "time": now - 5, "ttft": 0.5},
                     {"kind": "preempt", "time": now - 2, "id": "req-1"}], None, now=0.0, num_waiting=3,
                    num_running=2, kv_blocks_used=9)
    history = monitor.history()
    assert [e["ttft"] for e in history["finishes"]] == [0.5]
    assert [e["id"] for e in history["preemptions"]] == ["req-1"]
    assert [sample[1:] for sample in history["queue"]] == [[3, 2, 9]]


@pytest.mark.parametrize("name, value", [("max_frames", 0), ("max_events", 1.5), ("max_frames_per_s", 0),
                                         ("history_s", -1), ("sample_interval_s", "1")])
def test_monitor_limits_are_checked(name, value):
    with pytest.raises(ValueError, match=name):
        EngineMonitor(**{name: value})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("publish"), st.integers(0, 4), st.booleans()),
                          st.tuples(st.just("take"), st.just(0), st.just(False))), max_size=60),
       st.integers(1, 4), st.integers(1, 6))
def test_a_viewer_gets_events_in_order_and_the_newest_frame(operations, max_frames, max_events):
    """Whatever the interleaving: events arrive in order, none twice, the dropped ones counted; a take
    returns the newest frame published since the last take; nothing held exceeds its bound."""
    monitor = EngineMonitor(max_frames=max_frames, max_events=max_events, max_frames_per_s=1e9)
    viewer: Subscription = monitor.subscribe(lambda: None)
    published_events, received_events, latest_frame, counter = 0, [], None, 0
    for kind, num_events, with_frame in operations:
        if kind == "publish":
            events = [{"kind": "preempt", "time": time.time(), "n": published_events + i} for i in range(num_events)]
            published_events += num_events
            counter += 1
            frame = {"step": counter} if with_frame else None
            latest_frame = frame or latest_frame
            monitor.publish(events, frame, now=float(counter), num_waiting=0, num_running=0, kv_blocks_used=0)
            assert len(viewer.frames) <= max_frames and len(viewer.events) <= max_events
        else:
            frame, events, _ = viewer.take()
            assert frame == latest_frame
            latest_frame = None
            received_events += [e["n"] for e in events]
    received_events += [e["n"] for e in viewer.take()[1]]
    assert received_events == sorted(set(received_events))
    assert len(received_events) + viewer.lost_events == published_events


# ---- the engine loop: events and snapshots ---------------------------------------------------------------


def test_the_loop_reports_preemptions_and_finishes_and_builds_frames_only_when_watched(tiny_model):
    loop = EngineLoop(lambda: engine(tiny_model, num_blocks=6, max_num_seqs=2)).start()
    try:
        done = threading.Event()
        finished = []

        def on_output(output):
            if output.finished:
                finished.append(output)
                if len(finished) == 2:
                    done.set()

        params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
        for start in (10, 30):
            loop.submit(list(range(start, start + 8)), params, on_output, tag=f"route-{start}")
        assert done.wait(30)
        assert loop.monitor.frames_built == 0                       # nobody watched
        history = loop.monitor.history()
        assert history["preemptions"] and history["preemptions"][0]["tag"] in ("route-10", "route-30")
        finishes = history["finishes"]
        assert sorted(f["tag"] for f in finishes) == ["route-10", "route-30"]
        assert all(f["tokens"] == 6 and f["ttft"] > 0 and f["tpot"] > 0 and f["reason"] == "length" for f in finishes)
        assert {o.num_cached_tokens for o in finished} == {0}

        viewer = loop.monitor.subscribe(lambda: None)
        first = loop.snapshot().result(10)
        assert first["frame"]["running"] == [] and first["history"]["finishes"] == finishes
        done.clear()
        finished.clear()
        for start in (10, 30):                                      # the same prompts: prefix-cache hits
            loop.submit(list(range(start, start + 8)), params, on_output)
        assert done.wait(30)
        assert loop.monitor.frames_built >= 1
        frame, events, _ = viewer.take()
        assert frame["running"] == [] and frame["pool"]["free"] == 6   # the last frame: the engine went idle
        assert sum(e["kind"] == "finish" for e in events) == 2
        assert {o.num_cached_tokens for o in finished} == {4}          # one full block of each prompt was cached
    finally:
        loop.stop()


# ---- over HTTP ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_server():
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model

    model, tokenizer = tiny_random_model()
    with start_server(model, tokenizer, model_name="tiny", num_blocks=64, max_num_seqs=4,
                      server_info={"quantization": None}) as server:
        yield server


def _view_messages(url: str, done, received: list, ready: threading.Event) -> None:
    """Read ``url``'s engine view into ``received`` until ``done(received)`` (or the server goes away)."""
    try:
        with httpx.stream("GET", f"{url}/engine/stream", timeout=30) as response:
            received.append({"type": "status", "status": response.status_code})
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(json.loads(line[6:]))
                    ready.set()
                    if done(received):
                        return
    except httpx.HTTPError as error:
        received.append({"type": "error", "error": repr(error)})


def test_the_stream_says_hello_then_sends_steps_with_the_clients_tags(tiny_server):
    received, ready = [], threading.Event()
    finished = lambda messages: any(e["kind"] == "finish" for m in messages for e in m.get("events", ()))  # noqa: E731
    viewer = threading.Thread(target=_view_messages, args=(tiny_server.url, finished, received, ready))
    viewer.start()
    assert ready.wait(10)
    httpx.post(f"{tiny_server.url}/v1/completions", headers={"X-Request-Id": "route-42"},
               json={"prompt": "Hello there", "max_tokens": 30, "ignore_eos": True}, timeout=30)
    viewer.join(30)
    assert received[0] == {"type": "status", "status": 200}
    hello, steps = received[1], received[2:]
    assert hello["type"] == "hello" and hello["frame"]["pool"]["num_blocks"] == 64
    assert all(m["type"] == "step" for m in steps)
    tags = {r["tag"] for m in steps if m["frame"] for r in m["frame"]["running"]}
    finishes = [e for m in steps for e in m["events"] if e["kind"] == "finish"]
    assert "route-42" in tags or [e["tag"] for e in finishes] == ["route-42"]


def test_the_openai_client_reads_the_prefix_cache_hits(tiny_server):
    client = openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Tell me about paged attention and block tables, please."}]
    cached = []
    for stream in (False, True, False):
        if stream:
            chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, stream=True,
                                                         stream_options={"include_usage": True}))
            usage = chunks[-1].usage
        else:
            usage = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3).usage
        cached.append(usage.prompt_tokens_details.cached_tokens)
        assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens
    assert cached[1] >= 16 and cached[2] >= 16    # the same prompt again: its full blocks come from the cache


def test_server_info_and_state_describe_what_runs(tiny_server):
    info = httpx.get(f"{tiny_server.url}/server_info").json()
    assert info["model"] == "tiny" and info["engine_view"] is True and info["quantization"] is None
    assert info["engine"]["num_blocks"] == 64 and info["engine"]["max_num_seqs"] == 4
    assert info["engine"]["speculative"] is None and info["admission"] == {"enabled": False}
    state = httpx.get(f"{tiny_server.url}/engine/state").json()
    assert state["kv_blocks_total"] == 64 and state["alive"] is True


def test_pages_are_served_with_a_policy_that_keeps_them_on_this_server(tiny_server):
    for path, marker in (("/", 'id="messages"'), ("/engine", 'id="replicas"')):
        page = httpx.get(tiny_server.url + path)
        assert page.status_code == 200 and marker in page.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "connect-src 'self'" in policy
        assert "http" not in page.text.replace("http-equiv", "")   # nothing loaded from any other address
    for name in ("chat.js", "engine.js", "sse.js", "style.css", "favicon.svg"):
        asset = httpx.get(f"{tiny_server.url}/static/{name}")
        text = asset.text.replace('xmlns="http://www.w3.org/2000/svg"', "")   # a namespace name, never fetched
        assert asset.status_code == 200 and "://" not in text, name


def test_too_many_viewers_get_429(tiny_server):
    from course_lib.server.app import MAX_ENGINE_VIEWERS

    with httpx.Client(timeout=10) as client:
        streams = [client.stream("GET", f"{tiny_server.url}/engine/stream") for _ in range(MAX_ENGINE_VIEWERS + 1)]
        responses = []
        try:
            for stream in streams:
                responses.append(stream.__enter__())
            statuses = [r.status_code for r in responses]
            assert statuses[:MAX_ENGINE_VIEWERS] == [200] * MAX_ENGINE_VIEWERS and statuses[-1] == 429
            assert responses[-1].headers["retry-after"] == "5"
        finally:
            for stream in streams[: len(responses)]:
                stream.__exit__(None, None, None)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and tiny_server.backend.monitor.num_viewers:
        time.sleep(0.05)
    assert tiny_server.backend.monitor.num_viewers == 0        # closed views unsubscribe


def test_a_stalled_viewer_neither_blocks_the_engine_nor_grows(tiny_server):
    monitor = tiny_server.backend.monitor
    with httpx.stream("GET", f"{tiny_server.url}/engine/stream", timeout=30):   # connected, never read
        deadline = time.monotonic() + 5
        while not monitor.num_viewers and time.monotonic() < deadline:
            time.sleep(0.02)
        start = time.monotonic()
        for _ in range(5):
            httpx.post(f"{tiny_server.url}/v1/completions", json={"prompt": "x y z", "max_tokens": 60,
                                                                   "ignore_eos": True}, timeout=30)
        assert time.monotonic() - start < 25
        viewer = monitor._subscribers[0]
        assert len(viewer.frames) <= monitor.max_frames and len(viewer.events) <= monitor.max_events


def test_a_router_merges_its_replicas_views_with_its_decisions():
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model
    from course_lib.server.router import start_router
    from course_lib.server.routing import RoundRobin

    model, tokenizer = tiny_random_model()
    with start_server(model, tokenizer, model_name="tiny", num_blocks=32) as first, \
            start_server(model, tokenizer, model_name="tiny", num_blocks=32) as second, \
            start_router([first.url, second.url], RoundRobin(2), tokenizer, policy_name="round-robin") as router:
        received, ready = [], threading.Event()

        def both_finished(messages) -> bool:
            return sum(m["type"] == "route-done" for m in messages) == 2 and 2 == sum(
                e["kind"] == "finish" for m in messages if m["type"] == "replica"
                for e in m["message"].get("events", ()))

        viewer = threading.Thread(target=_view_messages, args=(router.url, both_finished, received, ready))
        viewer.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(m["type"] == "replica" for m in received) < 2:
            time.sleep(0.05)
        answers = [httpx.post(f"{router.url}/v1/completions", json={"prompt": f"Question {i}", "max_tokens": 5},
                              timeout=30) for i in range(2)]
        assert [a.headers["x-course-replica"] for a in answers] == ["0", "1"]
        assert [a.headers["x-request-id"] for a in answers] == ["route-0", "route-1"]
        viewer.join(20)
        assert not viewer.is_alive()
        info = httpx.get(f"{router.url}/server_info").json()
        state = httpx.get(f"{router.url}/engine/state").json()
    received = received[1:]   # after the HTTP status
    assert received[0]["type"] == "router" and received[0]["policy"] == "round-robin"
    routes = [m for m in received if m["type"] == "route"]
    assert [(r["id"], r["replica"]) for r in routes] == [("route-0", 0), ("route-1", 1)]
    assert [m["status"] for m in received if m["type"] == "route-done"] == [200, 200]
    replica_messages = [m for m in received if m["type"] == "replica"]
    assert {m["replica"] for m in replica_messages if m["message"]["type"] == "hello"} == {0, 1}
    finishes = {(m["replica"], e["tag"]) for m in replica_messages if m["message"]["type"] == "step"
                for e in m["message"]["events"] if e["kind"] == "finish"}
    assert finishes == {(0, "route-0"), (1, "route-1")}         # each replica's view names the router's id
    assert info["router"]["policy"] == "round-robin" and len(info["replicas"]) == 2 and info["model"] == "tiny"
    assert state["kv_blocks_total"] == 64 and len(state["replicas"]) == 2


def test_a_server_started_with_int8_weights_and_drafts_says_so_and_counts_its_drafts():
    from course_lib.server.__main__ import build_parser
    from course_lib.server.serve import build_server

    args = build_parser().parse_args(["--port", "0", "--model", "tiny", "--num-blocks", "32", "--quantize", "int8",
                                      "--speculative", "ngram", "--num-draft-tokens", "3"])
    args.port = None
    server = build_server(args)
    try:
        info = httpx.get(f"{server.url}/server_info").json()
        assert info["quantization"] == "int8"
        assert info["engine"]["speculative"] == {"method": "ngram", "num_draft_tokens": 3}
        repeated = "one two three four " * 8   # prompt lookup finds drafts in a repetitive prompt
        answer = httpx.post(f"{server.url}/v1/completions", json={"prompt": repeated, "max_tokens": 24,
                                                                   "temperature": 0, "ignore_eos": True}, timeout=60)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 24
        frame = server.backend.snapshot().result(10)["frame"]
        assert frame["totals"]["generated_tokens"] == 24 and frame["totals"]["drafted_tokens"] >= 0
    finally:
        server.stop()


@pytest.mark.parametrize("options, message", [
    (["--replicas", "0"], "--replicas must be >= 1"),
    (["--max-num-seqs", "8", "--max-num-batched-tokens", "4"], "--max-num-batched-tokens (4) must be >= --max-num-seqs"),
    (["--num-blocks", "0"], "--num-blocks must be >= 1"),
])
def test_course_serve_names_the_bad_option(options, message, capsys):
    from course_lib import cli

    assert cli.main(["serve", *options]) == 2
    assert message in capsys.readouterr().err
