"""Checks for Lab 0.5 (serving): metrics from the wire, load generation, admission, routing, KV transfer.

Where a student's code talks to a server, the server is the check's own (``ScriptedServer``, or
the course's real server with a tiny model) and the measurement is made there, on the grader's
clock: the arrival times a load generator produced, the queue an admission policy let build up.
Pure functions are compared with the references on crafted inputs that separate the usual mistakes.

The kit ships this module, so it holds only the visible tests' cases (``crafted_streams``,
``admission_cases``, ...) and builders that say nothing without their arguments
(``timed_stream``, ``server_state``, ``random_kv_router_events(seed, ...)``): the graded tests'
further cases are written in the hidden regions of the solution notebooks' test cells.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time

from course_lib.checks import (
    call_student,
    check,
    expect_close,
    expect_equal,
    fail,
    hidden_check,
    make,
    register_reference_names,
    require_own_implementation,
    short_repr,
    student_url,
)
from course_lib.checks.fixtures import recorded_check, reference

__all__ = [
    "admission_cases", "ADMISSION_LIMITS", "chat_event", "check_admission_decision", "check_admission_live",
    "check_hash_ring", "check_histogram_quantile", "check_kv_load", "check_kv_router", "check_kv_router_live",
    "check_mean_in_flight", "check_open_loop", "check_pack_kv", "check_parse_stream", "check_poisson_arrivals",
    "check_prefix_key", "check_prefix_router", "check_request_metrics", "check_stranded_share",
    "check_transfer_in_engine", "check_unpack_kv", "completion_event", "crafted_streams", "kv_load_cases",
    "kv_router_scripts", "live_stream", "random_in_flight_records", "random_kv_router_events", "random_timeline",
    "replica_load", "replica_metrics_text", "server_state", "stranded_cases", "timed_stream", "usage_event",
]

register_reference_names("parse_stream", "request_metrics", "histogram_quantile", "poisson_arrival_times",
                         "open_loop", "mean_in_flight", "admission_policy", "prefix_key", "HashRing",
                         "PrefixAwareRouter", "pack_kv", "unpack_kv", "kv_load", "KVAwareRouter", "stranded_share")


def _wire():
    from course_lib import wire

    return wire


# =============================================================================================
# Chapter 1: metrics from the wire
# =============================================================================================


def _data(event) -> str:
    return "data: " + (event if isinstance(event, str) else json.dumps(event))


def completion_event(text: str, finish: str | None = None) -> dict:
    """One event of a streamed completion (/v1/completions): its text and finish_reason."""
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def chat_event(delta: dict, finish: str | None = None) -> dict:
    """One event of a streamed chat completion: its delta ({"role": ...}, {"content": ...} or {})."""
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage_event(tokens: int) -> dict:
    """The usage event a stream sends last (choices empty), for a 7-token prompt and ``tokens`` tokens."""
    return {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens}}


def timed_stream(events: list, start: float = 10.0, gap: float = 0.05) -> list[tuple[float, str]]:
    """Events -> timed lines, ``gap`` seconds apart: each event's 'data: <json>' line then a blank line.

    An event is a dict (sent as JSON), a string ('[DONE]'), or a 1-tuple holding a raw line that
    passes through as it is (a comment, 'data:' without a space, a blank line).
    """
    lines, clock = [], start
    for event in events:
        if isinstance(event, tuple):
            lines.append((clock, event[0]))
        else:
            lines.append((clock, _data(event)))
            lines.append((clock, ""))
        clock = round(clock + gap, 6)
    return lines


def crafted_streams() -> list[tuple[str, list]]:
    """(description, timed lines) pairs covering what real streams do: the visible test's streams."""
    text, chat, usage = completion_event, chat_event, usage_event
    return [
        ("completion: three text events, a finish event, usage, [DONE]",
         timed_stream([text(" The"), text(" sea"), text(" is"), text("", "length"), usage(3), "[DONE]"])),
        ("chat: a role-only first event (no token yet), then content",
         timed_stream([chat({"role": "assistant", "content": ""}), chat({"content": "Hi"}), chat({"content": " there"}),
                       chat({}, "stop"), usage(2), "[DONE]"], gap=0.2)),
        ("a keep-alive comment, 'data:' without a space, an event holding two tokens' text",
         timed_stream([(": keep-alive",), text(" A"), ("data:" + json.dumps(text(" big dog")),), ("",),
                       text("", "length"), usage(4), "[DONE]"])),
        ("no usage event, finish on the last text event", timed_stream([text("x"), text("y", "stop"), "[DONE]"])),
        ("events after [DONE] do not count", timed_stream([text("a"), usage(1), "[DONE]", text("late")])),
    ]


def _misread_streams(timed_lines) -> list[tuple[list, str]]:
    """The stream as two common misreadings of the protocol see it, each with the hint that names it.

    A parser with one of these bugs returns exactly the reference's result on the altered stream,
    which is how the check tells which bug it met. Only alterations that change the stream are listed.
    """
    variants = []
    spaced = [(t, line) for t, line in timed_lines if not (line.startswith("data:") and not line.startswith("data: "))]
    if len(spaced) != len(timed_lines):
        variants.append((spaced, "a line may be 'data:' followed directly by the JSON, without a space: it is an "
                                 "event all the same. Test line.startswith('data:') and strip what follows "
                                 "('data: ' with the space misses it)."))
    done_at = [index for index, (_, line) in enumerate(timed_lines) if line.replace(" ", "") == "data:[DONE]"]
    if done_at and any(line.startswith("data:") for _, line in timed_lines[done_at[0] + 1:] if line not in
                       ("data: [DONE]", "data:[DONE]")):
        moved = ([item for index, item in enumerate(timed_lines) if index not in done_at]
                 + [timed_lines[index] for index in done_at])
        variants.append((moved, "stop reading at 'data: [DONE]' (break out of the loop): the events after it do not "
                                "count, whatever they hold."))
    return variants


_STREAM_HINTS = {
    "chunk_times": "one time per event whose text (completions) or delta content (chat) is non-empty: "
                   "the role-only chat event and the empty finish event carry no token.",
    "num_output_tokens": "take usage['completion_tokens'] from the event that has a usage; its choices list "
                         "is empty.",
    "done": "the stream ends at the line 'data: [DONE]'; nothing after it counts.",
}
_NOT_JSON_HINT = ("json.loads was given something that is not JSON: take what follows 'data:' with the spaces "
                  "stripped (there may be none), and skip blank lines and comments (lines that start with ':').")


@recorded_check
def check_parse_stream(parse_stream, timed_lines, description: str = "") -> None:
    """Compare a student's ``parse_stream`` with the reference on one stream.

    Where a field differs, the hint names the bug when the student's value is what a known
    misreading of the protocol returns (``_misread_streams``), and says what the field holds otherwise.
    """
    require_own_implementation(parse_stream, "parse_stream")
    got = call_student(parse_stream, "parse_stream", timed_lines, show_args=False, hints={ValueError: _NOT_JSON_HINT})
    reference_parse = reference(_wire().parse_stream)
    expected = reference_parse(timed_lines)
    misread = [(reference_parse(variant), hint) for variant, hint in _misread_streams(timed_lines)]
    check(isinstance(got, dict), f"parse_stream should return a dict, got {type(got).__name__}")
    for key in ("chunk_times", "text", "num_output_tokens", "finish_reason", "done"):
        hint = next((hint for result, hint in misread if got.get(key) == result[key] != expected[key]),
                    _STREAM_HINTS.get(key))
        expect_equal(got.get(key), expected[key], f"parse_stream[{key!r}] for the stream: {description}", hint=hint)


@recorded_check
def live_stream(kind: str = "completion", num_tokens: int = 6) -> list:
    """Timed lines of a real stream from a scripted server, received here (on the check's clock)."""
    import httpx

    from course_lib.server.scripted import ScriptedServer

    with ScriptedServer(num_tokens=num_tokens, gap_s=0.02) as server:
        lines = []
        body = {"prompt": "hi", "max_tokens": num_tokens, "stream": True}
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=10) as response:
            for line in response.iter_lines():
                lines.append((time.perf_counter(), line))
    return lines


@recorded_check
def check_request_metrics(request_metrics, sent_at: float, parsed: dict, description: str = "") -> None:
    """Compare a student's ``request_metrics`` with the reference on one parsed stream."""
    require_own_implementation(request_metrics, "request_metrics")
    got = call_student(request_metrics, "request_metrics", sent_at, parsed, show_args=False)
    expected = reference(_wire().request_metrics)(sent_at, parsed)
    check(isinstance(got, dict), f"request_metrics should return a dict, got {type(got).__name__}")
    hints = {"ttft": "TTFT runs from sending to the first event that carried text.",
             "tpot": "TPOT = (last chunk - first chunk) / (num_output_tokens - 1): the gaps *after* the first token, "
                     "counted from the token count (one chunk may carry several tokens); None below 2 tokens.",
             "e2e": "end-to-end runs from sending to the last event that carried text."}
    for key in ("ttft", "tpot", "e2e"):
        if expected[key] is None:
            expect_equal(got.get(key), None, f"request_metrics[{key!r}] ({description})", hint=hints[key])
        else:
            expect_close(got.get(key), expected[key], f"request_metrics[{key!r}] ({description})", rel=1e-9,
                         abs_=1e-12, hint=hints[key])


@recorded_check
def check_histogram_quantile(histogram_quantile, q: float, buckets, description: str = "") -> None:
    """Compare a student's ``histogram_quantile`` with Prometheus's estimate (the reference)."""
    require_own_implementation(histogram_quantile, "histogram_quantile")
    buckets = [(float(le), float(count)) for le, count in buckets]
    got = call_student(histogram_quantile, "histogram_quantile", q, buckets)
    expected = reference(_wire().histogram_quantile)(q, buckets)
    if math.isnan(expected):
        check(isinstance(got, float) and math.isnan(got), f"histogram_quantile({q}, {description}) should be nan "
              f"(no observations), got {got!r}")
        return
    expect_close(got, expected, f"histogram_quantile({q}, {description})", rel=1e-9, abs_=1e-12,
                 hint="rank = q * total; in the first bucket with count >= rank that holds an observation, "
                      "interpolate linearly from the previous bucket's le (0 for the first) to this le (so q = 0 "
                      "gives the lower bound of the first non-empty bucket); in the +Inf bucket, answer the "
                      "largest finite le.")


# =============================================================================================
# Chapter 2: load
# =============================================================================================


@recorded_check
def check_poisson_arrivals(poisson_arrival_times) -> None:
    """Statistical checks of a Poisson arrival process (measured on many seeds).

    Every failure says what was expected, what came back and a hint; the exact arrivals of seed 1
    are compared with the reference's before the statistics, so a wrong formula is named there.
    """
    from statistics import mean, pvariance

    require_own_implementation(poisson_arrival_times, "poisson_arrival_times")
    call = "poisson_arrival_times(5.0, 20.0, seed=1)"
    first = call_student(poisson_arrival_times, "poisson_arrival_times", 5.0, 20.0, 1)
    again = call_student(poisson_arrival_times, "poisson_arrival_times", 5.0, 20.0, 1)
    if not (isinstance(first, list) and all(isinstance(t, float) for t in first)):
        fail(f"{call} should return a list of floats", expected="a list of floats, e.g. [0.035, 0.379, ...]",
             got=first if not isinstance(first, list) else [type(t).__name__ for t in first[:5]],
             hint="build a list and append each arrival time (a float: rng.expovariate returns one); do not return a "
                  "generator, a numpy array or whole seconds.")
    expect_equal(again, first, f"{call} called twice: the same seed should give the same arrivals",
                 hint="make one random.Random(seed) inside the function and draw from it; the module-level "
                      "random.expovariate shares one generator with everything else.")
    outside = [t for t in first if not 0 <= t < 20.0]
    if outside:
        fail(f"{call}: every arrival should lie in [0, duration_s) = [0, 20)", expected="arrivals < 20.0",
             got=outside[:3], hint="stop at the first arrival >= duration_s, and do not keep it.")
    backwards = next((i for i in range(1, len(first)) if first[i] < first[i - 1]), None)
    if backwards is not None:
        fail(f"{call}: arrival times should increase", expected=f"arrival {backwards} >= {first[backwards - 1]}",
             got=first[backwards - 1:backwards + 1],
             hint="each arrival is the previous arrival + a gap (rng.expovariate(rate_per_s)), not a fresh draw.")
    if not first or first[0] <= 0:
        fail(f"{call}: the first arrival should be the first gap after 0, not 0 itself",
             expected="a first arrival > 0 (the first rng.expovariate(5.0) draw)", got=first[:3],
             hint="start the clock at the first draw, clock = rng.expovariate(rate_per_s), not at 0: a process that "
                  "starts at 0 puts an arrival at 0.0 in every run, which no Poisson process does.")
    expected = reference(_loadtest().poisson_arrival_times)(5.0, 20.0, 1)
    if first != expected:
        where = next((i for i, (a, b) in enumerate(zip(first, expected)) if a != b), min(len(first), len(expected)))
        fail(f"{call} should be the running sums of random.Random(1).expovariate(5.0) draws; they differ from "
             f"arrival {where} on",
             expected=expected[where:where + 3], got=first[where:where + 3],
             hint="one Random(seed) for the whole call; each arrival = the previous one + rng.expovariate(rate_per_s); "
                  "stop at the first arrival >= duration_s (do not keep it).")
    counts, gaps = [], []
    for seed in range(200):
        counts.append(len(call_student(poisson_arrival_times, "poisson_arrival_times", 4.0, 5.0, seed)))
    # Gaps from long windows: inside a short window the gaps that fit are biased short.
    for seed in range(20):
        times = call_student(poisson_arrival_times, "poisson_arrival_times", 4.0, 100.0, 1000 + seed)
        gaps += [b - a for a, b in zip(times, times[1:])]
    # Poisson: the count has mean = variance = rate * duration = 20; gaps are exponential with mean 1/4.
    expect_close(mean(counts), 20.0, "mean number of arrivals over 200 seeds (rate 4/s, 5 s)", rel=0.08,
                 hint="draw gaps with mean 1/rate until the clock passes duration_s.")
    if not pvariance(counts) > 10.0:
        fail("the number of arrivals in 5 s at 4/s, over 200 seeds, should vary like a Poisson count",
             expected="a variance of about 20 (Poisson: equal to the mean)", got=f"variance {pvariance(counts):.2f}",
             hint="do not fix the count at rate * duration: keep drawing gaps until the time runs out.")
    expect_close(mean(gaps), 0.25, "mean gap between arrivals (rate 4/s)", rel=0.05,
                 hint="the gaps are rng.expovariate(rate_per_s) draws, whose mean is 1 / rate_per_s (expovariate takes "
                      "the rate, not the mean gap).")
    spread = pvariance(gaps) ** 0.5
    expect_close(spread, 0.25, "standard deviation of the gaps (exponential: equal to the mean)", rel=0.12,
                 hint="gaps must be random exponential draws, not evenly spaced.")
    short = sum(1 for g in gaps if g < 0.25 * math.log(2)) / len(gaps)
    expect_close(short, 0.5, "share of gaps shorter than the median ln(2)/rate", abs_=0.04,
                 hint="exponential gaps: half of them are shorter than ln(2) / rate; draw each gap with "
                      "rng.expovariate(rate_per_s), not from another distribution.")
    for rate, duration in ((0.0, 1.0), (1.0, 0.0), (-2.0, 3.0)):
        what = f"poisson_arrival_times({rate}, {duration}, 0)"
        hint = "check both arguments first: if not rate_per_s > 0 or not duration_s > 0: raise ValueError(...)"
        try:
            result = poisson_arrival_times(rate, duration, 0)
        except ValueError:
            continue
        except Exception as error:  # noqa: BLE001
            fail(f"{what} should raise ValueError", expected="ValueError", got=f"{type(error).__name__} raised",
                 hint=hint)
        fail(f"{what} should raise ValueError", expected="ValueError", got=f"returned {short_repr(result)}", hint=hint)


@recorded_check
def check_open_loop(open_loop, gap_s: float = 0.15, num_requests: int = 8, service_s: float = 0.6) -> None:
    """Run the student's generator against a scripted server; judge it by the arrivals the server saw.

    Requests are scheduled ``gap_s`` apart; the even ones ask for 6 tokens (``service_s`` to stream),
    the odd ones for 1 (0.1 s), so answers finish in another order than they were sent. An
    open-loop generator lands the requests ``gap_s`` apart; one that waits for answers drifts by a
    long answer each time, and one that ignores the schedule lands them all at once. The records
    must come back in schedule order, whatever order the answers finished in.
    """
    from course_lib import loadtest
    from course_lib.server.scripted import ScriptedServer

    require_own_implementation(open_loop, "open_loop")
    long_tokens, first_delay = 6, 0.1
    tokens = [long_tokens if i % 2 == 0 else 1 for i in range(num_requests)]
    schedule = [{"at": round(0.5 + gap_s * i, 6), "prompt": f"p{i}", "max_tokens": tokens[i]}
                for i in range(num_requests)]
    took_at_least = [first_delay + (service_s - first_delay) * (n - 1) / (long_tokens - 1) for n in tokens]
    scripted = ScriptedServer(num_tokens=long_tokens, first_delay_s=first_delay,
                              gap_s=(service_s - first_delay) / (long_tokens - 1))
    runner = make(loadtest.BlockingRunner, open_loop)
    with scripted as server:
        records = call_student(runner, "open_loop (run to completion)", student_url(server.url), schedule,
                               show_args=False)
    arrivals = sorted(scripted.arrivals)
    expect_equal(len(arrivals), num_requests, "requests the server received",
                 hint="send every request of the schedule exactly once.")
    # Each request's lag (arrival on the server's clock - its scheduled time) is the same for an open
    # loop, up to the noise of a busy machine; a closed loop's lags grow by a long answer every other
    # request, and sending everything at once spreads them over the whole schedule (1 s or more). The
    # 0.5 s allowed leaves room for a busy grading machine.
    lags = [arrival - item["at"] for arrival, item in zip(arrivals, schedule)]
    if max(lags) - min(lags) > 0.5:
        fail("the server saw the requests arrive off schedule (seconds after the first request arrived, on the "
             "server's clock, against the schedule's seconds after its first request)",
             expected=[round(item["at"] - schedule[0]["at"], 3) for item in schedule],
             got=[round(arrival - arrivals[0], 3) for arrival in arrivals],
             hint="each request must leave at its own time, from its own task: awaiting one answer before "
                  "sending the next is a closed loop, and the schedule slips by a whole answer each time; "
                  "sending everything at once ignores the schedule.")
    check(isinstance(records, list) and len(records) == num_requests,
          f"open_loop should return one record per scheduled request ({num_requests})")
    order = [record.get("scheduled_at") if isinstance(record, dict) else None for record in records]
    expect_equal(order, [item["at"] for item in schedule], "the records' scheduled_at, in the order open_loop "
                 "returned them (the odd requests' short answers finish before the even ones')",
                 hint="return the records in schedule order (record i is schedule[i]'s, with its 'at' as "
                      "'scheduled_at'), not in the order the answers finished: asyncio.gather keeps the order of "
                      "its arguments.")
    for index, record in enumerate(records):
        check(record.get("status") == 200, f"record {index} should be a completed request's record (status 200), "
              f"got status {record.get('status')!r}")
        expect_equal(len(record.get("chunk_times", [])), tokens[index], f"record {index}: text events received")
        # The server spends this long on the answer, so no true record is shorter; a busy machine can
        # only make it longer.
        took = record["chunk_times"][-1] - record["sent_at"]
        check(took_at_least[index] - 0.05 <= took <= took_at_least[index] + 5.0,
              f"record {index}: {took:.3f} s from sending to the last chunk, but the server took "
              f"{took_at_least[index]:.2f} s to stream that answer",
              hint="record the times stream_request gives you; do not make them up.")


def random_in_flight_records(seed: int, count: int = 12) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        sent = rng.uniform(0, 5)
        records.append({"sent_at": sent, "done_at": sent + rng.uniform(0.05, 3)})
    return records


def _in_flight_misreadings(records, start: float, end: float) -> list[tuple[float, str]]:
    """What three common mistakes return on these records, each with the hint that names it.

    Computed from the records with the mistake built in (none of them is the answer), so a student
    value equal to one of them points at that mistake.
    """
    span = end - start
    return [
        (sum(max(0.0, min(r["done_at"], end) - r["sent_at"]) for r in records) / span,
         "a request sent before the window starts counts only from start: clip its sent_at too, "
         "max(sent_at, start), not only its done_at."),
        (sum(max(0.0, r["done_at"] - max(r["sent_at"], start)) for r in records) / span,
         "a request still in flight at the window's end counts only up to end: clip its done_at, min(done_at, end)."),
        (sum(min(r["done_at"], end) - max(r["sent_at"], start) for r in records) / span,
         "a request entirely outside the window overlaps it for 0 s, not a negative time: max(0.0, overlap)."),
    ]


@recorded_check
def check_mean_in_flight(mean_in_flight, records, start: float, end: float) -> None:
    require_own_implementation(mean_in_flight, "mean_in_flight")
    got = call_student(mean_in_flight, "mean_in_flight", records, start, end, show_args=False)
    expected = reference(_loadtest().mean_in_flight)(records, start, end)
    hint = "add up how long each request overlaps [start, end] (clip its [sent_at, done_at]), then divide by end - start."
    try:
        hint = next(h for value, h in _in_flight_misreadings(records, start, end)
                    if math.isclose(float(got), value, rel_tol=1e-9, abs_tol=1e-12)
                    and not math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-12))
    except (StopIteration, TypeError, ValueError):
        pass
    shown = "" if hidden_check() else f" ({[(r['sent_at'], r['done_at']) for r in records]})"
    expect_close(got, expected, f"mean_in_flight over [{start}, {end}] of {len(records)} records{shown}", rel=1e-9,
                 abs_=1e-12, hint=hint)


def _loadtest():
    from course_lib import loadtest

    return loadtest


# =============================================================================================
# Chapter 3: admission
# =============================================================================================


def server_state(**fields) -> dict:
    """The state ``admission_policy`` is given: an idle server (128 blocks of 16 tokens, a context of
    2048), with ``fields`` changed."""
    state = dict(num_waiting=0, num_running=0, kv_blocks_total=128, kv_blocks_used=0, waiting_blocks=0,
                 running_blocks=0, block_size=16, max_model_len=2048, num_preemptions=0, num_prompt_tokens=0,
                 num_prefix_cached_tokens=0)
    state.update(fields)
    return state


ADMISSION_LIMITS = {"max_waiting": 4, "kv_budget_blocks": 100, "retry_after_s": 3}
"""The limits of most admission cases: a queue of 4, a KV budget of 100 blocks, retry after 3 s."""


def admission_cases() -> list[tuple[str, dict, dict, dict]]:
    """(description, request, state, limits) cases of the visible test, separating the rules and their order.

    One case per rule, the chapter's worked example (waiting requests hold the budget), both places
    where a partial block must round up, and the rules' order (a request that can never run is a 400
    even when the queue is full). The graded test's further cases are in its hidden region.
    """
    limits = ADMISSION_LIMITS
    small = {"num_prompt_tokens": 40, "max_tokens": 24}  # 64 tokens = 4 blocks
    odd = {"num_prompt_tokens": 41, "max_tokens": 24}  # 65 tokens = 5 blocks (4 if rounded down)
    return [
        ("an idle server", small, server_state(), limits),
        ("longer than the context", {"num_prompt_tokens": 2000, "max_tokens": 100}, server_state(), limits),
        ("more blocks than the whole KV budget", {"num_prompt_tokens": 1000, "max_tokens": 700}, server_state(),
         limits),
        ("1,601 tokens on an idle server: a partial last block takes a whole block, so 101 blocks > the budget "
         "of 100", {"num_prompt_tokens": 1000, "max_tokens": 601}, server_state(), limits),
        ("the queue is at its bound", small, server_state(num_waiting=4, waiting_blocks=16), limits),
        ("the chapter's worked example: 3 waiting requests promised 90 blocks, 1 running 8, this one needs 4",
         small, server_state(num_waiting=3, waiting_blocks=90, num_running=1, running_blocks=8), limits),
        ("65 tokens need 5 blocks (a partial block counts), 96 are promised: 101 > 100",
         odd, server_state(num_running=4, running_blocks=60, num_waiting=2, waiting_blocks=36), limits),
        ("running requests hold most of the budget", small, server_state(num_running=8, running_blocks=97), limits),
        ("a full queue and a request longer than the context: the 400 rules come first",
         {"num_prompt_tokens": 3000, "max_tokens": 10}, server_state(num_waiting=4, waiting_blocks=16), limits),
    ]


@recorded_check
def check_admission_decision(admission_policy, request: dict, state: dict, limits: dict, description: str = "") -> None:
    """One decision of the student's policy against the reference's."""
    from course_lib.server.admission import admission_policy as reference_policy

    require_own_implementation(admission_policy, "admission_policy")
    got = call_student(admission_policy, "admission_policy", request, state, limits)
    expected = reference(reference_policy)(request, state, limits)
    check(isinstance(got, dict) and "status" in got, f"admission_policy should return a dict with 'status', got {got!r}")
    rounding = (" need = ceil((num_prompt_tokens + max_tokens) / block_size): a partial last block takes a whole "
                "block (-(-tokens // block_size) rounds up; // alone rounds down).")
    hint = {200: "admit when no rule refuses;" + rounding,
            400: "a request that could never run (context, or more blocks than the whole budget) is a 400, "
                 "whatever the load: retrying cannot help;" + rounding,
            429: "count the blocks promised to *every* admitted request, state['waiting_blocks'] + "
                 "state['running_blocks'], plus this one's, and the waiting queue against max_waiting;"
                 + rounding}[expected["status"]]
    if expected["status"] == 400 and got["status"] == 429:
        hint = ("the 400 rules come first: a request that could never run here is a 400 even when the server is full "
                "now. Checking the queue or the budget first answers 429, and the client retries, forever, a request "
                "that can never succeed.")
    expect_equal(got["status"], expected["status"], f"status for: {description}", hint=hint)
    if expected["status"] != 200:
        check(isinstance(got.get("message"), str) and got["message"],
              f"a {expected['status']} needs a 'message' naming the limit ({description})")
    if expected["status"] == 429:
        expect_equal(got.get("retry_after_s"), expected["retry_after_s"], f"retry_after_s for: {description}",
                     hint="a 429 carries limits['retry_after_s'] (it becomes the Retry-After header).")


@recorded_check
def check_admission_live(admission_policy, burst: int = 16, max_waiting: int = 3, budget: int = 24) -> None:
    """The student's policy inside the course's real server (tiny model); a burst arrives at once.

    Measured in the server, while the burst runs: the waiting queue never exceeds max_waiting and
    the blocks promised to admitted requests never exceed the budget; some requests get 429 with
    Retry-After, and the server still admits as many as fit.
    """
    from course_lib import loadtest
    from course_lib.server.admission import AdmissionLimits
    from course_lib.server.launch import start_server

    require_own_implementation(admission_policy, "admission_policy")
    model, tokenizer = _tiny()
    limits = AdmissionLimits(max_waiting=max_waiting, kv_budget_blocks=budget, retry_after_s=2)
    peaks = {"waiting": 0, "promised": 0}
    with start_server(model, tokenizer, model_name="tiny", admission=admission_policy, limits=limits,
                      num_blocks=64, max_num_seqs=2, max_num_batched_tokens=128) as server:
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                state = server.backend.state()
                peaks["waiting"] = max(peaks["waiting"], state.num_waiting)
                peaks["promised"] = max(peaks["promised"], state.waiting_blocks + state.running_blocks)
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # 8 prompt tokens or so + 40 = 3 blocks each: the budget of 24 blocks holds 8 requests.
        records = loadtest.burst(server.url, [f"Burst request {i}" for i in range(burst)], max_tokens=40)
        done.set()
        watcher.join()
    statuses = [r["status"] for r in records]
    check(peaks["waiting"] <= max_waiting, f"the server's waiting queue reached {peaks['waiting']} requests with "
          f"max_waiting={max_waiting}", hint="refuse (429) when num_waiting >= max_waiting.")
    check(peaks["promised"] <= budget, f"admitted requests were promised {peaks['promised']} KV blocks with a budget "
          f"of {budget}", hint="add the blocks of waiting *and* running requests, and this request's, before admitting.")
    refused = [r for r in records if r["status"] == 429]
    check(refused, f"a burst of {burst} requests into a server that holds about {max_waiting + 2} got no 429 "
          f"(statuses: {statuses})")
    check(all(r["retry_after"] == 2 for r in refused), "every 429 should carry Retry-After: 2 (limits.retry_after_s)")
    admitted = statuses.count(200)
    # However the burst interleaves with the engine, the first max_waiting requests find room.
    at_least = max(1, min(max_waiting, budget // 3))
    check(admitted >= at_least, f"only {admitted} of {burst} requests were admitted; an empty server with "
          f"max_waiting={max_waiting} and a budget of {budget} blocks has room for at least {at_least}",
          hint="admit while no limit is reached: refuse only when num_waiting >= max_waiting.")
    check(all(s in (200, 429) for s in statuses), f"unexpected statuses: {sorted(set(statuses))}")


_TINY: list = []


def _tiny():
    if not _TINY:
        from course_lib.server.models import tiny_random_model

        _TINY.append(tiny_random_model())
    return _TINY[0]


# =============================================================================================
# Chapter 4: routing
# =============================================================================================


def _routing():
    from course_lib.server import routing

    return routing


def _prompts_sharing(prefix_len: int, tails: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(49152) for _ in range(prefix_len)]
    return [prefix + [rng.randrange(49152) for _ in range(rng.randrange(1, 40))] for _ in range(tails)]


@recorded_check
def check_prefix_key(prefix_key) -> None:
    require_own_implementation(prefix_key, "prefix_key")
    ref = reference(_routing().prefix_key)
    rng = random.Random(5)
    cases = [("shorter than one block", list(range(10)), 16, 4),
             ("exactly one block", list(range(16)), 16, 4),
             ("one full block and a partial one", list(range(30)), 16, 4),
             ("longer than max_blocks", [rng.randrange(49152) for _ in range(200)], 16, 4),
             ("block size 4, two blocks max", [rng.randrange(49152) for _ in range(11)], 4, 2)]
    for description, tokens, block_size, max_blocks in cases:
        got = call_student(prefix_key, "prefix_key", tokens, block_size, max_blocks, show_args=False)
        expect_equal(got, ref(tokens, block_size, max_blocks), f"prefix_key for a prompt {description}",
                     hint="hash token_bytes of the first min(max_blocks, full blocks) blocks with stable_hash; "
                          "None without a full block.")
    same = _prompts_sharing(64, 5, 1)
    keys = {call_student(prefix_key, "prefix_key", p, 16, 4, show_args=False) for p in same}
    check(len(keys) == 1, "five prompts sharing their first 64 tokens (4 blocks) should share one key",
          hint="hash only the leading blocks, never the whole prompt: the question after a shared system prompt "
               "must not change the replica.")


@recorded_check
def check_hash_ring(HashRing, virtual_nodes: int = 16) -> None:
    require_own_implementation(HashRing, "HashRing")
    ref_ring = reference(_routing().HashRing)([0, 1, 2], virtual_nodes)
    ring = call_student(HashRing, "HashRing", [0, 1, 2], virtual_nodes)
    stable_hash = _routing().stable_hash  # platform code, not an answer
    for replica in (0, 1, 2):
        for index in range(min(virtual_nodes, 6)):
            key = stable_hash(f"{replica}#{index}".encode())
            expect_equal(call_student(ring.walk, "walk", key), ref_ring.walk(key),
                         f"HashRing([0, 1, 2]).walk({key}): the key is exactly a position of replica {replica} "
                         f"(virtual node {index})",
                         hint="the walk starts at the first position >= key, so a key equal to a position belongs "
                              f"to that position's replica ({replica}): bisect_left, not bisect_right (or >=, not >).")
    rng = random.Random(3)
    keys = [rng.randrange(2 ** 64) for _ in range(40)] + [0, 2 ** 64 - 1]
    for key in keys:
        expect_equal(call_student(ring.walk, "walk", key), ref_ring.walk(key), f"HashRing([0, 1, 2]).walk({key})",
                     hint="positions stable_hash(f'{replica}#{i}'.encode()); start at the first position >= key, "
                          "wrap around, list each replica once.")
    before = {key: ring.walk(key)[0] for key in keys}
    call_student(ring.add, "add", 3)
    ref_ring.add(3)
    moved = [key for key in keys if ring.walk(key)[0] != before[key]]
    check(all(ring.walk(key)[0] == 3 for key in moved), "after add(3), keys that changed replica should all move to 3",
          hint="consistent hashing: a new replica only takes keys, it never shuffles the others.")
    for key in keys[:10]:
        expect_equal(ring.walk(key), ref_ring.walk(key), f"walk({key}) after add(3)")
    call_student(ring.remove, "remove", 1)
    ref_ring.remove(1)
    for key in keys[:10]:
        expect_equal(ring.walk(key), ref_ring.walk(key), f"walk({key}) after remove(1)")


@recorded_check
def check_prefix_router(PrefixAwareRouter, num_replicas: int = 3, load_factor: float = 1.25, seed: int = 0) -> None:
    """Decisions of the student's router on a workload with shared prefixes, against the reference."""
    require_own_implementation(PrefixAwareRouter, "PrefixAwareRouter")
    options = dict(block_size=16, max_blocks=4, load_factor=load_factor, virtual_nodes=32)
    router = call_student(PrefixAwareRouter, "PrefixAwareRouter", num_replicas, **options)
    ref_router = reference(_routing().PrefixAwareRouter)(num_replicas, **options)
    # What the feedback shows of each decision: the prompt's key and the ring's walk from it.
    ref_key = reference(_routing().prefix_key)
    ref_ring = reference(_routing().HashRing)(range(num_replicas), options["virtual_nodes"])
    rng = random.Random(seed)
    families = [_prompts_sharing(80, 6, seed * 10 + f) for f in range(4)]
    outstanding = [0] * num_replicas
    in_flight: list[int] = []
    for step in range(40):
        prompt = rng.choice(families)[rng.randrange(6)] if step % 7 else [1, 2, 3]  # every 7th: no full block
        got = call_student(router.choose, "choose", prompt, list(outstanding), show_args=False)
        expected = ref_router.choose(prompt, list(outstanding))
        key = ref_key(prompt, options["block_size"], options["max_blocks"])
        cap = math.ceil(load_factor * (sum(outstanding) + 1) / num_replicas)
        if key is None:
            situation = (f"step {step}: a {len(prompt)}-token prompt (no full block, so no key), outstanding "
                         f"{outstanding}")
        else:
            situation = (f"step {step}: the prompt's key is {key:#018x}, the ring walks {ref_ring.walk(key)} from "
                         f"it, the cap is ceil({load_factor} x ({sum(outstanding)} + 1) / {num_replicas}) = {cap}, "
                         f"outstanding {outstanding}")
        check(isinstance(got, int) and 0 <= got < num_replicas, f"{situation}: choose returned {got!r}, not a "
              f"replica index")
        check(outstanding[got] < cap, f"{situation}: replica {got} already holds {outstanding[got]} requests, at or "
              f"over the cap", hint="walk the ring past replicas at or over the cap.")
        expect_equal(got, expected, f"{situation}: the replica chosen",
                     hint="key -> ring.walk(key) -> the first replica whose outstanding < cap; no key: the "
                          "least-loaded replica (ties: the lowest index).")
        outstanding[got] += 1
        in_flight.append(got)
        if rng.random() < 0.5 and in_flight:  # some requests finish
            outstanding[in_flight.pop(rng.randrange(len(in_flight)))] -= 1


# =============================================================================================
# Chapter 5: KV transfer
# =============================================================================================


def _random_pool(seed: int, num_blocks: int = 12, block_size: int = 4):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn((3, 2, num_blocks, block_size, 2, 5), generator=generator)


@recorded_check
def check_pack_kv(pack_kv, seed: int, block_table, num_tokens: int) -> None:
    import torch

    require_own_implementation(pack_kv, "pack_kv")
    storage = _random_pool(seed)
    got = call_student(pack_kv, "pack_kv", storage, list(block_table), num_tokens, show_args=False)
    from course_lib.kv_transfer import pack_kv as reference_pack

    expected = reference(reference_pack)(storage, list(block_table), num_tokens)
    check(torch.is_tensor(got), f"pack_kv should return a tensor, got {type(got).__name__}")
    expect_equal(tuple(got.shape), tuple(expected.shape), f"pack_kv(table={list(block_table)}, num_tokens={num_tokens}).shape",
                 hint="[num_layers, 2, num_tokens, num_kv_heads, head_dim]: only the tokens, not the empty tail of the last block.")
    check(torch.equal(got, expected), f"pack_kv(table={list(block_table)}, num_tokens={num_tokens}) holds the wrong values",
          hint="token p is storage[:, :, block_table[p // block_size], p % block_size]; keep the table's order.")


@recorded_check
def check_unpack_kv(unpack_kv, seed: int, block_table, num_tokens: int) -> None:
    import torch

    from course_lib.kv_transfer import pack_kv as reference_pack
    from course_lib.kv_transfer import unpack_kv as reference_unpack

    require_own_implementation(unpack_kv, "unpack_kv")
    payload = reference(reference_pack)(_random_pool(seed + 100), list(range(len(block_table))), num_tokens)
    receiver = _random_pool(seed)
    expected = reference(reference_unpack)(payload, receiver.clone(), list(block_table))
    before = receiver.clone()
    # The receiver's own tensor, not a copy: the engine keeps reading the pool it passed in.
    got = call_student(unpack_kv, "unpack_kv", payload, receiver, list(block_table), copy_args=False, show_args=False)
    call = f"unpack_kv(payload, storage, table={list(block_table)}) with {num_tokens} tokens"
    check(torch.is_tensor(got), f"{call} should return the storage tensor it wrote into, got {type(got).__name__}")
    if torch.equal(receiver, before):
        copied = tuple(got.shape) == tuple(receiver.shape) and torch.equal(got, expected)
        fail(f"{call} left storage unchanged" + (": it returned the right pool, but in a copy" if copied else ""),
             expected="storage written in place (and returned)", got="storage exactly as it was before the call",
             hint="the engine keeps using the storage tensor it passed you and never looks at a new one: write into "
                  "storage itself (storage[:, :, blocks, offsets] = payload), not into storage.clone(), and return it.")
    check(torch.equal(receiver, expected), f"after {call} the pool differs from the expected one",
          hint="write token p at storage[:, :, block_table[p // block_size], p % block_size] and leave every other "
               "slot alone (other requests live there).")


def _scramble_free_blocks(allocator) -> None:
    """Take and free most of the pool, so the next request's blocks are neither 0, 1, 2... nor in order."""
    allocator.allocate("scramble", list(range(26 * allocator.block_size)))
    allocator.free("scramble")


@recorded_check
def check_transfer_in_engine(pack_kv, unpack_kv, max_tokens: int = 8) -> None:
    """Prefill in one engine, ship with the student's functions, decode in another: same tokens as one engine.

    The functions are first sent the way the chapter's experiment sends them to its worker
    processes (``course_lib.server.shipping``: rebuilt in a fresh namespace from the source of the
    cell that defines them and of what they read from the rest of the notebook), so one that
    cannot run there fails here, with the reason, not in the experiment. Both engines run in this process with the
    tiny model; the importing engine gets the payload only through ``unpack_kv``, so wrong KV
    changes the continuation.
    """
    import torch

    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams
    from course_lib.server.disaggregated import _ExportingAllocator, _ImportingAllocator
    from course_lib.server.shipping import MissingName, shipped_copy

    require_own_implementation(pack_kv, "pack_kv")
    require_own_implementation(unpack_kv, "unpack_kv")
    ship_hint = ("the experiment sends each function to its worker process as source: the definitions of its cell and "
                 "what it reads from the rest of the notebook (functions, classes, imports, values that can be "
                 "copied). Pass anything else it needs as an argument, or compute it inside the function.")
    pack_kv = call_student(make, "sending pack_kv to a worker process", shipped_copy, pack_kv, copy_args=False,
                           show_args=False, hints={Exception: ship_hint})
    unpack_kv = call_student(make, "sending unpack_kv to a worker process", shipped_copy, unpack_kv, copy_args=False,
                             show_args=False, hints={Exception: ship_hint})
    model, tokenizer = _tiny()
    prompt = tokenizer.encode("Shipping the KV cache between two engines, one block at a time. " * 2)
    prompt = prompt[: len(prompt) - 1] if len(prompt) % 4 == 0 else prompt  # a partial last block
    greedy = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    colocated = LLMEngine(model, tokenizer, num_blocks=32, block_size=4).generate([prompt], greedy)[0].token_ids

    def student_pack(*args):
        return call_student(pack_kv, "pack_kv", *args, copy_args=False, show_args=False, hints={MissingName: ship_hint})

    prefill = LLMEngine(model, tokenizer, allocator=_ExportingAllocator(32, 4, pack=student_pack))
    _scramble_free_blocks(prefill.allocator)
    prefill.allocator.kv_cache = prefill.kv_cache
    prefill.allocator.num_tokens["x"] = len(prompt)
    prefill.add_request(prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), request_id="x")
    first_token = None
    while prefill.has_unfinished():
        for output in prefill.step():
            first_token = output.new_token_ids[0] if output.new_token_ids else first_token
    payload, _ = prefill.allocator.exported["x"]
    expect_equal(first_token, colocated[0], "the prefill engine's first token")
    expect_equal(tuple(payload.shape), (model.config.num_layers, 2, len(prompt), model.config.num_kv_heads,
                                        model.config.head_dim), "shape of the payload pack_kv sent",
                 hint="exactly the prompt's tokens: the empty tail of the last block stays home.")

    def student_unpack(payload, storage, table):
        before = storage.clone()
        result = call_student(unpack_kv, "unpack_kv", payload, storage, table, copy_args=False,
                              hints={MissingName: ship_hint}, show_args=False)
        if torch.equal(storage, before):
            fail("in the decode engine, your unpack_kv left the engine's pool unchanged", expected="the payload "
                 "written into the pool's blocks, in place", got="the pool exactly as it was before the call",
                 hint="the engine reads only the storage tensor it passes in, never the one you return: write into "
                      "storage itself, not into a clone.")
        return result

    receiver = _ImportingAllocator(32, 4, unpack=student_unpack)
    decode = LLMEngine(model, tokenizer, allocator=receiver)
    receiver.kv_cache = decode.kv_cache
    _scramble_free_blocks(receiver)
    receiver.pending["y"] = payload
    decode.add_request(prompt + [first_token], SamplingParams(temperature=0, max_tokens=max_tokens - 1, ignore_eos=True),
                       request_id="y")
    tokens = [first_token]
    while decode.has_unfinished():
        for output in decode.step():
            tokens += output.new_token_ids
    expect_equal(tokens, colocated, "tokens generated by prefill engine + your KV transfer + decode engine",
                 hint="the decode engine computes nothing of the prompt: its KV is exactly what your pack_kv sent "
                      "and your unpack_kv wrote. Compare your functions on one block table by hand.")
    check(decode.stats.num_batched_tokens == max_tokens - 1, f"the decode engine ran {decode.stats.num_batched_tokens} "
          f"tokens; with the prompt's KV shipped it should run only the {max_tokens - 1} decode steps")


# =============================================================================================
# Chapter 6: KV-cache-aware balancing
# =============================================================================================


def _balancing():
    from course_lib.server import balancing

    return balancing


def replica_metrics_text(used: int, free: int, waiting: int, running: int, preemptions: int, *, extra: str = "") -> str:
    """A replica's /metrics as the course's server writes it (trimmed): the KV samples among others."""
    return (
        "# HELP course_time_to_first_token_seconds Arrival to first token, seconds.\n"
        "# TYPE course_time_to_first_token_seconds histogram\n"
        'course_time_to_first_token_seconds_bucket{le="0.1"} 4.0\n'
        'course_time_to_first_token_seconds_bucket{le="+Inf"} 9.0\n'
        "course_time_to_first_token_seconds_count 9.0\n"
        "course_time_to_first_token_seconds_sum 2.25\n"
        "# HELP course_num_requests_waiting Requests admitted and waiting for a place in the batch.\n"
        "# TYPE course_num_requests_waiting gauge\n"
        f"course_num_requests_waiting {float(waiting)}\n"
        "# HELP course_num_requests_running Requests in the batch (holding KV blocks).\n"
        "# TYPE course_num_requests_running gauge\n"
        f"course_num_requests_running {float(running)}\n"
        "# HELP course_kv_blocks_total KV-cache blocks in the pool.\n"
        "# TYPE course_kv_blocks_total gauge\n"
        f"course_kv_blocks_total {float(used + free)}\n"
        "# HELP course_kv_blocks_used KV-cache blocks held by running requests.\n"
        "# TYPE course_kv_blocks_used gauge\n"
        f"course_kv_blocks_used {float(used)}\n"
        "# HELP course_kv_blocks_free KV-cache blocks a new request could take now.\n"
        "# TYPE course_kv_blocks_free gauge\n"
        f"course_kv_blocks_free {float(free)}\n"
        "# HELP course_kv_cache_usage_ratio Share of the KV pool in use (0 to 1).\n"
        "# TYPE course_kv_cache_usage_ratio gauge\n"
        f"course_kv_cache_usage_ratio {used / max(1, used + free)}\n"
        "# HELP course_num_preemptions_total Requests preempted (KV freed, recomputed later).\n"
        "# TYPE course_num_preemptions_total counter\n"
        f"course_num_preemptions_total {float(preemptions)}\n" + extra)


def kv_load_cases() -> list[tuple[str, str]]:
    """(description, metrics text) for ``check_kv_load``: the visible test's texts (the graded test's
    further texts are in its hidden region)."""
    busy = replica_metrics_text(37, 3, 2, 5, 4)
    return [
        ("the worked example: a busy replica", busy),
        ("an idle replica (every count 0)", replica_metrics_text(0, 64, 0, 0, 0)),
        ("a large pool: values past a thousand", replica_metrics_text(1500, 2596, 12, 30, 1041)),
        ("course_kv_blocks_free missing (an old server): ValueError", busy.replace("course_kv_blocks_free 3.0\n", "")),
    ]


_KV_LOAD_HINTS = {
    ValueError: "float() got something that is not a number: a '# HELP' or '# TYPE' line mentions the same names; "
                "skip lines that start with '#', and split a sample line into its name and its value.",
}


@recorded_check
def check_kv_load(kv_load, metrics_text: str, description: str = "") -> None:
    """Compare a student's ``kv_load`` with the reference on one replica's metrics text."""
    require_own_implementation(kv_load, "kv_load")
    try:
        expected = reference(_balancing().kv_load)(metrics_text)
    except ValueError:
        expected = None  # a sample is missing: the student's must raise ValueError too
    if expected is None:
        try:
            got = kv_load(metrics_text)
        except ValueError:
            return
        except Exception as error:  # noqa: BLE001 - any other type is the wrong one
            fail(f"kv_load for {description} should raise ValueError", expected="ValueError",
                 got=f"{type(error).__name__} raised",
                 hint="when one of the five samples is not in the text, raise ValueError naming it.")
        fail(f"kv_load for {description} should raise ValueError (a sample it needs is not in the text)",
             expected="ValueError", got=got,
             hint="look each sample up by its exact name and raise ValueError naming the one that is missing; "
                  "do not default it to 0, a router would read an old server as an empty one.")
    got = call_student(kv_load, "kv_load", metrics_text, show_args=False, hints=_KV_LOAD_HINTS)
    check(isinstance(got, dict), f"kv_load should return a dict, got {type(got).__name__}")
    for key, sample in _balancing().KV_METRICS.items():
        value = got.get(key)
        expect_equal(value, expected[key], f"kv_load(...)[{key!r}] for {description}",
                     hint=f"the value of the sample named exactly {sample} (not a line that only starts with those "
                          f"letters or mentions them), as an int: the text writes {float(expected[key])!r}.")
        check(type(value) is int, f"kv_load(...)[{key!r}] should be an int, got {type(value).__name__}",
              hint="the text writes every value as a float (12.0): convert with int(float(value)).")


def stranded_cases() -> list[tuple[str, list, int, int]]:
    """(description, timeline, num_blocks, min_free_blocks) for ``check_stranded_share``: the visible
    test's cases (the graded test's further timelines are in its hidden region)."""
    worked = [(0, 0, 40, 0), (0, 1, 10, 0), (50, 0, 40, 2), (50, 1, 10, 0), (100, 0, 40, 3), (100, 1, 36, 0),
              (150, 0, 20, 0), (150, 1, 20, 1)]
    same = [(0, 0, 10, 2), (0, 1, 40, 0), (50, 0, 40, 1), (50, 1, 40, 0)]
    edge = [(0, 0, 30, 1), (0, 1, 34, 0), (10, 0, 30, 1), (10, 1, 35, 0)]
    return [
        ("the worked example", worked, 40, 8),
        ("free blocks on the replica that has the queue do not count", same, 40, 8),
        ("exactly min_free_blocks free counts as room", edge, 40, 6),
        ("no scrape at all", [], 40, 8),
    ]


def random_timeline(seed: int, num_replicas: int, num_scrapes: int = 30, num_blocks: int = 40) -> list[tuple]:
    """A random scrape timeline for ``stranded_share``: every replica reports every 50 ms.

    (time_ms, replica, blocks_used, num_waiting) per report; blocks_used in [0, num_blocks], and
    most reports have nobody waiting. The same seed gives the same timeline.
    """
    rng = random.Random(seed)
    return [(50 * t, r, rng.randrange(0, num_blocks + 1), rng.choice([0, 0, 0, 1, 3])) for t in range(num_scrapes)
            for r in range(num_replicas)]


@recorded_check
def check_stranded_share(stranded_share, timeline, num_blocks: int, min_free_blocks: int, description: str = "") -> None:
    require_own_implementation(stranded_share, "stranded_share")
    timeline = [tuple(report) for report in timeline]
    got = call_student(stranded_share, "stranded_share", timeline, num_blocks, min_free_blocks, show_args=False)
    expected = reference(_balancing().stranded_share)(timeline, num_blocks, min_free_blocks)
    shown = "" if hidden_check() or len(timeline) > 12 else f" {timeline}"
    expect_close(got, expected, f"stranded_share for {description} (num_blocks={num_blocks}, min_free_blocks="
                 f"{min_free_blocks}){shown}", rel=1e-9, abs_=1e-12,
                 hint="group the reports by their time (one scrape); a scrape is stranded when a replica with "
                      "num_waiting > 0 and a DIFFERENT replica with num_blocks - blocks_used >= min_free_blocks are "
                      "both in it; divide the stranded scrapes by all scrapes (0.0 when there are none).")


def replica_load(free: int, waiting: int = 0, used: int = 0) -> dict:
    """A replica's report as ``kv_load`` reads it: ``free`` blocks free, ``used`` held, ``waiting`` queued."""
    return {"blocks_used": used, "blocks_free": free, "num_waiting": waiting, "num_running": 1 if used else 0,
            "preemptions": 0}


def kv_router_scripts() -> list[tuple[str, int, int, list]]:
    """(description, num_replicas, block_size, events) for ``check_kv_router``: the visible test's
    scripts (the graded test's further scripts are in its hidden region).

    Events: ("report", replica, load) and ("choose", prompt length, max_tokens, home).
    """
    load = replica_load
    both = [("report", 0, load(30, used=34)), ("report", 1, load(50, used=14))]
    return [
        ("the worked example: 300 + 20 tokens need 20 blocks, three times with no report between", 2, 16,
         both + [("choose", 300, 20, 0), ("choose", 300, 20, 0), ("choose", 300, 20, 0)]),
        ("a burst of 6 requests between two reports: each one's blocks count against the replica it went to", 2, 16,
         [("report", 0, load(64)), ("report", 1, load(64))] + [("choose", 200, 40, None)] * 6),
        ("home has free blocks, but fewer than this long request needs", 2, 16,
         both + [("choose", 40, 8, 0), ("choose", 600, 100, 0)]),
        ("requests wait at home: go elsewhere even though home has room", 2, 16,
         [("report", 0, load(60, waiting=2)), ("report", 1, load(20))] + [("choose", 30, 10, 0)]),
        ("a new report replaces the old one and forgets what was sent before it", 2, 16,
         both + [("choose", 300, 20, 1), ("choose", 300, 20, 1), ("report", 1, load(50, used=14)),
                 ("choose", 300, 20, 1)]),
        ("ties: equal room goes to fewer waiting, then the lower index", 3, 16,
         [("report", 0, load(40, waiting=1)), ("report", 1, load(40, waiting=0)), ("report", 2, load(40))]
         + [("choose", 15, 1, None), ("report", 1, load(40)), ("report", 2, load(40)), ("choose", 15, 1, None)]),
        ("a queue everywhere: the fewest waiting wins, even with less room (waiting requests hold no blocks yet)",
         2, 16, [("report", 0, load(100, waiting=3)), ("report", 1, load(20, waiting=1)), ("choose", 40, 8, None),
                 ("choose", 40, 8, 0)]),
    ]


def random_kv_router_events(seed: int, num_replicas: int, num_events: int = 40) -> list[tuple]:
    """A random script for ``check_kv_router``: every replica reports, then ``num_events`` events.

    A quarter of the events are new reports (0 to 119 blocks free, 0 to 2 waiting), the rest
    requests (1 to 899 prompt tokens, 1 to 199 max_tokens, a random home or none). The same seed
    gives the same script.
    """
    rng = random.Random(seed)
    events: list = [("report", r, replica_load(rng.randrange(0, 120), rng.choice([0, 0, 1])))
                    for r in range(num_replicas)]
    for _ in range(num_events):
        if rng.random() < 0.25:
            events.append(("report", rng.randrange(num_replicas),
                           replica_load(rng.randrange(0, 120), rng.choice([0, 0, 1, 2]))))
        else:
            events.append(("choose", rng.randrange(1, 900), rng.randrange(1, 200),
                           rng.choice([None, *range(num_replicas)])))
    return events


@recorded_check
def check_kv_router(KVAwareRouter, num_replicas: int, block_size: int, events, description: str = "") -> None:
    """Replay a script of reports and requests on the student's balancer and the reference; every choice must match."""
    require_own_implementation(KVAwareRouter, "KVAwareRouter")
    ref_router = reference(_balancing().KVAwareRouter)(num_replicas, block_size=block_size)
    router = call_student(KVAwareRouter, "KVAwareRouter", num_replicas, block_size=block_size)
    try:
        ref_router.choose([1] * 8, 8, None)
        refuses = False
    except ValueError:
        refuses = True
    if refuses:
        fresh = call_student(KVAwareRouter, "KVAwareRouter", num_replicas, block_size=block_size)
        try:
            fresh.choose([1] * 8, 8, None)
        except ValueError:
            pass
        except Exception as error:  # noqa: BLE001
            fail("choose before any report should raise ValueError", expected="ValueError",
                 got=f"{type(error).__name__} raised", hint="check that every replica has reported first.")
        else:
            fail("choose before any report should raise ValueError", expected="ValueError", got="a replica index",
                 hint="a replica that never reported is unknown: refuse to guess (raise ValueError).")
    reported: dict[int, dict] = {}
    sent = [0] * num_replicas
    for step, event in enumerate(events):
        if event[0] == "report":
            _, replica, load = event
            call_student(router.report, "report", replica, dict(load), show_args=False)
            ref_router.report(replica, dict(load))
            reported[replica], sent[replica] = dict(load), 0
            continue
        _, prompt_len, max_tokens, home = event
        prompt = [7] * prompt_len
        need = math.ceil((prompt_len + max_tokens) / block_size)
        got = call_student(router.choose, "choose", prompt, max_tokens, home, show_args=False)
        expected = ref_router.choose(prompt, max_tokens, home)
        room = [reported[r]["blocks_free"] - sent[r] for r in range(num_replicas)]
        waiting = [reported[r]["num_waiting"] for r in range(num_replicas)]
        situation = (f"{description}, request {step}: {prompt_len} prompt tokens + max_tokens {max_tokens} = need "
                     f"{need} blocks, home {home}; blocks free as reported {[reported[r]['blocks_free'] for r in range(num_replicas)]}, "
                     f"blocks sent since each report {sent}, so room {room}; waiting {waiting}")
        check(isinstance(got, int) and not isinstance(got, bool) and 0 <= got < num_replicas,
              f"{situation}: choose returned {got!r}, not a replica index")
        if got != expected:
            since = ("room = blocks_free of the last report minus the blocks of every request you sent to that replica "
                     "since that report: the report does not count them yet (without that, a burst all goes to the "
                     "same replica).")
            if home is not None and got == home and waiting[home]:
                hint = f"{waiting[home]} requests wait at home {home}: leave home when anybody waits there."
            elif home is not None and got == home and sent[home] and room[home] < need <= room[home] + sent[home]:
                hint = (f"home {home} reported {room[home] + sent[home]} free and you have sent it {sent[home]} blocks "
                        f"since, so its room is {room[home]}: less than this request's need of {need}. Stay home only "
                        f"when room(home) = reported free - blocks sent since >= need, and nobody waits there.")
            elif home is not None and got == home:
                hint = f"home {home} has room {room[home]}, less than the need of {need}: stay home only when " \
                       "room(home) >= need AND nobody waits there."
            elif home is not None and expected == home:
                hint = "home has room for the whole need and nobody waits there: keep the prefix's home."
            elif waiting[got] != waiting[expected]:
                hint = (f"replica {expected} has fewer requests waiting ({waiting[expected]} against {waiting[got]}): "
                        "away from home, the fewest waiting wins first (waiting requests hold no blocks yet, so a "
                        "replica with a queue looks roomier than it is), then the most room, then the lower index.")
            elif any(sent) and room[got] != room[expected]:
                hint = since
            else:
                hint = "among the replicas with the fewest waiting, the most room wins; then the lower index."
            fail(f"{situation}: the replica chosen", expected=expected, got=got, hint=hint)
        sent[got] += need


def _send_completions(url: str, bodies: list[dict]) -> list[tuple[int, str, str]]:
    """POST every body to url/v1/completions at once; (status, x-course-replica header, error message) of each."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def one(body: dict) -> tuple[int, str, str]:
        response = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
        message = "" if response.status_code == 200 else response.text[:500]
        return response.status_code, response.headers.get("x-course-replica", ""), message

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(one, bodies))


@recorded_check
def check_kv_router_live(KVAwareRouter, kv_load, num_blocks: int = 48) -> None:
    """The student's balancer and reader inside the course's router, in front of two real replicas (tiny model).

    Both replicas report (the router scrapes their /metrics once, through the student's kv_load,
    when the first request comes), then a burst arrives at once: 2 documents (300 prompt tokens +
    20, 20 blocks each) and 6 chats of two families (4 blocks each), each family's home a different
    replica. No report comes during the burst, so only the blocks the balancer counts as sent keep
    it from sending both documents to the same replica. Measured on the replicas: no preemption,
    one document each, every chat at its family's home.
    """
    from course_lib.server.balancing import MetricsRouting
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model
    from course_lib.server.router import start_router

    require_own_implementation(KVAwareRouter, "KVAwareRouter")
    require_own_implementation(kv_load, "kv_load")
    rng = random.Random(7)
    families = [[rng.randrange(1000, 40000) for _ in range(48)] for _ in range(2)]
    documents = [[rng.randrange(1000, 40000) for _ in range(300)] for _ in range(2)]
    bodies, expected_home = [], []
    for index in range(8):
        if index in (0, 3):
            bodies.append({"prompt": documents[index // 3], "max_tokens": 20, "ignore_eos": True})
            expected_home.append(None)
        else:
            family = index % 2
            bodies.append({"prompt": families[family] + [rng.randrange(1000, 40000) for _ in range(8)],
                           "max_tokens": 8, "ignore_eos": True})
            expected_home.append(family)

    def home(prompt_token_ids, outstanding):
        """The check's own affinity: a chat's family lives on the replica of its number; documents have none."""
        return next((family for family, prefix in enumerate(families) if prompt_token_ids[:48] == prefix), None)

    balancer = call_student(KVAwareRouter, "KVAwareRouter", 2, block_size=16)
    policy = MetricsRouting(balancer, kv_load, home=home, scrape_interval_s=None)
    tokenizer = _tiny()[1]
    servers = [start_server(*tiny_random_model(tokenizer, seed=seed), model_name="tiny", num_blocks=num_blocks,
                            max_num_seqs=8, max_num_batched_tokens=512) for seed in (0, 1)]
    try:
        with start_router([server.url for server in servers], policy, tokenizer) as router:
            results = _send_completions(router.url, bodies)
        preemptions = [server.backend.state().num_preemptions for server in servers]
    finally:
        for server in servers:
            server.stop()
    for (status, _, message), body in zip(results, bodies):
        check(status == 200, f"a request through the router with your balancer got HTTP {status}: {message}",
              hint="the router reports what failed: your kv_load on a replica's real /metrics, or your "
                   "KVAwareRouter's report or choose (a message naming them comes from your code).")
    chosen = [int(replica) for _, replica, _ in results]
    documents_per_replica = [sum(1 for c, h in zip(chosen, expected_home) if h is None and c == r) for r in (0, 1)]
    expect_equal(documents_per_replica, [1, 1], "documents (20 blocks each) per replica, from one report of two "
                 "empty replicas (48 blocks free each) and a burst", hint="after the first document the replica it "
                 "went to has 20 blocks less room than its report says: count the blocks you sent since the report.")
    away = [index for index, (c, h) in enumerate(zip(chosen, expected_home)) if h is not None and c != h]
    check(not away, f"chats {away} left their home although it had room (need 4 blocks; a home holds at most one "
          f"document of 20 and its family's 3 chats of 4, 32 of 48 blocks)",
          hint="stay home when room(home) >= need and nobody waits there.")
    expect_equal(preemptions, [0, 0], "preemptions on the two replicas during the burst",
                 hint="a request sent where its blocks do not fit makes the engine preempt; room must count every "
                      "block sent since the last report.")
