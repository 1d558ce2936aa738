"""The Lab 0.5 checks (course_lib.checks.serving) accept the reference answers and reject the demo
students' bugs and other typical mistakes, with feedback that names the mistake.

Answers come from the solution notebooks' answer cells (run with exec, not the notebooks), so the
checks see code defined outside course_lib, as a student's would be.
"""

from __future__ import annotations

import linecache
import math
import runpy
from pathlib import Path

import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import serving as checks
from tests.notebook_answers import answer_sources, hidden_cases

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "solutions" / "lab05-serving"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab05-serving"


def student(notebook: str, replacements: dict[str, str] | None = None) -> dict:
    """The notebook's answer cells run one by one in one namespace, each registered as a cell is in a kernel
    (linecache), so a function's source can be read and shipped to a worker as the experiment does."""
    namespace = {"__name__": "__main__"}
    for grade_id, source in answer_sources(LAB / f"{notebook}.ipynb").items():
        if grade_id == "load_generator":
            continue
        source = (replacements or {}).get(grade_id, source)
        filename = f"<{notebook}: answer {grade_id}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


def demo(notebook: str, name: str) -> dict:
    return student(notebook, runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"])


def hidden(notebook: str, grade_id: str, name: str) -> list:
    """The cases a graded test cell's hidden region writes (the kit does not ship them)."""
    return hidden_cases(LAB / f"{notebook}.ipynb", grade_id, name, checks)


def more_streams() -> list:
    return hidden("01_metrics_from_the_wire", "test_parse_stream", "more_streams")


# ----- chapter 1 ---------------------------------------------------------------------------------


def test_chapter1_reference_passes():
    ns = student("01_metrics_from_the_wire")
    for description, lines in checks.crafted_streams():
        checks.check_parse_stream(ns["parse_stream"], lines, description)
    lines = checks.live_stream(num_tokens=5)
    checks.check_parse_stream(ns["parse_stream"], lines, "live")
    parsed = ns["parse_stream"](lines)
    assert len(parsed["chunk_times"]) == 5 and parsed["num_output_tokens"] == 5 and parsed["done"]
    checks.check_request_metrics(ns["request_metrics"], lines[0][0] - 0.01, parsed, "live")
    checks.check_histogram_quantile(ns["histogram_quantile"], 0.5, [(0.1, 2), (0.5, 5), (math.inf, 6)], "worked")


def test_parse_stream_that_counts_the_role_event_fails():
    bad = '''
import json
def parse_stream(timed_lines):
    out = {"chunk_times": [], "text": "", "num_output_tokens": None, "finish_reason": None, "done": False}
    for t, line in timed_lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            out["done"] = True
            break
        event = json.loads(payload)
        if event.get("usage"):
            out["num_output_tokens"] = event["usage"]["completion_tokens"]
        for choice in event.get("choices", []):
            out["chunk_times"].append(t)   # every event, the role-only one too
            out["text"] += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            out["finish_reason"] = choice.get("finish_reason") or out["finish_reason"]
    return out
'''
    ns = student("01_metrics_from_the_wire", {"parse_stream": bad})
    with pytest.raises(CheckFailed, match="chunk_times"):
        for description, lines in checks.crafted_streams():
            checks.check_parse_stream(ns["parse_stream"], lines, description)


def visible_streams(parse_stream) -> None:
    for description, lines in checks.crafted_streams():
        checks.check_parse_stream(parse_stream, lines, description)


@pytest.mark.parametrize("name, hint", [("buggy-sse-data-space-only", "without a space"),
                                        ("buggy-sse-counts-after-done", "stop reading at 'data: [DONE]'")])
def test_demo_sse_parsers_fail_a_visible_stream_with_a_hint_that_names_the_bug(name, hint):
    ns = demo("01_metrics_from_the_wire", name)
    with pytest.raises(CheckFailed, match="parse_stream") as failure:
        visible_streams(ns["parse_stream"])
    assert hint in str(failure.value) and "expected:" in str(failure.value) and "got:" in str(failure.value)
    with pytest.raises(CheckFailed):  # the graded streams catch it too
        for description, lines in more_streams():
            checks.check_parse_stream(ns["parse_stream"], lines, description)


def test_the_graded_streams_pass_the_reference():
    ns = student("01_metrics_from_the_wire")
    for description, lines in checks.crafted_streams() + more_streams():
        checks.check_parse_stream(ns["parse_stream"], lines, description)
    assert not ns["parse_stream"](more_streams()[2][1])["done"]


def test_a_parser_that_slices_six_characters_gets_the_json_hint():
    source = answer_sources(LAB / "01_metrics_from_the_wire.ipynb")["parse_stream"].replace(
        'payload = line[len("data:"):].strip()', "payload = line[6:]")
    ns = student("01_metrics_from_the_wire", {"parse_stream": source})
    with pytest.raises(CheckFailed, match="not JSON: take what follows 'data:'"):
        visible_streams(ns["parse_stream"])


def test_demo_tpot_all_tokens_fails_request_metrics_only():
    ns = demo("01_metrics_from_the_wire", "buggy-tpot-all-tokens")
    worked = {"chunk_times": [10.30, 10.35, 10.45], "text": "abc", "num_output_tokens": 4, "finish_reason": "length",
              "done": True}
    with pytest.raises(CheckFailed, match="tpot"):
        checks.check_request_metrics(ns["request_metrics"], 10.0, worked, "worked")
    for description, lines in checks.crafted_streams():
        checks.check_parse_stream(ns["parse_stream"], lines, description)


def test_histogram_quantile_at_q0_skips_empty_leading_buckets():
    ns = student("01_metrics_from_the_wire")
    buckets = [(0.05, 0), (0.1, 0), (0.2, 4), (math.inf, 5)]
    checks.check_histogram_quantile(ns["histogram_quantile"], 0.0, buckets, "q = 0")
    assert ns["histogram_quantile"](0.0, buckets) == 0.1  # the lower bound of the first bucket that holds one
    assert ns["histogram_quantile"](0.0, [(0.05, 2), (math.inf, 2)]) == 0.0
    old = answer_sources(LAB / "01_metrics_from_the_wire.ipynb")["histogram_quantile"].replace(
        "if count >= rank and count > previous_count:", "if count >= rank:\n            if count == previous_count:\n"
                                                        "                return le")
    assert old != answer_sources(LAB / "01_metrics_from_the_wire.ipynb")["histogram_quantile"]
    with pytest.raises(CheckFailed, match="first non-empty bucket"):
        checks.check_histogram_quantile(student("01_metrics_from_the_wire", {"histogram_quantile": old})[
            "histogram_quantile"], 0.0, buckets, "q = 0")


def test_histogram_quantile_without_interpolation_fails():
    bad = "def histogram_quantile(q, buckets):\n    total = buckets[-1][1]\n" \
          "    return next(le for le, c in buckets if c >= q * total)\n"
    ns = student("01_metrics_from_the_wire", {"histogram_quantile": bad})
    with pytest.raises(CheckFailed, match="histogram_quantile"):
        checks.check_histogram_quantile(ns["histogram_quantile"], 0.5, [(0.1, 2), (0.5, 5), (math.inf, 6)], "worked")


# ----- chapter 2 ---------------------------------------------------------------------------------


def test_chapter2_reference_passes():
    ns = student("02_load")
    checks.check_poisson_arrivals(ns["poisson_arrival_times"])
    checks.check_open_loop(ns["open_loop"])
    checks.check_mean_in_flight(ns["mean_in_flight"], checks.random_in_flight_records(1), 0.5, 4.5)


def test_evenly_spaced_or_fixed_count_arrivals_fail():
    even = "def poisson_arrival_times(rate_per_s, duration_s, seed):\n" \
           "    return [i / rate_per_s for i in range(1, int(rate_per_s * duration_s)) ]\n"
    fixed = "import random\ndef poisson_arrival_times(rate_per_s, duration_s, seed):\n" \
            "    rng = random.Random(seed)\n" \
            "    return sorted(rng.uniform(0, duration_s) for _ in range(int(rate_per_s * duration_s)))\n"
    for source in (even, fixed):
        ns = student("02_load", {"poisson_arrival_times": source})
        with pytest.raises(CheckFailed):
            checks.check_poisson_arrivals(ns["poisson_arrival_times"])


def test_demo_closed_loop_is_caught_by_the_server_clock():
    ns = demo("02_load", "buggy-closed-loop")
    with pytest.raises(CheckFailed, match="off schedule") as failure:
        checks.check_open_loop(ns["open_loop"])
    got = str(failure.value).split("got:")[1].split("\n")[0]
    assert "-" not in got  # times after the first arrival: never negative


def test_demo_poisson_starting_at_zero_fails_on_the_first_arrival():
    ns = demo("02_load", "buggy-poisson-starts-at-zero")
    with pytest.raises(CheckFailed, match="first arrival should be the first gap after 0"):
        checks.check_poisson_arrivals(ns["poisson_arrival_times"])


def test_arrivals_from_another_generator_fail_the_exact_comparison():
    source = ("import random\ndef poisson_arrival_times(rate_per_s, duration_s, seed):\n"
              "    if not rate_per_s > 0 or not duration_s > 0:\n        raise ValueError('bad')\n"
              "    rng = random.Random(seed + 1)\n    times, clock = [], rng.expovariate(rate_per_s)\n"
              "    while clock < duration_s:\n        times.append(clock)\n        clock += rng.expovariate(rate_per_s)\n"
              "    return times\n")
    with pytest.raises(CheckFailed, match="running sums"):
        checks.check_poisson_arrivals(student("02_load", {"poisson_arrival_times": source})["poisson_arrival_times"])


def test_demo_in_flight_not_clipped_at_start_fails_the_visible_window_with_its_hint():
    ns = demo("02_load", "buggy-in-flight-not-clipped-at-start")
    worked = [{"sent_at": 0.0, "done_at": 2.0}, {"sent_at": 1.0, "done_at": 3.0}, {"sent_at": 3.0, "done_at": 6.0}]
    checks.check_mean_in_flight(ns["mean_in_flight"], worked, 0.0, 4.0)  # nothing starts before 0
    with pytest.raises(CheckFailed, match="mean_in_flight over") as failure:
        checks.check_mean_in_flight(ns["mean_in_flight"], worked, 1.0, 5.0)
    assert "max(sent_at, start)" in str(failure.value) and "expected: 1.25" in str(failure.value)
    with pytest.raises(CheckFailed):
        checks.check_mean_in_flight(ns["mean_in_flight"], checks.random_in_flight_records(1), 0.5, 4.5)  # hidden


def test_mean_in_flight_without_the_end_clip_gets_its_own_hint():
    source = answer_sources(LAB / "02_load.ipynb")["mean_in_flight"].replace('min(r["done_at"], end)', 'r["done_at"]')
    ns = student("02_load", {"mean_in_flight": source})
    worked = [{"sent_at": 0.0, "done_at": 2.0}, {"sent_at": 1.0, "done_at": 3.0}, {"sent_at": 3.0, "done_at": 6.0}]
    with pytest.raises(CheckFailed, match="min\\(done_at, end\\)"):
        checks.check_mean_in_flight(ns["mean_in_flight"], worked, 0.0, 4.0)


@pytest.mark.parametrize("source, what", [
    ("def poisson_arrival_times(rate_per_s, duration_s, seed):\n    return (0.5 * i for i in range(1, 5))\n",
     "list of floats"),
    ("import random\ndef poisson_arrival_times(rate_per_s, duration_s, seed):\n    rng = random.Random(seed)\n"
     "    return [rng.uniform(0.1, duration_s) for _ in range(int(rate_per_s * duration_s))]\n", "should increase"),
    ("import random\ndef poisson_arrival_times(rate_per_s, duration_s, seed):\n    rng = random.Random(seed)\n"
     "    times, clock = [], rng.expovariate(rate_per_s)\n    while clock < duration_s + 1:\n"
     "        times.append(clock)\n        clock += rng.expovariate(rate_per_s)\n    return times\n",
     "lie in \\[0, duration_s\\)"),
    ("import random\ndef poisson_arrival_times(rate_per_s, duration_s, seed):\n    rng = random.Random(seed)\n"
     "    times, clock = [], rng.expovariate(rate_per_s)\n    while clock < duration_s:\n"
     "        times.append(clock)\n        clock += rng.expovariate(rate_per_s)\n    return times\n",
     "should raise ValueError"),
])
def test_every_poisson_failure_says_expected_got_and_a_hint(source, what):
    ns = student("02_load", {"poisson_arrival_times": source})
    with pytest.raises(CheckFailed, match=what) as failure:
        checks.check_poisson_arrivals(ns["poisson_arrival_times"])
    message = str(failure.value)
    assert "expected:" in message and "got:" in message and "hint:" in message


def test_demo_records_in_completion_order_fail():
    ns = demo("02_load", "buggy-records-in-completion-order")
    with pytest.raises(CheckFailed, match="schedule order"):
        checks.check_open_loop(ns["open_loop"])


def test_generator_that_invents_timings_fails():
    liar = '''
import asyncio, time
import httpx
from course_lib.loadtest import stream_request

async def open_loop(url, schedule):
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        async def send(item):
            await asyncio.sleep(max(0.0, start + item["at"] - time.perf_counter()))
            record = await stream_request(client, url, item["prompt"], item["max_tokens"], t0=start)
            record["chunk_times"] = [record["sent_at"] + 0.01 * i for i in range(len(record["chunk_times"]))]
            return {"scheduled_at": item["at"], **record}
        return list(await asyncio.gather(*(send(item) for item in schedule)))
'''
    ns = student("02_load", {"open_loop": liar})
    with pytest.raises(CheckFailed, match="make them up"):
        checks.check_open_loop(ns["open_loop"])


# ----- chapter 3 ---------------------------------------------------------------------------------


def test_chapter3_reference_passes():
    ns = student("03_admission")
    for description, request, state, limits in (checks.admission_cases()
                                                + hidden("03_admission", "test_admission_decisions", "more_cases")):
        checks.check_admission_decision(ns["admission_policy"], request, state, limits, description)


@pytest.mark.slow
def test_chapter3_reference_passes_live():
    checks.check_admission_live(student("03_admission")["admission_policy"])


def visible_admission_decisions(policy) -> None:
    for description, request, state, limits in checks.admission_cases():
        checks.check_admission_decision(policy, request, state, limits, description)


def test_the_visible_cases_are_the_ones_the_test_cell_shows():
    import nbformat

    cell = next(c for c in nbformat.read(LAB / "03_admission.ipynb", as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "test_admission_decisions")
    visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
    assert "in checks.admission_cases():" in visible


def test_demo_admission_counting_running_only_fails_a_visible_decision():
    ns = demo("03_admission", "buggy-admission-counts-running-only")
    with pytest.raises(CheckFailed, match="worked example") as failure:
        visible_admission_decisions(ns["admission_policy"])
    assert "waiting_blocks" in str(failure.value)


def test_demo_admission_floor_fails_a_visible_decision():
    ns = demo("03_admission", "buggy-admission-floor")
    with pytest.raises(CheckFailed, match="partial last block") as failure:
        visible_admission_decisions(ns["admission_policy"])
    assert "ceil" in str(failure.value)


def test_demo_admission_429_before_400_fails_a_visible_decision_with_the_order_hint():
    ns = demo("03_admission", "buggy-admission-429-before-400")
    with pytest.raises(CheckFailed, match="400 rules come first") as failure:
        visible_admission_decisions(ns["admission_policy"])
    assert "expected: 400" in str(failure.value) and "got:      429" in str(failure.value)


@pytest.mark.slow
def test_admit_everything_fails_the_live_check():
    ns = student("03_admission", {"admission_policy": "def admission_policy(request, state, limits):\n"
                                                      "    return {'status': 200}\n"})
    with pytest.raises(CheckFailed, match="waiting queue reached"):
        checks.check_admission_live(ns["admission_policy"])


# ----- chapter 4 ---------------------------------------------------------------------------------


def test_chapter4_reference_passes():
    ns = student("04_replicas")
    checks.check_prefix_key(ns["prefix_key"])
    checks.check_hash_ring(ns["HashRing"])
    checks.check_hash_ring(ns["HashRing"], virtual_nodes=1)
    checks.check_prefix_router(ns["PrefixAwareRouter"])
    checks.check_prefix_router(ns["PrefixAwareRouter"], num_replicas=4, load_factor=1.0, seed=1)


def test_demo_whole_prompt_hash_fails_key_and_router():
    ns = demo("04_replicas", "buggy-whole-prompt-hash")
    with pytest.raises(CheckFailed):
        checks.check_prefix_key(ns["prefix_key"])
    with pytest.raises(CheckFailed):
        checks.check_prefix_router(ns["PrefixAwareRouter"])
    checks.check_hash_ring(ns["HashRing"])


def test_router_without_load_cap_fails():
    source = answer_sources(LAB / "04_replicas.ipynb")["prefix_aware_router"].replace(
        "if outstanding[replica] < cap:", "if True:")
    ns = student("04_replicas", {"prefix_aware_router": source})
    with pytest.raises(CheckFailed, match="cap"):
        checks.check_prefix_router(ns["PrefixAwareRouter"])


def test_demo_ring_strictly_after_fails_on_a_key_at_a_position():
    ns = demo("04_replicas", "buggy-ring-strictly-after")
    with pytest.raises(CheckFailed, match="exactly a position") as failure:
        checks.check_hash_ring(ns["HashRing"])
    assert "bisect_left" in str(failure.value)
    checks.check_prefix_router(ns["PrefixAwareRouter"])


def test_router_feedback_shows_the_key_the_walk_and_the_cap():
    source = answer_sources(LAB / "04_replicas.ipynb")["prefix_aware_router"].replace(
        "for replica in self.ring.walk(key):", "for replica in reversed(self.ring.walk(key)):")
    ns = student("04_replicas", {"prefix_aware_router": source})
    with pytest.raises(CheckFailed, match="the ring walks") as failure:
        checks.check_prefix_router(ns["PrefixAwareRouter"])
    assert "key is 0x" in str(failure.value) and "the cap is ceil(" in str(failure.value)


def test_modulo_hashing_is_not_a_ring():
    source = '''
class HashRing:
    def __init__(self, replicas, virtual_nodes=64):
        self.replicas = list(replicas)
    def add(self, replica):
        self.replicas.append(replica)
    def remove(self, replica):
        self.replicas.remove(replica)
    def walk(self, key):
        start = key % len(self.replicas)
        return self.replicas[start:] + self.replicas[:start]
'''
    ns = student("04_replicas", {"hash_ring": source})
    with pytest.raises(CheckFailed):
        checks.check_hash_ring(ns["HashRing"])


# ----- chapter 5 ---------------------------------------------------------------------------------


def test_chapter5_reference_passes():
    ns = student("05_disaggregation")
    checks.check_pack_kv(ns["pack_kv"], 0, [7, 2, 5], 10)
    checks.check_pack_kv(ns["pack_kv"], 3, [9, 9, 1], 5)
    checks.check_unpack_kv(ns["unpack_kv"], 0, [1, 9, 3], 10)
    checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])


def test_demo_pack_whole_blocks_fails_pack_and_engine():
    ns = demo("05_disaggregation", "buggy-pack-whole-blocks")
    with pytest.raises(CheckFailed, match="shape"):
        checks.check_pack_kv(ns["pack_kv"], 0, [7, 2, 5], 10)
    with pytest.raises(CheckFailed, match="shape of the payload"):
        checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])
    checks.check_unpack_kv(ns["unpack_kv"], 0, [1, 9, 3], 10)


def test_a_helper_in_the_functions_own_cell_travels_with_it():
    helper_cell = answer_sources(LAB / "05_disaggregation.ipynb")["pack_kv"].replace(
        "    num_layers, _, _, block_size, num_kv_heads, head_dim = storage.shape\n",
        "    num_layers, _, _, block_size, num_kv_heads, head_dim = storage.shape\n"
        "    blocks_needed = blocks_for(num_tokens, block_size)\n").replace(
        "def pack_kv(", "def blocks_for(num_tokens, block_size):\n    return -(-num_tokens // block_size)\n\n\n"
        "print('a quick try in the cell, left home')\n\n\ndef pack_kv(")
    assert "blocks_for(num_tokens" in helper_cell
    ns = student("05_disaggregation", {"pack_kv": helper_cell})
    checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])


def test_a_helper_in_another_cell_is_a_global_of_the_notebook_and_travels():
    """What course check and the grader both run: the helper of pack_kv's cell reaches the decode side too."""
    pack_cell = answer_sources(LAB / "05_disaggregation.ipynb")["pack_kv"].replace(
        "def pack_kv(", "def token_slots(block_table, num_tokens, block_size):\n"
        "    positions = torch.arange(num_tokens)\n"
        "    return torch.as_tensor(list(block_table), dtype=torch.long)[positions // block_size], "
        "positions % block_size\n\n\ndef pack_kv(")
    unpack_cell = ("def unpack_kv(payload, storage, block_table):\n"
                   "    blocks, offsets = token_slots(block_table, payload.shape[2], storage.shape[3])\n"
                   "    storage[:, :, blocks, offsets] = payload\n    return storage\n")
    ns = student("05_disaggregation", {"pack_kv": pack_cell, "unpack_kv": unpack_cell})
    checks.check_unpack_kv(ns["unpack_kv"], 0, [1, 9, 3], 10)
    checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])


def test_demo_unpack_into_a_clone_fails_unpack_and_the_engine_with_the_in_place_hint():
    ns = demo("05_disaggregation", "buggy-unpack-into-a-clone")
    checks.check_pack_kv(ns["pack_kv"], 0, [7, 2, 5], 10)
    with pytest.raises(CheckFailed, match="left storage unchanged: it returned the right pool, but in a copy") as failure:
        checks.check_unpack_kv(ns["unpack_kv"], 0, [1, 9, 3], 10)
    assert "not into storage.clone()" in str(failure.value)
    with pytest.raises(CheckFailed, match="left the engine's pool unchanged"):
        checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])


def test_unpack_that_ignores_the_table_fails():
    source = '''
import torch
def unpack_kv(payload, storage, block_table):
    n, b = payload.shape[2], storage.shape[3]
    positions = torch.arange(n)
    storage[:, :, positions // b, positions % b] = payload   # the sender's layout, blocks 0, 1, ...
    return storage
'''
    ns = student("05_disaggregation", {"unpack_kv": source})
    with pytest.raises(CheckFailed, match="pool differs"):
        checks.check_unpack_kv(ns["unpack_kv"], 0, [1, 9, 3], 10)
    with pytest.raises(CheckFailed, match="tokens generated"):
        checks.check_transfer_in_engine(ns["pack_kv"], ns["unpack_kv"])


def test_generator_that_ignores_the_schedule_fails():
    eager = '''
import asyncio, time
import httpx
from course_lib.loadtest import stream_request

async def open_loop(url, schedule):
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        async def send(item):
            record = await stream_request(client, url, item["prompt"], item["max_tokens"], t0=start)
            return {"scheduled_at": item["at"], **record}
        return list(await asyncio.gather(*(send(item) for item in schedule)))
'''
    ns = student("02_load", {"open_loop": eager})
    with pytest.raises(CheckFailed, match="off schedule"):
        checks.check_open_loop(ns["open_loop"])


# ----- chapter 6 ---------------------------------------------------------------------------------


def visible_kv_router(router_class) -> None:
    for description, num_replicas, block_size, events in checks.kv_router_scripts():
        checks.check_kv_router(router_class, num_replicas, block_size, events, description)


def test_chapter6_reference_passes_every_case():
    ns = student("06_kv_aware_balancing")
    chapter = "06_kv_aware_balancing"
    for description, text in checks.kv_load_cases() + hidden(chapter, "test_kv_load", "more_texts"):
        checks.check_kv_load(ns["kv_load"], text, description)
    for description, timeline, num_blocks, min_free in (checks.stranded_cases()
                                                        + hidden(chapter, "test_stranded_share", "more_cases")):
        checks.check_stranded_share(ns["stranded_share"], timeline, num_blocks, min_free, description)
    for description, num_replicas, block_size, events in (checks.kv_router_scripts()
                                                          + hidden(chapter, "test_kv_aware_router", "more_scripts")):
        checks.check_kv_router(ns["KVAwareRouter"], num_replicas, block_size, events, description)


@pytest.mark.slow
def test_chapter6_reference_passes_live():
    ns = student("06_kv_aware_balancing")
    checks.check_kv_router_live(ns["KVAwareRouter"], ns["kv_load"])


def test_demo_kv_herd_fails_the_burst_script_with_the_sent_blocks_hint():
    ns = demo("06_kv_aware_balancing", "buggy-kv-herd")
    with pytest.raises(CheckFailed, match="the replica chosen") as failure:
        visible_kv_router(ns["KVAwareRouter"])
    assert "worked example" in str(failure.value) and "blocks sent since >= need" in str(failure.value)
    with pytest.raises(CheckFailed, match="since that report"):  # the burst script names the herd
        checks.check_kv_router(ns["KVAwareRouter"], *checks.kv_router_scripts()[1][1:], checks.kv_router_scripts()[1][0])


@pytest.mark.slow
def test_demo_kv_herd_sends_both_documents_to_one_live_replica():
    ns = demo("06_kv_aware_balancing", "buggy-kv-herd")
    with pytest.raises(CheckFailed, match="documents \\(20 blocks each\\) per replica"):
        checks.check_kv_router_live(ns["KVAwareRouter"], ns["kv_load"])


def test_demo_kv_home_without_need_fails_the_long_request_script_only_there():
    ns = demo("06_kv_aware_balancing", "buggy-kv-home-without-need")
    with pytest.raises(CheckFailed, match="worked example") as failure:
        visible_kv_router(ns["KVAwareRouter"])
    assert "less than this request's need of 20" in str(failure.value)
    description, num_replicas, block_size, events = checks.kv_router_scripts()[2]
    with pytest.raises(CheckFailed, match="fewer than this long request needs") as failure:
        checks.check_kv_router(ns["KVAwareRouter"], num_replicas, block_size, events, description)
    assert "room(home) >= need" in str(failure.value)
    for description, num_replicas, block_size, events in checks.kv_router_scripts()[1:2]:  # bursts without home
        checks.check_kv_router(ns["KVAwareRouter"], num_replicas, block_size, events, description)


KV_LOAD_MISTAKES = {
    "substring search finds the # HELP line first": ("""    for line in metrics_text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = value
    load = {}
    for key, name in samples.items():
        if name not in values:
            raise ValueError(f"no sample {name} in the metrics")
        load[key] = int(float(values[name]))
    return load""", """    load = {}
    for key, name in samples.items():
        line = next((line for line in metrics_text.splitlines() if name in line), None)
        if line is None:
            raise ValueError(f"no sample {name} in the metrics")
        load[key] = int(float(line.split()[-1]))
    return load""", "'# HELP' or '# TYPE' line"),
    "a missing sample read as 0": ("""        if name not in values:
            raise ValueError(f"no sample {name} in the metrics")
        load[key] = int(float(values[name]))""", """        load[key] = int(float(values.get(name, 0)))""", "do not default it to 0"),
    "floats left as floats": ("load[key] = int(float(values[name]))", "load[key] = float(values[name])", "should be an int"),
}


@pytest.mark.parametrize("mistake", sorted(KV_LOAD_MISTAKES))
def test_kv_load_mistakes_fail_a_visible_text_with_a_hint(mistake):
    old, new, hint = KV_LOAD_MISTAKES[mistake]
    original = answer_sources(LAB / "06_kv_aware_balancing.ipynb")["kv_load"]
    assert old in original
    ns = student("06_kv_aware_balancing", {"kv_load": original.replace(old, new)})
    with pytest.raises(CheckFailed) as failure:
        for description, text in checks.kv_load_cases():
            checks.check_kv_load(ns["kv_load"], text, description)
    assert hint in str(failure.value)


def test_stranded_share_that_counts_room_on_the_waiting_replica_fails_a_visible_case():
    original = answer_sources(LAB / "06_kv_aware_balancing.ipynb")["stranded_share"]
    old = " and other != replica"
    assert old in original
    ns = student("06_kv_aware_balancing", {"stranded_share": original.replace(old, "")})
    with pytest.raises(CheckFailed, match="DIFFERENT replica"):
        for description, timeline, num_blocks, min_free in checks.stranded_cases():
            checks.check_stranded_share(ns["stranded_share"], timeline, num_blocks, min_free, description)
