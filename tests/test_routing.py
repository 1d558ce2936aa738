"""Routing policies (course_lib.server.routing): consistent hashing and bounded loads, as properties."""

from __future__ import annotations

import hashlib
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.server.routing import (
    HashRing, LeastOutstanding, PrefixAwareRouter, RoundRobin, prefix_key, stable_hash, token_bytes)


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
