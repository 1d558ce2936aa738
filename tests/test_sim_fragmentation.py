"""course_lib.sim.fragmentation: the hand-worked pool, then properties of both simulators on random workloads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.paged import BlockAllocator
from course_lib.sim.fragmentation import (
    Request,
    Reservation,
    first_fit,
    free_holes,
    paged_waste_bound,
    random_workload,
    simulate_contiguous,
    simulate_paged,
    summarize_waste,
    waste_breakdown,
)

EXAMPLE = [
    Reservation(request_id=2, start=20, size=8, num_tokens=2, final_len=4),
    Reservation(request_id=0, start=0, size=8, num_tokens=3, final_len=6),
    Reservation(request_id=1, start=10, size=6, num_tokens=6, final_len=6),
]


def test_hand_worked_pool():
    assert free_holes(EXAMPLE, 32) == [(8, 2), (16, 4), (28, 4)]
    assert waste_breakdown(EXAMPLE, 32, 5) == {"used": 11, "reserved_unused": 5, "internal": 6, "free": 10,
                                               "external": 10}
    assert waste_breakdown(EXAMPLE, 32, 4)["external"] == 2  # the 4-slot holes now fit a request
    assert first_fit(free_holes(EXAMPLE, 32), 4) == 16
    assert first_fit(free_holes(EXAMPLE, 32), 5) is None


def test_empty_pool_is_one_hole():
    assert free_holes([], 16) == [(0, 16)]
    assert waste_breakdown([], 16, 17) == {"used": 0, "reserved_unused": 0, "internal": 0, "free": 16, "external": 16}


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="overlap"):
        free_holes([Reservation(0, 0, 4, 1, 2), Reservation(1, 2, 4, 1, 2)], 16)
    with pytest.raises(ValueError, match="past pool_slots"):
        free_holes([Reservation(0, 10, 8, 1, 2)], 16)
    with pytest.raises(ValueError, match="prompt_len"):
        Request(0, 0, 0, 5)
    with pytest.raises(ValueError, match="max_tokens"):
        Request(0, 0, 4, 5, max_tokens=3)
    with pytest.raises(ValueError, match="more than"):
        simulate_paged([Request(0, 0, 30, 10)], num_blocks=2, block_size=16)
    with pytest.raises(ValueError, match="reserves"):
        simulate_contiguous([Request(0, 0, 30, 10, max_tokens=100)], pool_slots=64)


def test_workload_is_reproducible():
    assert random_workload(20, seed=4) == random_workload(20, seed=4)
    assert random_workload(20, seed=4) != random_workload(20, seed=5)


def test_one_request_by_hand():
    request = Request(0, arrival_step=1, prompt_len=5, output_len=3, max_tokens=10)
    trace = simulate_contiguous([request], pool_slots=32)
    # Arrives at step 1 and runs its prompt; one token per step; leaves at the start of step 5.
    assert [s.used_slots for s in trace.stats] == [0, 5, 6, 7, 8, 0]
    assert [s.held_slots for s in trace.stats] == [0, 15, 15, 15, 15, 0]
    paged = simulate_paged([request], num_blocks=4, block_size=4)
    assert [s.used_slots for s in paged.stats] == [0, 5, 6, 7, 8, 0]
    assert [s.held_slots for s in paged.stats] == [0, 8, 8, 8, 8, 0]
    assert paged.snapshots[5].finished == (0,)


workloads = st.builds(
    lambda n, seed, prompt, output, rate: random_workload(n, seed=seed, mean_prompt_len=prompt,
                                                          mean_output_len=output, max_tokens_choices=(16, 48),
                                                          arrivals_per_step=rate),
    st.integers(1, 25), st.integers(0, 10**6), st.integers(2, 20), st.integers(2, 30), st.floats(0.1, 2.0),
)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(workload=workloads)
def test_contiguous_accounts_for_every_slot(workload):
    pool_slots = 160
    trace = simulate_contiguous(workload, pool_slots)
    for snapshot in trace.snapshots:
        counts = waste_breakdown(snapshot.reservations, pool_slots, snapshot.next_request_slots or 1)
        assert counts["used"] + counts["reserved_unused"] + counts["internal"] + counts["free"] == pool_slots
        assert 0 <= counts["external"] <= counts["free"]
        for reservation in snapshot.reservations:
            assert 1 <= reservation.num_tokens <= reservation.final_len <= reservation.size
    # Every request ran to its final length: the steps it spent running add up.
    assert sum(s.used_slots for s in trace.stats) >= sum(r.final_len for r in workload)
    summary = summarize_waste(trace)
    assert summary["used"] + summary["reserved_unused"] + summary["internal"] + summary["free"] == pytest.approx(1)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(workload=workloads, block_size=st.sampled_from([1, 2, 4, 8, 16]))
def test_paged_waste_is_at_most_one_partial_block_per_request(workload, block_size):
    num_blocks = 160 // block_size
    trace = simulate_paged(workload, num_blocks, block_size)
    for stats, snapshot in zip(trace.stats, trace.snapshots):
        assert stats.held_slots <= stats.pool_slots
        assert 0 <= stats.held_slots - stats.used_slots <= paged_waste_bound(snapshot, block_size)
        blocks = [block for table in snapshot.block_tables.values() for block in table]
        assert len(blocks) == len(set(blocks))  # no sharing without fork: each block has one owner
    finished = {rid for snapshot in trace.snapshots for rid in snapshot.finished}
    assert finished == {request.request_id for request in workload}


class _StackAllocator(BlockAllocator):
    """The reference with a different free-block order: the statistics must not depend on block ids."""

    def _take_fresh(self) -> int:
        block = self._free_uncached.pop()
        self.ref_counts[block] = 1
        return block


def test_paged_statistics_do_not_depend_on_which_blocks_are_handed_out():
    workload = random_workload(40, seed=9, mean_prompt_len=20, mean_output_len=30, max_tokens_choices=(64,))
    reference = simulate_paged(workload, 24, 8)
    other = simulate_paged(workload, 24, 8, allocator_factory=_StackAllocator)
    assert reference.stats == other.stats
    assert reference.num_preemptions == other.num_preemptions > 0


def test_paging_beats_contiguous_on_the_notebook_workload():
    workload = random_workload(200, seed=0)
    contiguous = simulate_contiguous(workload, pool_slots=16_384)
    paged = simulate_paged(workload, num_blocks=1024, block_size=16)
    assert contiguous.mean_utilization < 0.4  # in the 20-38% range the vLLM paper reports
    assert paged.mean_utilization > 0.95
    assert paged.num_steps < contiguous.num_steps
