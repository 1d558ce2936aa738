"""Routing policies: which replica serves the next request.

A policy is an object with ``choose(prompt_token_ids, outstanding) -> replica index``:
``prompt_token_ids`` is the request's prompt (list of ints) and ``outstanding[i]`` the number of
requests replica ``i`` is serving right now (sent, not yet answered). Both are plain data, so a
student's policy can run inside the real router.

- ``RoundRobin``: replicas in turn. Even, blind to load and to caches.
- ``LeastOutstanding``: the replica with the fewest requests in flight (ties: the lowest index).
  Follows load, blind to caches.
- ``PrefixAwareRouter`` (Lab 0.5 chapter 4): requests whose prompts start with the same blocks go
  to the same replica, so that replica's prefix cache hits. The leading blocks are hashed
  (``prefix_key``), the key is placed on a consistent-hash ring (``HashRing``), and the request
  goes to the first replica clockwise whose load is under a cap, so one hot prefix cannot swamp
  a replica (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam, 2018).

Every hash is ``stable_hash`` (BLAKE2b, 8 bytes, big-endian): Python's ``hash()`` of a string
changes from one process to the next, and every router process must agree.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence

from course_lib.exercises import exercise

__all__ = ["HashRing", "LeastOutstanding", "POLICIES", "PrefixAwareRouter", "RoundRobin", "prefix_key",
           "stable_hash", "token_bytes"]


def stable_hash(data: bytes) -> int:
    """A 64-bit integer hash of ``data`` that is the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def token_bytes(token_ids: Sequence[int]) -> bytes:
    """Token ids as bytes to hash: each id as 4 little-endian bytes."""
    return b"".join(int(token).to_bytes(4, "little") for token in token_ids)


def _check_outstanding(outstanding: Sequence[int], num_replicas: int) -> None:
    if len(outstanding) != num_replicas:
        raise ValueError(f"outstanding must have one count per replica ({num_replicas}), got {len(outstanding)}")


class RoundRobin:
    """Replicas in turn: 0, 1, ..., n-1, 0, ..."""

    def __init__(self, num_replicas: int) -> None:
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an integer >= 1, got {num_replicas!r}")
        self.num_replicas = num_replicas
        self._next = 0

    def choose(self, prompt_token_ids: Sequence[int], outstanding: Sequence[int]) -> int:
        _check_outstanding(outstanding, self.num_replicas)
        replica, self._next = self._next, (self._next + 1) % self.num_replicas
        return replica


class LeastOutstanding:
    """The replica with the fewest requests in flight; ties go to the lowest index."""

    def __init__(self, num_replicas: int) -> None:
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an integer >= 1, got {num_replicas!r}")
        self.num_replicas = num_replicas

    def choose(self, prompt_token_ids: Sequence[int], outstanding: Sequence[int]) -> int:
        _check_outstanding(outstanding, self.num_replicas)
        return min(range(self.num_replicas), key=lambda replica: (outstanding[replica], replica))


@exercise("lab05-serving", "04_replicas", "prefix_key")
def prefix_key(prompt_token_ids: Sequence[int], block_size: int, max_blocks: int) -> int | None:
    """The routing key of a prompt: ``stable_hash(token_bytes(leading tokens))``, or None.

    The leading tokens are the prompt's first ``min(max_blocks, number of FULL blocks)`` blocks
    of ``block_size`` tokens: exactly what a replica's prefix cache can share. A prompt shorter
    than one block has no key (None). Two prompts with the same first blocks get the same key,
    whatever follows.
    """
    num_blocks = min(max_blocks, len(prompt_token_ids) // block_size)
    if num_blocks == 0:
        return None
    return stable_hash(token_bytes(prompt_token_ids[: num_blocks * block_size]))


@exercise("lab05-serving", "04_replicas", "hash_ring")
class HashRing:
    """Consistent hashing: replicas and keys on one circle of 64-bit positions.

    Replica ``r`` (an int) sits at ``virtual_nodes`` positions ``stable_hash(f"{r}#{i}".encode())``
    for i in 0..virtual_nodes-1. ``walk(key)`` starts at the first position >= key (wrapping
    around past the largest to the smallest) and goes clockwise, listing each replica the first
    time it is met: the preference order for that key. Adding or removing a replica moves only
    the keys whose first replica changes (about 1/n of them), unlike ``key % n``.
    """

    def __init__(self, replicas: Sequence[int], virtual_nodes: int = 64) -> None:
        if not isinstance(virtual_nodes, int) or virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be an integer >= 1, got {virtual_nodes!r}")
        self.virtual_nodes = virtual_nodes
        self._positions: list[int] = []
        self._owners: list[int] = []
        for replica in replicas:
            self.add(replica)

    def add(self, replica: int) -> None:
        """Put ``replica``'s virtual nodes on the ring (ValueError if it is already there)."""
        if replica in self._owners:
            raise ValueError(f"replica {replica!r} is already on the ring")
        for index in range(self.virtual_nodes):
            position = stable_hash(f"{replica}#{index}".encode())
            at = bisect.bisect_left(self._positions, position)
            self._positions.insert(at, position)
            self._owners.insert(at, replica)

    def remove(self, replica: int) -> None:
        """Take ``replica``'s virtual nodes off the ring (ValueError if it is not there)."""
        if replica not in self._owners:
            raise ValueError(f"replica {replica!r} is not on the ring")
        kept = [(p, o) for p, o in zip(self._positions, self._owners) if o != replica]
        self._positions = [p for p, _ in kept]
        self._owners = [o for _, o in kept]

    def walk(self, key: int) -> list[int]:
        """Every replica once, in clockwise order from the first position >= key."""
        if not self._positions:
            return []
        start = bisect.bisect_left(self._positions, key)
        order: list[int] = []
        for step in range(len(self._positions)):
            owner = self._owners[(start + step) % len(self._positions)]
            if owner not in order:
                order.append(owner)
        return order


@exercise("lab05-serving", "04_replicas", "prefix_aware_router")
class PrefixAwareRouter:
    """Same leading blocks, same replica, unless that replica is over its load cap.

    choose(prompt_token_ids, outstanding):
      1. key = prefix_key(prompt_token_ids, block_size, max_blocks); a prompt without a key goes to
         the least-loaded replica (fewest outstanding, ties: lowest index);
      2. cap = ceil(load_factor * (sum(outstanding) + 1) / num_replicas): the most requests one
         replica may hold once this one is added (load_factor >= 1; at least one replica is always
         under it);
      3. the first replica of ``HashRing.walk(key)`` with outstanding < cap.
    """

    def __init__(self, num_replicas: int, *, block_size: int = 16, max_blocks: int = 4, load_factor: float = 1.25,
                 virtual_nodes: int = 64) -> None:
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an integer >= 1, got {num_replicas!r}")
        if not load_factor >= 1:
            raise ValueError(f"load_factor must be >= 1, got {load_factor!r}")
        self.num_replicas = num_replicas
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.load_factor = load_factor
        self.ring = HashRing(range(num_replicas), virtual_nodes)

    def choose(self, prompt_token_ids: Sequence[int], outstanding: Sequence[int]) -> int:
        if len(outstanding) != self.num_replicas:
            raise ValueError(f"outstanding must have {self.num_replicas} counts, got {len(outstanding)}")
        key = prefix_key(prompt_token_ids, self.block_size, self.max_blocks)
        if key is None:
            return min(range(self.num_replicas), key=lambda replica: (outstanding[replica], replica))
        cap = math.ceil(self.load_factor * (sum(outstanding) + 1) / self.num_replicas)
        for replica in self.ring.walk(key):
            if outstanding[replica] < cap:
                return replica
        raise AssertionError("unreachable: some replica is always under the cap")


POLICIES = {"round-robin": RoundRobin, "least-outstanding": LeastOutstanding, "prefix-aware": PrefixAwareRouter}
"""Policy names of ``course serve --router`` -> the class, built with the number of replicas."""
