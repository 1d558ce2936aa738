"""Latency measured on the wire: a streamed answer's events, as the client received them.

A client that streams a completion receives server-sent events (SSE): text lines, each event
``data: <json>`` ended by a blank line, comments (lines starting with ``:``, e.g. keep-alives)
that carry nothing, and the sentinel ``data: [DONE]``. A streamed chat answer opens with an
event that holds only the role (no text, so no token yet); the last events hold the
``finish_reason`` and, if the client asked (``stream_options.include_usage``), the token counts.
Events are not tokens: a server sends no event for a token that completes no character, and may
put several tokens' text in one event, so the number of output tokens comes from ``usage``.

From the timestamped events (Lab 0.5 chapter 1, the references here):

- ``parse_stream(timed_lines)``: when each text-carrying event arrived, the text, the token count;
- ``request_metrics(sent_at, parsed)``: TTFT = first text event - send; TPOT = (last text event -
  first text event) / (output tokens - 1); end-to-end = last text event - send;
- ``histogram_quantile(q, buckets)``: the quantile a Prometheus histogram implies, estimated the
  way Prometheus's ``histogram_quantile`` does (linear inside the bucket), to compare a server's
  ``/metrics`` with what clients measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from course_lib.exercises import exercise

__all__ = ["histogram_quantile", "parse_stream", "request_metrics"]


@exercise("lab05-serving", "01_metrics_from_the_wire", "parse_stream")
def parse_stream(timed_lines: Sequence[tuple[float, str]]) -> dict:
    """Read a streamed completion or chat completion from its received lines.

    timed_lines: ``(arrival time in seconds, line)`` in order; lines have no trailing newline.
    Returns {"chunk_times": [time of each event whose first choice carries non-empty text:
    ``choices[0]["text"]`` (completions) or ``choices[0]["delta"]["content"]`` (chat)],
    "text": the concatenated text, "num_output_tokens": ``usage["completion_tokens"]`` of the
    event that has a usage (None if none), "finish_reason": the last non-null finish_reason
    (None if none), "done": True if ``data: [DONE]`` arrived}. Blank lines, comments (starting
    with ":") and other fields are skipped; ``data:`` may or may not be followed by a space.
    Nothing after ``[DONE]`` counts.
    """
    parsed = {"chunk_times": [], "text": "", "num_output_tokens": None, "finish_reason": None, "done": False}
    for arrival, line in timed_lines:
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            parsed["done"] = True
            break
        event = json.loads(payload)
        if event.get("usage"):
            parsed["num_output_tokens"] = event["usage"]["completion_tokens"]
        choices = event.get("choices") or []
        if not choices:
            continue
        choice = choices[0]
        text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
        if text:
            parsed["chunk_times"].append(arrival)
            parsed["text"] += text
        if choice.get("finish_reason"):
            parsed["finish_reason"] = choice["finish_reason"]
    return parsed


@exercise("lab05-serving", "01_metrics_from_the_wire", "request_metrics")
def request_metrics(sent_at: float, parsed: dict) -> dict:
    """TTFT, TPOT and end-to-end latency (seconds) of one streamed request.

    sent_at: when the request was sent. parsed: ``parse_stream``'s result, with at least one
    chunk time and num_output_tokens >= 1. Returns {"ttft": first chunk - sent_at, "tpot": (last
    chunk - first chunk) / (num_output_tokens - 1), or None when num_output_tokens < 2, "e2e":
    last chunk - sent_at}. TPOT divides by the gaps between tokens after the first, counted from
    the token count (not the number of chunks: one chunk may hold several tokens).
    """
    times, num_tokens = parsed["chunk_times"], parsed["num_output_tokens"]
    return {"ttft": times[0] - sent_at,
            "tpot": (times[-1] - times[0]) / (num_tokens - 1) if num_tokens >= 2 else None,
            "e2e": times[-1] - sent_at}


@exercise("lab05-serving", "01_metrics_from_the_wire", "histogram_quantile")
def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The q-quantile (0 <= q <= 1) implied by a Prometheus histogram, as Prometheus estimates it.

    buckets: cumulative ``(upper bound "le", count of observations <= le)`` in increasing le, the
    last one ``(math.inf, total)``. Rank = q * total. Find the first bucket whose count >= rank
    and that holds at least one observation; inside it assume observations are spread evenly:
    result = lower + (upper - lower) * (rank - count below) / (count in bucket), where lower is
    the previous bucket's le (0 for the first bucket). So q = 0 gives the lower bound of the first
    bucket that holds an observation (empty buckets before it are skipped). If that bucket is the
    +Inf one, return the largest finite le. NaN when total is 0.
    """
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    previous_le, previous_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank and count > previous_count:
            if math.isinf(le):
                return previous_le
            return previous_le + (le - previous_le) * (rank - previous_count) / (count - previous_count)
        previous_le, previous_count = le, count
    return previous_le
