"""Where KV memory goes: contiguous reservation against paging, on the same random workload.

The pool is a line of ``pool_slots`` token slots (one slot holds one token's keys and values in
every layer). Time moves in *steps*; one step is one decode iteration of the engine:

1. requests that hold all their tokens leave and give their memory back;
2. requests whose arrival step has come join the waiting queue (first come, first served);
3. every running request produces one token, so it needs one more slot;
4. waiting requests are admitted from the head of the queue while their memory fits; an admitted
   request runs its prompt, so it holds ``prompt_len`` tokens at once.

**Contiguous** (``simulate_contiguous``): on admission a request reserves ``reserve_slots``
consecutive slots (the longest length it may reach), taken first-fit from the free holes, and
keeps them until it leaves. Its reservation holds three kinds of slots at any moment:

- *used*: slots that hold a token now;
- *reserved but unused*: slots for tokens the request will produce later (``final_len - num_tokens``);
- *internal fragmentation*: slots past the request's final length, never used (``size - final_len``).

Free slots between reservations are *external fragmentation* when their hole is too small for the
next reservation (``request_slots``). ``waste_breakdown`` counts all of them for one state.

**Paged** (``simulate_paged``): the same pool cut into blocks of ``block_size`` slots; a request
takes blocks as it grows, through an allocator with ``course_lib.paged.AllocatorProtocol``'s
methods (the reference ``BlockAllocator`` unless you pass your own). Only the last block of a
request can be partly empty, so waste is at most ``block_size - 1`` slots per running request.
When a running request needs a block and none is free, the newest running request is preempted:
it gives its blocks back and waits again at the head of the queue, to run its prompt once more.

Both simulators know each request's final length in advance; the real engine does not, which is
exactly why a contiguous server must reserve the maximum.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from course_lib.exercises import exercise
from course_lib.paged import BlockAllocator

__all__ = [
    "ContiguousSnapshot",
    "PagedSnapshot",
    "Request",
    "Reservation",
    "SimTrace",
    "StepStats",
    "WASTE_KINDS",
    "first_fit",
    "free_holes",
    "paged_waste_bound",
    "random_workload",
    "simulate_contiguous",
    "simulate_paged",
    "summarize_waste",
    "waste_breakdown",
]

# The keys of ``waste_breakdown``'s result; they add up to the pool size (external is part of free).
WASTE_KINDS = ("used", "reserved_unused", "internal", "free", "external")


def _require_int(name: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class Request:
    """One request of a workload.

    request_id: unique int. arrival_step: first step it may be admitted (>= 0). prompt_len: prompt
    tokens (>= 1). output_len: tokens it generates (>= 0); it holds ``final_len`` tokens at the end.
    max_tokens: the cap the client asked for (>= output_len; None means output_len). A server that
    cannot know output_len in advance reserves ``max_len = prompt_len + max_tokens``.
    """

    request_id: int
    arrival_step: int
    prompt_len: int
    output_len: int
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _require_int("arrival_step", self.arrival_step, 0)
        _require_int("prompt_len", self.prompt_len, 1)
        _require_int("output_len", self.output_len, 0)
        if self.max_tokens is not None:
            _require_int("max_tokens", self.max_tokens, self.output_len)

    @property
    def max_len(self) -> int:
        """The longest the request may grow: prompt plus the max_tokens cap."""
        return self.prompt_len + (self.output_len if self.max_tokens is None else self.max_tokens)

    @property
    def final_len(self) -> int:
        """Tokens the request holds when it finishes: prompt plus output."""
        return self.prompt_len + self.output_len


def random_workload(num_requests: int, *, seed: int, mean_prompt_len: int = 200, mean_output_len: int = 200,
                    max_tokens_choices: Sequence[int] = (256, 512, 1024, 2048),
                    arrivals_per_step: float = 0.25) -> list[Request]:
    """A reproducible workload: Poisson arrivals, exponential prompt and output lengths.

    Each request picks a ``max_tokens`` cap from ``max_tokens_choices`` (clients ask for very
    different caps) and generates an exponentially distributed number of tokens below it (many
    short answers, a few long ones, as in chat traffic). Returns requests sorted by arrival.
    """
    _require_int("num_requests", num_requests, 0)
    if not arrivals_per_step > 0:
        raise ValueError(f"arrivals_per_step must be > 0, got {arrivals_per_step!r}")
    if not max_tokens_choices or min(max_tokens_choices) < 1:
        raise ValueError(f"max_tokens_choices must hold integers >= 1, got {max_tokens_choices!r}")
    rng = random.Random(seed)
    requests = []
    clock = 0.0
    for request_id in range(num_requests):
        clock += rng.expovariate(arrivals_per_step)
        prompt_len = 1 + int(rng.expovariate(1 / mean_prompt_len))
        max_tokens = rng.choice(list(max_tokens_choices))
        output_len = min(max_tokens, 1 + int(rng.expovariate(1 / mean_output_len)))
        requests.append(Request(request_id, int(clock), prompt_len, output_len, max_tokens))
    return requests


# ---------------------------------------------------------------------------------------------
# Contiguous reservation: one allocation state and its waste
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reservation:
    """One request's contiguous reservation: slots ``start .. start + size - 1`` of the pool.

    num_tokens: slots holding a token now (<= final_len). final_len: tokens it will hold when it
    finishes (<= size).
    """

    request_id: int
    start: int
    size: int
    num_tokens: int
    final_len: int


def free_holes(reservations: Sequence[Reservation], pool_slots: int) -> list[tuple[int, int]]:
    """The free runs of the pool as ``(start, length)``, in address order (no empty holes)."""
    holes = []
    cursor = 0
    for reservation in sorted(reservations, key=lambda r: r.start):
        if reservation.start < cursor:
            raise ValueError(f"reservations overlap at slot {reservation.start} (request {reservation.request_id})")
        if reservation.start > cursor:
            holes.append((cursor, reservation.start - cursor))
        cursor = reservation.start + reservation.size
    if cursor > pool_slots:
        raise ValueError(f"reservations end at slot {cursor}, past pool_slots={pool_slots}")
    if cursor < pool_slots:
        holes.append((cursor, pool_slots - cursor))
    return holes


def first_fit(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    """Start of the first hole (lowest address) that holds ``size`` slots, or None."""
    for start, length in holes:
        if length >= size:
            return start
    return None


def _first_gap(reservations: Iterable[Reservation], pool_slots: int, size: int) -> int | None:
    """The simulator's first fit: the lowest start where ``size`` free slots follow (None: nowhere).

    Walked here rather than through free_holes, which answers part of ``waste_breakdown`` and is a
    stub in the student kit until Lab 0.1 unlocks; this never lists the holes.
    """
    cursor = 0
    for reservation in sorted(reservations, key=lambda r: r.start):
        if reservation.start - cursor >= size:
            return cursor
        cursor = reservation.start + reservation.size
    return cursor if pool_slots - cursor >= size else None


@exercise("lab01-text-to-tensors", "03_kv_cache", "waste_breakdown")
def waste_breakdown(reservations: Sequence[Reservation], pool_slots: int, request_slots: int) -> dict[str, int]:
    """Count every slot of a contiguous pool by what it is doing.

    Returns ``{"used", "reserved_unused", "internal", "free", "external"}`` in slots, where
    used + reserved_unused + internal + free == pool_slots and ``external`` counts the free slots
    that sit in holes shorter than ``request_slots`` (a new request cannot use them).
    """
    _require_int("pool_slots", pool_slots, 1)
    _require_int("request_slots", request_slots, 1)
    holes = free_holes(reservations, pool_slots)
    return {
        "used": sum(r.num_tokens for r in reservations),
        "reserved_unused": sum(r.final_len - r.num_tokens for r in reservations),
        "internal": sum(r.size - r.final_len for r in reservations),
        "free": sum(length for _, length in holes),
        "external": sum(length for _, length in holes if length < request_slots),
    }


# ---------------------------------------------------------------------------------------------
# The two simulations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepStats:
    """What the pool held at the end of one step (both simulators).

    used_slots: slots holding a token. held_slots: slots owned by running requests (reserved or in
    their blocks), so held - used is memory that no token uses.
    """

    step: int
    num_running: int
    num_waiting: int
    used_slots: int
    held_slots: int
    pool_slots: int

    @property
    def utilization(self) -> float:
        """Fraction of the held memory that holds tokens (1.0 when nothing is held)."""
        return self.used_slots / self.held_slots if self.held_slots else 1.0


@dataclass(frozen=True)
class ContiguousSnapshot:
    """The contiguous pool at the end of a step: every reservation, in address order.

    next_request_slots: slots the request at the head of the queue needs (None: nobody waits).
    """

    step: int
    reservations: tuple[Reservation, ...]
    next_request_slots: int | None


@dataclass(frozen=True)
class PagedSnapshot:
    """The paged pool at the end of a step.

    block_tables: request id -> its physical blocks in logical order. num_tokens: request id ->
    tokens it holds. admitted / finished / preempted: request ids that did so during this step.
    """

    step: int
    block_tables: dict[int, list[int]]
    num_tokens: dict[int, int]
    admitted: tuple[int, ...]
    finished: tuple[int, ...]
    preempted: tuple[int, ...]


@dataclass(frozen=True)
class SimTrace:
    """A whole simulation: per-step stats and snapshots, and when the last request finished.

    kind: "contiguous" or "paged". slots_per_unit: the fixed reservation (contiguous; 0 when each
    request reserves its own max_len) or the block size (paged). num_preemptions: requests sent back
    to the queue (paged only).
    """

    kind: str
    pool_slots: int
    slots_per_unit: int
    stats: list[StepStats]
    snapshots: list
    num_preemptions: int = 0

    @property
    def num_steps(self) -> int:
        """Steps until every request had finished."""
        return len(self.stats)

    @property
    def mean_utilization(self) -> float:
        """used / held, summed over all steps (time-weighted, so idle steps do not count)."""
        held = sum(s.held_slots for s in self.stats)
        return sum(s.used_slots for s in self.stats) / held if held else 1.0


def _check_workload(workload: Sequence[Request], longest_allowed: int, what: str) -> None:
    ids = [request.request_id for request in workload]
    if len(set(ids)) != len(ids):
        raise ValueError("workload request ids must be unique")
    for request in workload:
        if request.final_len > longest_allowed:
            raise ValueError(
                f"request {request.request_id} reaches {request.final_len} tokens, more than {what} ({longest_allowed})"
            )


def simulate_contiguous(workload: Sequence[Request], pool_slots: int, reserve_slots: int | None = None,
                        *, max_steps: int = 100_000) -> SimTrace:
    """Run the workload with one contiguous reservation per request, placed first-fit.

    reserve_slots: slots every request reserves (a server's fixed maximum length); None means
    each request reserves its own ``max_len`` (prompt + max_tokens).
    """
    _require_int("pool_slots", pool_slots, 1)
    if reserve_slots is not None:
        _require_int("reserve_slots", reserve_slots, 1)
    _check_workload(workload, min(pool_slots, reserve_slots or pool_slots), "the reservation or the pool")

    def reservation_size(request: Request) -> int:
        size = reserve_slots or request.max_len
        if size > pool_slots:
            raise ValueError(f"request {request.request_id} reserves {size} slots, more than pool_slots ({pool_slots})")
        return size

    pending = deque(sorted(workload, key=lambda r: (r.arrival_step, r.request_id)))
    waiting: deque[Request] = deque()
    running: dict[int, Reservation] = {}
    stats, snapshots = [], []
    step = 0
    while pending or waiting or running:
        if step >= max_steps:
            raise RuntimeError(f"simulation did not finish within max_steps={max_steps}")
        running = {rid: r for rid, r in running.items() if r.num_tokens < r.final_len}
        while pending and pending[0].arrival_step <= step:
            waiting.append(pending.popleft())
        running = {rid: _grow(r) for rid, r in running.items()}
        while waiting:
            size = reservation_size(waiting[0])
            start = _first_gap(running.values(), pool_slots, size)
            if start is None:
                break
            request = waiting.popleft()
            running[request.request_id] = Reservation(request.request_id, start, size, request.prompt_len,
                                                      request.final_len)
        reservations = tuple(sorted(running.values(), key=lambda r: r.start))
        next_slots = reservation_size(waiting[0]) if waiting else None
        snapshots.append(ContiguousSnapshot(step, reservations, next_slots))
        stats.append(StepStats(step, len(running), len(waiting), sum(r.num_tokens for r in reservations),
                               sum(r.size for r in reservations), pool_slots))
        step += 1
    return SimTrace("contiguous", pool_slots, reserve_slots or 0, stats, snapshots)


def _grow(reservation: Reservation) -> Reservation:
    return Reservation(reservation.request_id, reservation.start, reservation.size,
                       reservation.num_tokens + 1, reservation.final_len)


def simulate_paged(workload: Sequence[Request], num_blocks: int, block_size: int, *,
                   allocator_factory: Callable[[int, int], object] | None = None,
                   max_steps: int = 100_000) -> SimTrace:
    """Run the workload on a pool of ``num_blocks`` blocks of ``block_size`` slots.

    allocator_factory(num_blocks, block_size) builds the allocator (default: the reference
    ``course_lib.paged.BlockAllocator`` without prefix caching); it needs ``can_allocate``,
    ``allocate``, ``can_append``, ``append_slot``, ``free`` and ``block_table``.
    """
    _require_int("num_blocks", num_blocks, 1)
    _require_int("block_size", block_size, 1)
    _check_workload(workload, num_blocks * block_size, "the whole pool")
    factory = allocator_factory or (lambda blocks, size: BlockAllocator(blocks, size))
    allocator = factory(num_blocks, block_size)
    pending = deque(sorted(workload, key=lambda r: (r.arrival_step, r.request_id)))
    waiting: deque[Request] = deque()
    running: dict[int, Request] = {}  # in admission order: the last one is preempted first
    num_tokens: dict[int, int] = {}
    stats, snapshots = [], []
    num_preemptions = 0
    step = 0
    while pending or waiting or running:
        if step >= max_steps:
            raise RuntimeError(f"simulation did not finish within max_steps={max_steps}")
        finished = tuple(rid for rid, request in running.items() if num_tokens[rid] >= request.final_len)
        for rid in finished:
            allocator.free(rid)
            del running[rid], num_tokens[rid]
        while pending and pending[0].arrival_step <= step:
            waiting.append(pending.popleft())
        preempted = []
        for rid in list(running):
            if rid not in running:  # preempted earlier in this step
                continue
            while not allocator.can_append(rid):
                victim = next(reversed(running))
                allocator.free(victim)
                waiting.appendleft(running.pop(victim))
                del num_tokens[victim]
                preempted.append(victim)
                if victim == rid:
                    break
            if rid in running:
                allocator.append_slot(rid)
                num_tokens[rid] += 1
        num_preemptions += len(preempted)
        admitted = []
        while waiting and allocator.can_allocate(_prompt_ids(waiting[0])):
            request = waiting.popleft()
            allocator.allocate(request.request_id, _prompt_ids(request))
            running[request.request_id] = request
            num_tokens[request.request_id] = request.prompt_len
            admitted.append(request.request_id)
        tables = {rid: list(allocator.block_table(rid)) for rid in running}
        snapshots.append(PagedSnapshot(step, tables, dict(num_tokens), tuple(admitted), finished, tuple(preempted)))
        held = sum(len(table) for table in tables.values()) * block_size
        stats.append(StepStats(step, len(running), len(waiting), sum(num_tokens.values()), held,
                               num_blocks * block_size))
        step += 1
    return SimTrace("paged", num_blocks * block_size, block_size, stats, snapshots, num_preemptions)


def _prompt_ids(request: Request) -> list[int]:
    # Token values do not matter without prefix caching; distinct per request keeps it that way
    # even for an allocator that hashes.
    return [request.request_id] * request.prompt_len


def paged_waste_bound(snapshot: PagedSnapshot, block_size: int) -> int:
    """The most slots paging can waste in this state: block_size - 1 per running request."""
    return len(snapshot.block_tables) * (block_size - 1)


def summarize_waste(trace: SimTrace, breakdown: Callable[..., dict[str, int]] | None = None) -> dict[str, float]:
    """Time-averaged share of the pool in each waste kind of a contiguous trace (fractions of pool_slots).

    A step counts external fragmentation only while a request waits (free memory nobody asks for
    is simply free); its threshold is the reservation that request needs. ``breakdown`` counts one
    state (``waste_breakdown``'s signature, the default): pass your own from Lab 0.1 chapter 3.
    """
    breakdown = breakdown or waste_breakdown
    if trace.kind != "contiguous":
        raise ValueError(f"summarize_waste needs a contiguous trace, got a {trace.kind!r} one")
    totals = dict.fromkeys(WASTE_KINDS, 0)
    for snapshot in trace.snapshots:
        # With nobody waiting, a threshold of 1 slot makes every hole usable: no external waste.
        threshold = snapshot.next_request_slots or 1
        for kind, slots in breakdown(list(snapshot.reservations), trace.pool_slots, threshold).items():
            totals[kind] += slots
    denominator = trace.pool_slots * max(1, len(trace.snapshots))
    return {kind: totals[kind] / denominator for kind in WASTE_KINDS}
