"""The Lab 0.5 checks (course_lib.checks.serving) accept the reference answers and reject the demo
students' bugs and other typical mistakes, with feedback that names the mistake.

Answers come from the solution notebooks' answer cells (run with exec, not the notebooks), so the
checks see code defined outside course_lib, as a student's would be.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import serving as checks
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "solutions" / "lab05-serving"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab05-serving"


def student(notebook: str, replacements: dict[str, str] | None = None) -> dict:
    namespace = {"__name__": "__main__"}
    for grade_id, source in answer_sources(LAB / f"{notebook}.ipynb").items():
        if grade_id == "load_generator":
            continue
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def demo(notebook: str, name: str) -> dict:
    return student(notebook, runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"])


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


def test_demo_tpot_all_tokens_fails_request_metrics_only():
    ns = demo("01_metrics_from_the_wire", "buggy-tpot-all-tokens")
    worked = {"chunk_times": [10.30, 10.35, 10.45], "text": "abc", "num_output_tokens": 4, "finish_reason": "length",
              "done": True}
    with pytest.raises(CheckFailed, match="tpot"):
        checks.check_request_metrics(ns["request_metrics"], 10.0, worked, "worked")
    for description, lines in checks.crafted_streams():
        checks.check_parse_stream(ns["parse_stream"], lines, description)


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
    with pytest.raises(CheckFailed, match="off schedule"):
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
    for description, request, state, limits in checks.admission_cases():
        checks.check_admission_decision(ns["admission_policy"], request, state, limits, description)


@pytest.mark.slow
def test_chapter3_reference_passes_live():
    checks.check_admission_live(student("03_admission")["admission_policy"])


def test_demo_admission_counting_running_only_fails_a_decision():
    ns = demo("03_admission", "buggy-admission-counts-running-only")
    with pytest.raises(CheckFailed, match="waiting requests hold most of the budget"):
        for description, request, state, limits in checks.admission_cases():
            checks.check_admission_decision(ns["admission_policy"], request, state, limits, description)


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
