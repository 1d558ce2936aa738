"""Load testing a server: open-loop Poisson arrivals, streamed requests, latency from the wire.

A load test answers "how fast is this server *at this load*?". Two ways to make load:

- **closed loop**: N clients, each sends a request, waits for the answer, sends the next. The
  load adapts to the server: when it slows down, clients send less, so queues never grow and the
  measured latency looks fine right up to the point where real users would be waiting.
- **open loop**: requests arrive on their own clock, like users who do not know each other. With
  **Poisson arrivals** at rate λ the gaps between requests are independent and exponentially
  distributed with mean 1/λ. Requests are sent on time whatever the server is doing, so an
  overloaded server shows what it really does: its queue grows and latency climbs.

Each request is streamed; the client notes when it was sent and when each chunk of text arrived
(``WireRecord``): TTFT, TPOT and end-to-end latency are measured on the wire, as a user sees them.

What students write (the references here): ``poisson_arrival_times`` and the open-loop driver
``open_loop`` (Lab 0.5 chapter 2). The platform around them: ``stream_request`` (one streamed
request), ``burst`` (everything at once), ``closed_loop``, ``run`` (an async load generator run to completion from any thread, a
notebook's included), ``summarize`` (percentiles, throughput, goodput under an SLO) and
``default_prompts``. Every URL must be a loopback address, and every run is bounded in requests
and in time.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai  # imported with this module: importing it inside a running load test would stall every task for a second

from course_lib.exercises import exercise

__all__ = [
    "MAX_DURATION_S",
    "MAX_REQUESTS",
    "Slo",
    "burst",
    "closed_loop",
    "default_prompts",
    "mean_in_flight",
    "open_loop",
    "poisson_arrival_times",
    "poisson_schedule",
    "run",
    "stream_request",
    "summarize",
]

MAX_REQUESTS = 10_000
"""The most requests one run may send."""
MAX_DURATION_S = 600.0
"""The longest one run may last (arrivals plus the wait for the last answers)."""
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Slo:
    """A service-level objective: a request is *good* when it meets both bounds (seconds)."""

    ttft_s: float = 1.0
    tpot_s: float = 0.2


def _require_loopback(url: str) -> None:
    from course_lib.server.launch import is_loopback

    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"url must be an http:// URL, got {url!r}")
    if not is_loopback(url):
        raise ValueError(f"load tests only target this machine (127.0.0.1, ::1 or localhost), got {url!r}")


def default_prompts() -> list[str]:
    """Short, varied prompts for load tests (a prompt-length mix without any data download)."""
    topics = ["the sea", "a robot", "tea", "winter", "a library", "rain", "the moon", "bicycles", "bread",
              "a lighthouse", "volcanoes", "chess", "owls", "a train station", "honey", "the desert"]
    forms = ["Write one sentence about {}.", "Give me two facts about {}.", "Describe {} to a child.",
             "Write a short poem about {}."]
    return [form.format(topic) for topic in topics for form in forms]


# ---------------------------------------------------------------------------------------------
# One streamed request (platform)
# ---------------------------------------------------------------------------------------------


async def stream_request(client, url: str, prompt: str, max_tokens: int, *, t0: float = 0.0,
                         extra: dict | None = None) -> dict:
    """Send one streamed ``/v1/completions`` request; return its wire record (times relative to ``t0``).

    client: an ``httpx.AsyncClient`` (its connections carry the request). Greedy, with
    ``ignore_eos`` (override in ``extra``, a dict of more body fields). The record is a dict:
    ``sent_at`` (when the request left), ``status`` (HTTP status; 200 when it streamed),
    ``chunk_times`` (arrival of each event that carried text), ``num_output_tokens`` (from the
    final usage event), ``finish_reason``, ``done_at`` (when the stream ended or the error came
    back), ``retry_after`` (seconds, for a 429), ``error`` (None, or what went wrong).

    The server-sent events are read by the official ``openai`` client (over ``client``'s
    connections, with its retries off), as a real user's program would read them; reading them
    from the raw lines yourself is chapter 1's exercise.
    """
    api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", http_client=client, max_retries=0)
    # ignore_eos: every answer has exactly max_tokens tokens, so runs at different loads do the same work.
    body = {"temperature": 0.0, "ignore_eos": True, **(extra or {})}
    record: dict[str, Any] = {"sent_at": time.perf_counter() - t0, "status": None, "chunk_times": [],
                              "num_output_tokens": 0, "finish_reason": None, "done_at": None, "retry_after": None,
                              "error": None}
    try:
        stream = await api.completions.create(model=openai.NOT_GIVEN, prompt=prompt, max_tokens=max_tokens,
                                              stream=True, stream_options={"include_usage": True}, extra_body=body,
                                              timeout=REQUEST_TIMEOUT_S)
        record["status"] = stream.response.status_code
        async for chunk in stream:
            now = time.perf_counter() - t0
            if chunk.usage is not None:
                record["num_output_tokens"] = chunk.usage.completion_tokens
            for choice in chunk.choices:
                if choice.text:
                    record["chunk_times"].append(now)
                if choice.finish_reason:
                    record["finish_reason"] = choice.finish_reason
    except openai.APIStatusError as error:  # 400, 429, 5xx: the server's answer is data for the load test
        record["status"] = error.status_code
        record["retry_after"] = _retry_after(error.response.headers.get("retry-after"))
        record["error"] = _error_message(error.response)
    except Exception as error:  # noqa: BLE001 - a failed request is data for the load test, not a crash
        record["error"] = f"{type(error).__name__}: {error}"
    record["done_at"] = time.perf_counter() - t0
    return record


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_message(response) -> str:
    try:
        return response.json()["error"]["message"]
    except Exception:  # noqa: BLE001 - any body will do as a message
        return response.text[:200]


# ---------------------------------------------------------------------------------------------
# The open-loop load generator (Lab 0.5 chapter 2)
# ---------------------------------------------------------------------------------------------


@exercise("lab05-serving", "02_load", "poisson_arrival_times")
def poisson_arrival_times(rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """Arrival times (seconds from 0, increasing, all < duration_s) of a Poisson process of rate ``rate_per_s``.

    Gaps between arrivals are independent exponential draws with mean 1 / rate_per_s, from
    ``random.Random(seed).expovariate(rate_per_s)``; the first arrival is the first gap after 0.
    The count is itself random (Poisson, mean rate_per_s * duration_s). Raises ValueError for a
    rate or duration that is not > 0.
    """
    if not rate_per_s > 0 or not duration_s > 0:
        raise ValueError(f"rate_per_s and duration_s must be > 0, got {rate_per_s} and {duration_s}")
    rng = random.Random(seed)
    times, clock = [], rng.expovariate(rate_per_s)
    while clock < duration_s:
        times.append(clock)
        clock += rng.expovariate(rate_per_s)
    return times


@exercise("lab05-serving", "02_load", "open_loop")
async def open_loop(url: str, schedule: Sequence[dict]) -> list[dict]:
    """Send every request of ``schedule`` at its time, without waiting for earlier answers.

    schedule: dicts ``{"at": seconds from the start, "prompt": str, "max_tokens": int}``.
    Each request is streamed with ``stream_request(client, url, prompt, max_tokens, t0=start)``
    from its own task, started when its time comes, so a slow answer never delays the next
    arrival. Returns the wire records in schedule order, each with ``"scheduled_at"`` (its "at") added.
    """
    import httpx

    start = time.perf_counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S) as client:

        async def send(item: dict) -> dict:
            await asyncio.sleep(max(0.0, start + item["at"] - time.perf_counter()))
            record = await stream_request(client, url, item["prompt"], item["max_tokens"], t0=start)
            return {"scheduled_at": item["at"], **record}

        return list(await asyncio.gather(*(send(item) for item in schedule)))


@exercise("lab05-serving", "02_load", "mean_in_flight")
def mean_in_flight(records: Sequence[dict], start: float, end: float) -> float:
    """Time-average number of requests in flight over [start, end] (L in Little's law L = lambda * W).

    A request is in flight from its ``sent_at`` to its ``done_at``. Each request contributes the
    length of the overlap of [sent_at, done_at] with [start, end]; the sum is divided by end - start.
    Raises ValueError unless end > start.
    """
    if not end > start:
        raise ValueError(f"end must be > start, got start={start}, end={end}")
    busy = sum(max(0.0, min(r["done_at"], end) - max(r["sent_at"], start)) for r in records)
    return busy / (end - start)


# ---------------------------------------------------------------------------------------------
# Platform: running a generator, closed loop, schedules, summaries
# ---------------------------------------------------------------------------------------------


def poisson_schedule(arrival_times: Sequence[float], prompts: Sequence[str], max_tokens: int | Sequence[int]) -> list[dict]:
    """A schedule for ``open_loop``: one request per arrival time, prompts taken in turn."""
    if not prompts:
        raise ValueError("prompts is empty")
    lengths = [max_tokens] * len(arrival_times) if isinstance(max_tokens, int) else list(max_tokens)
    if len(lengths) < len(arrival_times):
        raise ValueError(f"max_tokens has {len(lengths)} entries for {len(arrival_times)} arrivals")
    return [{"at": float(at), "prompt": prompts[index % len(prompts)], "max_tokens": int(lengths[index])}
            for index, at in enumerate(arrival_times)]


def _check_schedule(url: str, schedule: Sequence[dict]) -> None:
    _require_loopback(url)
    if len(schedule) > MAX_REQUESTS:
        raise ValueError(f"a run may send at most {MAX_REQUESTS} requests, the schedule has {len(schedule)}")
    if schedule and max(item["at"] for item in schedule) > MAX_DURATION_S:
        raise ValueError(f"a run may last at most {MAX_DURATION_S:.0f} s")


def run(generator: Callable, url: str, schedule: Sequence[dict], *, timeout_s: float | None = None,
        progress: bool = False) -> list[dict]:
    """Run an async load generator ``generator(url, schedule)`` to completion; return its records.

    It runs on a fresh event loop in a thread of its own, so this works from a notebook (whose
    cells already run inside an event loop) and never shares a loop with a server in this process.
    Checks that ``url`` is a loopback address and that the run is bounded. ``progress``: a
    ``tqdm.auto`` bar of the seconds of the schedule gone by (notebooks pass it; checks do not).
    """
    _check_schedule(url, schedule)
    last = max((item["at"] for item in schedule), default=0.0)
    timeout_s = timeout_s or min(MAX_DURATION_S, last + REQUEST_TIMEOUT_S)
    bar = _SecondsBar(last, f"load test, {len(schedule)} requests") if progress else None
    return run_coroutine(lambda: generator(url, list(schedule)), timeout_s, progress=bar)


class _SecondsBar:
    """A tqdm.auto bar over the seconds a run is planned to take, then "waiting for the last answers"."""

    def __init__(self, planned_s: float, label: str) -> None:
        from tqdm.auto import tqdm

        self.planned_s, self.label = planned_s, label
        self.bar = tqdm(total=max(planned_s, 0.1), desc=label, unit="s", leave=False,
                        bar_format="{desc}: {bar} {n:.0f}/{total:.0f} s")
        self.started = time.monotonic()

    def update(self) -> None:
        elapsed = time.monotonic() - self.started
        if elapsed >= self.planned_s and self.bar.desc == self.label:
            self.bar.set_description(f"{self.label}: waiting for the last answers", refresh=False)
        self.bar.n = min(elapsed, self.bar.total)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def _warm_up_client() -> None:
    """Build one ``openai`` client here, so the lazy imports of the first one do not stall a running load test."""
    openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0).completions  # noqa: B018


def run_coroutine(make_coroutine: Callable[[], Any], timeout_s: float, *, progress: _SecondsBar | None = None) -> Any:
    """``asyncio.run(make_coroutine())`` in a new thread (with a time limit); its result or its exception."""
    _warm_up_client()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(asyncio.wait_for(make_coroutine(), timeout_s))
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="load-generator", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s + 10
    try:
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(min(0.5, max(deadline - time.monotonic(), 0)) if progress else deadline - time.monotonic())
            if progress is not None:
                progress.update()
    finally:
        if progress is not None:
            progress.close()
    if thread.is_alive():
        raise TimeoutError(f"the load generator did not finish within {timeout_s:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class BlockingRunner:
    """A blocking call around an async load generator: ``BlockingRunner(gen)(url, schedule)`` = ``run(gen, url, schedule)``."""

    def __init__(self, generator: Callable) -> None:
        self.generator = generator

    def __call__(self, url: str, schedule: Sequence[dict]) -> list[dict]:
        return run(self.generator, url, schedule)


async def _closed_loop(url: str, prompts: Sequence[str], max_tokens: int, num_clients: int, duration_s: float) -> list[dict]:
    import httpx

    start = time.perf_counter()
    records: list[dict] = []
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:

        async def user(index: int) -> None:
            turn = index
            while time.perf_counter() - start < duration_s:
                at = time.perf_counter() - start
                record = await stream_request(client, url, prompts[turn % len(prompts)], max_tokens, t0=start)
                records.append({"scheduled_at": at, **record})
                turn += num_clients

        await asyncio.gather(*(user(index) for index in range(num_clients)))
    return sorted(records, key=lambda r: r["sent_at"])


def closed_loop(url: str, prompts: Sequence[str], *, max_tokens: int, num_clients: int, duration_s: float,
                progress: bool = False) -> list[dict]:
    """``num_clients`` users who each send a request, wait for its answer and send the next, for ``duration_s``.

    ``progress``: a ``tqdm.auto`` bar of the seconds gone by.
    """
    _require_loopback(url)
    if not isinstance(num_clients, int) or not 1 <= num_clients <= 256:
        raise ValueError(f"num_clients must be an integer in [1, 256], got {num_clients!r}")
    if not 0 < duration_s <= MAX_DURATION_S:
        raise ValueError(f"duration_s must be in (0, {MAX_DURATION_S:.0f}], got {duration_s}")
    bar = _SecondsBar(duration_s, f"closed loop, {num_clients} clients") if progress else None
    return run_coroutine(lambda: _closed_loop(url, list(prompts), max_tokens, num_clients, duration_s),
                         duration_s + REQUEST_TIMEOUT_S, progress=bar)


async def _burst(url: str, prompts: Sequence[str], max_tokens: int) -> list[dict]:
    import httpx

    start = time.perf_counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S) as client:
        return list(await asyncio.gather(*(stream_request(client, url, prompt, max_tokens, t0=start)
                                           for prompt in prompts)))


def burst(url: str, prompts: Sequence[str], *, max_tokens: int) -> list[dict]:
    """Send every prompt at once (one streamed request each); their records, in order."""
    _require_loopback(url)
    if not 1 <= len(prompts) <= 256:
        raise ValueError(f"a burst holds 1 to 256 prompts, got {len(prompts)}")
    return run_coroutine(lambda: _burst(url, list(prompts), max_tokens), REQUEST_TIMEOUT_S)


def record_latencies(record: dict) -> dict | None:
    """TTFT, TPOT (None for < 2 tokens) and end-to-end seconds of a completed record, or None if it failed.

    Built on ``course_lib.metrics.RequestMetrics`` (Lab 0.2): arrival = sent, first token = first
    chunk with text, finish = last chunk with text, token count from the usage event.
    """
    from course_lib.metrics import RequestMetrics

    if record.get("status") != 200 or record.get("error") or not record.get("chunk_times"):
        return None
    times = record["chunk_times"]
    metrics = RequestMetrics(arrival_time=record["sent_at"], first_token_time=times[0], finish_time=times[-1],
                             num_output_tokens=max(record["num_output_tokens"], len(times)))
    return {"ttft": metrics.ttft, "tpot": metrics.tpot, "e2e": metrics.e2e_latency}


def summarize(records: Sequence[dict], slo: Slo | None = None) -> dict:
    """Percentiles, throughput and goodput of a run's records.

    Returns {"num_requests", "num_ok", "num_rejected" (429s), "num_failed", "duration_s" (first
    send to last answer), "ttft"/"tpot"/"e2e": {"mean", "p50", "p90", "p99"} over completed
    requests (None when there is none), "output_tokens_per_s", "requests_per_s" (completed),
    "goodput_per_s" (completed requests that met the SLO, per second) and "slo_attainment" (their
    share of *all* requests sent: a refused or failed request did not meet the SLO)}.
    """
    from course_lib.metrics import percentile

    slo = slo or Slo()
    if not records:
        raise ValueError("summarize needs at least one record")
    latencies = [(record, record_latencies(record)) for record in records]
    completed = [(r, m) for r, m in latencies if m is not None]
    start = min(r["sent_at"] for r in records)
    end = max(r["done_at"] for r in records)
    duration = max(end - start, 1e-9)

    def stats(values: list[float]) -> dict | None:
        if not values:
            return None
        return {"mean": sum(values) / len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
                "p99": percentile(values, 99)}

    good = [m for _, m in completed if m["ttft"] <= slo.ttft_s and (m["tpot"] is None or m["tpot"] <= slo.tpot_s)]
    return {
        "num_requests": len(records),
        "num_ok": len(completed),
        "num_rejected": sum(1 for r in records if r.get("status") == 429),
        "num_failed": sum(1 for r in records if r.get("status") != 429 and record_latencies(r) is None),
        "duration_s": duration,
        "ttft": stats([m["ttft"] for _, m in completed]),
        "tpot": stats([m["tpot"] for _, m in completed if m["tpot"] is not None]),
        "e2e": stats([m["e2e"] for _, m in completed]),
        "output_tokens_per_s": sum(r["num_output_tokens"] for r, _ in completed) / duration,
        "requests_per_s": len(completed) / duration,
        "goodput_per_s": len(good) / duration,
        "slo_attainment": len(good) / len(records),
    }


def format_summary(summary: dict, title: str = "") -> str:
    """A small text table of ``summarize``'s result (latencies in ms)."""
    lines = [title] if title else []
    lines.append(f"{'latency (ms)':<14}{'mean':>9}{'p50':>9}{'p90':>9}{'p99':>9}")
    for name in ("ttft", "tpot", "e2e"):
        stats = summary[name]
        if stats is None:
            lines.append(f"{name.upper():<14}{'-':>9}")
            continue
        lines.append(f"{name.upper():<14}" + "".join(f"{1000 * stats[k]:>9.0f}" for k in ("mean", "p50", "p90", "p99")))
    lines.append(f"{summary['num_requests']} sent, {summary['num_ok']} completed, {summary['num_rejected']} refused "
                 f"(429), {summary['num_failed']} failed, in {summary['duration_s']:.1f} s")
    lines.append(f"output tokens/s {summary['output_tokens_per_s']:.1f}   completed/s {summary['requests_per_s']:.2f}   "
                 f"goodput/s {summary['goodput_per_s']:.2f}   SLO met by {100 * summary['slo_attainment']:.0f}% of requests")
    return "\n".join(lines)


def mean_gap(times: Sequence[float]) -> float:
    """Mean gap between consecutive times (nan for fewer than two)."""
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) >= 2 else math.nan
