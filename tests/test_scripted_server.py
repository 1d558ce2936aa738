"""The scripted server: exact timing, a log of what it saw, and (with slots) a queue of known capacity."""

from __future__ import annotations

import pytest

from course_lib import loadtest
from course_lib.server.scripted import ScriptedServer


def test_without_slots_every_answer_streams_at_once():
    with ScriptedServer(num_tokens=4, first_delay_s=0.05, gap_s=0.05) as server:
        records = loadtest.burst(server.url, ["a", "b", "c"], max_tokens=4)
    assert [len(r["chunk_times"]) for r in records] == [4, 4, 4]
    assert all(r["num_output_tokens"] == 4 and r["finish_reason"] == "length" for r in records)
    assert len(server.arrivals) == 3 and server.capacity_per_s() == float("inf")


def test_slots_make_a_first_come_first_served_queue_of_known_capacity():
    server = ScriptedServer(num_tokens=5, first_delay_s=0.06, gap_s=0.06, slots=2)
    assert server.service_s(5) == pytest.approx(0.3) and server.capacity_per_s(5) == pytest.approx(2 / 0.3)
    server.start()
    try:
        records = loadtest.burst(server.url, [f"p{i}" for i in range(6)], max_tokens=5)
    finally:
        server.stop()
    starts = sorted(server.started)
    # Three waves of two: each wave starts when the previous one has streamed its whole answer.
    assert starts[1] - starts[0] < 0.1
    assert starts[2] - starts[0] >= 0.3 - 0.02 and starts[4] - starts[2] >= 0.3 - 0.02
    ttfts = sorted(r["chunk_times"][0] - r["sent_at"] for r in records)
    assert ttfts[-1] >= ttfts[0] + 0.55  # the last wave waited for two answers before its first token


def test_a_scripted_server_refuses_nonsense_slots_and_a_second_start():
    with pytest.raises(ValueError, match="slots"):
        ScriptedServer(slots=0)
    with ScriptedServer() as server:
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
