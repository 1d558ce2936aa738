"""Routing policies (course_lib.server.routing): consistent hashing and bounded loads, as properties."""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.server.routing import (
    HashRing, LeastOutstanding, PrefixAwareRouter, RoundRobin, prefix_key, stable_hash, token_bytes)
from tests.notebook_answers import hidden_cases

ROOT = Path(__file__).resolve().parent.parent


def test_stable_hash_is_blake2b():
    assert stable_hash(b"abc") == int.from_bytes(hashlib.blake2b(b"abc", digest_size=8).digest(), "big")
    assert token_bytes([1, 256]) == b"\x01\x00\x00\x00\x00\x01\x00\x00"


def test_prefix_key_covers_only_leading_full_blocks():
    shared = list(range(100, 164))  # 4 blocks of 16
    assert prefix_key(shared + [1, 2, 3], 16, 4) == prefix_key(shared + [9] * 30, 16, 4)
    assert prefix_key(shared[:20], 16, 4) == prefix_key(shared[:16] + [5] * 10, 16, 4)
    assert prefix_key(list(range(15)), 16, 4) is None
    assert prefix_key(shared, 16, 2) != prefix_key(shared, 16, 4)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.integers(1, 32), st.integers(0, 10**6))
def test_adding_a_replica_moves_keys_only_to_it(num_replicas, virtual_nodes, seed):
    rng = random.Random(seed)
    ring = HashRing(range(num_replicas), virtual_nodes)
    keys = [rng.randrange(2**64) for _ in range(200)]
    before = {key: ring.walk(key)[0] for key in keys}
    ring.add(num_replicas)
    for key in keys:
        after = ring.walk(key)[0]
        assert after == before[key] or after == num_replicas
    ring.remove(num_replicas)
    assert {key: ring.walk(key)[0] for key in keys} == before
    assert sorted(ring.walk(keys[0])) == list(range(num_replicas))


def test_virtual_nodes_even_out_the_shares():
    rng = random.Random(0)
    keys = [rng.randrange(2**64) for _ in range(5000)]
    for virtual_nodes, tolerance in ((128, 0.3), (1, None)):
        ring = HashRing(range(4), virtual_nodes)
        shares = [0] * 4
        for key in keys:
            shares[ring.walk(key)[0]] += 1
        if tolerance is not None:
            assert max(shares) / (len(keys) / 4) < 1 + tolerance, shares


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.floats(1.0, 3.0), st.lists(st.integers(0, 5), min_size=1, max_size=60),
       st.integers(0, 1000))
def test_prefix_aware_router_never_exceeds_its_cap(num_replicas, load_factor, families, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(49152) for _ in range(64)] for _ in range(6)]
    router = PrefixAwareRouter(num_replicas, load_factor=load_factor, virtual_nodes=8)
    outstanding, in_flight = [0] * num_replicas, []
    for family in families:
        cap = math.ceil(load_factor * (sum(outstanding) + 1) / num_replicas)
        replica = router.choose(prompts[family] + [rng.randrange(100)], outstanding)
        assert outstanding[replica] < cap
        outstanding[replica] += 1
        in_flight.append(replica)
        if rng.random() < 0.4:
            outstanding[in_flight.pop(rng.randrange(len(in_flight)))] -= 1


def test_prefix_aware_router_keeps_a_prefix_on_one_replica_when_idle():
    router = PrefixAwareRouter(4)
    prompt = list(range(1000, 1064))
    chosen = {router.choose(prompt + [tail], [0, 0, 0, 0]) for tail in range(20)}
    assert len(chosen) == 1


def test_round_robin_and_least_outstanding():
    robin = RoundRobin(3)
    assert [robin.choose([1], [0, 0, 0]) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert LeastOutstanding(3).choose([1], [2, 1, 1]) == 1
    with pytest.raises(ValueError, match="outstanding"):
        LeastOutstanding(3).choose([1], [0, 0])


# ----- KV-aware balancing (course_lib.server.balancing, Lab 0.5 chapter 6) ---------------------------

from course_lib.server.balancing import KVAwareRouter, MetricsRouting, kv_load, stranded_share  # noqa: E402


def _load(free: int, waiting: int = 0) -> dict:
    return {"blocks_used": 64 - free, "blocks_free": free, "num_waiting": waiting, "num_running": 0, "preemptions": 0}


def test_kv_router_worked_example_of_the_chapter():
    router = KVAwareRouter(2)
    router.report(0, _load(30))
    router.report(1, _load(50))
    prompt = [1] * 300
    assert [router.choose(prompt, 20, 0) for _ in range(3)] == [0, 1, 1]
    router.report(1, _load(50))  # a new report forgets what was sent to replica 1, not to replica 0
    assert router.sent == [20, 0]


def test_kv_router_refuses_to_choose_before_every_replica_reported():
    router = KVAwareRouter(2)
    router.report(0, _load(30))
    with pytest.raises(ValueError, match=r"\[1\]"):
        router.choose([1], 1, None)
    with pytest.raises(ValueError, match="replica"):
        router.report(2, _load(1))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 3)), min_size=5, max_size=5),
       st.lists(st.tuples(st.integers(1, 600), st.integers(1, 200), st.one_of(st.none(), st.integers(0, 4))),
                min_size=1, max_size=40))
def test_kv_router_prefers_home_then_the_shortest_queue_then_the_most_room(num_replicas, reports, requests):
    """Between two reports: affinity while home has room and no queue; away from home, never a replica with a
    longer queue than another's, and an overcommit only where no replica with as short a queue had more room."""
    router = KVAwareRouter(num_replicas, block_size=16)
    free = [reports[r][0] for r in range(num_replicas)]
    for replica in range(num_replicas):
        router.report(replica, _load(free[replica], reports[replica][1]))
    sent = [0] * num_replicas
    for prompt_len, max_tokens, home in requests:
        home = None if home is None else home % num_replicas
        need = math.ceil((prompt_len + max_tokens) / 16)
        room = [f - s for f, s in zip(free, sent)]
        chosen = router.choose([3] * prompt_len, max_tokens, home)
        waiting = [reports[r][1] for r in range(num_replicas)]
        if home is not None and room[home] >= need and waiting[home] == 0:
            assert chosen == home  # affinity kept while home has room and nobody waits
        else:
            shortest = [r for r in range(num_replicas) if waiting[r] == min(waiting)]
            assert chosen in shortest and room[chosen] == max(room[r] for r in shortest)
        sent[chosen] += need
    assert router.sent == sent


def test_kv_load_agrees_with_prometheus_own_parser():
    from prometheus_client.parser import text_string_to_metric_families

    from course_lib.checks import serving
    from course_lib.server.balancing import KV_METRICS

    texts = serving.kv_load_cases() + hidden_cases(ROOT / "solutions" / "lab05-serving" / "06_kv_aware_balancing.ipynb",
                                                    "test_kv_load", "more_texts", serving)
    for description, text in texts:
        samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
        if all(name in samples for name in KV_METRICS.values()):
            assert kv_load(text) == {key: int(samples[name]) for key, name in KV_METRICS.items()}, description
        else:
            with pytest.raises(ValueError, match="course_"):
                kv_load(text)


def test_stranded_share_counts_scrapes_with_waiting_here_and_room_elsewhere():
    timeline = [(0, 0, 40, 0), (0, 1, 10, 0), (50, 0, 40, 2), (50, 1, 10, 0), (100, 0, 40, 3), (100, 1, 36, 0),
                (150, 0, 20, 0), (150, 1, 20, 1)]
    assert stranded_share(timeline, 40, 8) == 0.5
    assert stranded_share([(0, 0, 10, 2), (0, 1, 40, 0)], 40, 8) == 0.0  # the free blocks are on the waiting one
    assert stranded_share([], 40, 8) == 0.0


def test_metrics_routing_parses_reports_and_asks_home():
    from course_lib.checks.serving import replica_metrics_text

    policy = MetricsRouting(KVAwareRouter(2), kv_load, home=lambda prompt, outstanding: 1)
    policy.report_metrics(0, replica_metrics_text(10, 54, 0, 1, 0))
    policy.report_metrics(1, replica_metrics_text(60, 4, 0, 3, 0))
    assert policy.loads[1]["blocks_free"] == 4 and len(policy.history) == 2
    assert policy.choose_request([5] * 20, 10, [0, 0]) == 1    # 2 blocks fit at home (4 free)
    assert policy.choose_request([5] * 200, 10, [0, 1]) == 0   # 14 blocks do not: the most room
    assert policy.choose([5] * 20, [1, 1]) == 0                # default max_tokens 16: 3 blocks > 2 left at home
    with pytest.raises(ValueError, match="scrape_interval_s"):
        MetricsRouting(KVAwareRouter(2), kv_load, scrape_interval_s=0)
