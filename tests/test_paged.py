"""BlockAllocator and PagedKVCache: hand-checked cases, then hypothesis state machines."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from course_lib.paged import AllocatorProtocol, BlockAllocator, OutOfBlocksError, PagedKVCache, hash_block

# ----- block arithmetic and the block table ---------------------------------------------------


def test_blocks_needed_rounds_up():
    allocator = BlockAllocator(8, 16)
    assert [allocator.blocks_needed(n) for n in (0, 1, 16, 17, 50)] == [0, 1, 1, 2, 4]


def test_allocate_append_and_slot_lookup():
    allocator = BlockAllocator(4, block_size=4)
    allocator.allocate("a", [1, 2, 3])
    assert allocator.num_free_blocks == 3
    assert allocator.append_slot("a") is None  # fills the last slot of block 0
    assert allocator.num_free_blocks == 3
    allocator.append_slot("a")  # position 4 needs a second block
    table = allocator.block_table("a")
    assert len(table) == 2 and allocator.num_free_blocks == 2
    assert allocator.slot("a", 0) == table[0] * 4
    assert allocator.slot("a", 4) == table[1] * 4
    with pytest.raises(ValueError, match="position"):
        allocator.slot("a", 5)


def test_free_returns_blocks_and_unknown_sequence_is_a_clear_error():
    allocator = BlockAllocator(4, 4)
    allocator.allocate("a", list(range(9)))
    assert allocator.num_free_blocks == 1
    allocator.free("a")
    assert allocator.num_free_blocks == 4
    with pytest.raises(ValueError, match="unknown sequence 'a'"):
        allocator.free("a")
    with pytest.raises(ValueError, match="unknown sequence 'ghost'"):
        allocator.block_table("ghost")


def test_allocating_with_too_few_blocks_raises():
    allocator = BlockAllocator(2, 4)
    assert not allocator.can_allocate(list(range(9)))
    with pytest.raises(OutOfBlocksError, match="needs 3 blocks"):
        allocator.allocate("a", list(range(9)))
    assert allocator.num_free_blocks == 2  # a failed allocation takes nothing
    allocator.allocate("b", list(range(8)))
    assert not allocator.can_append("b")
    with pytest.raises(OutOfBlocksError):
        allocator.append_slot("b")


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockAllocator(0, 16)
    with pytest.raises(ValueError, match="block_size"):
        BlockAllocator(4, 0)
    allocator = BlockAllocator(4, 4)
    with pytest.raises(ValueError, match="at least one token"):
        allocator.allocate("a", [])
    allocator.allocate("a", [1])
    with pytest.raises(ValueError, match="already has blocks"):
        allocator.allocate("a", [1])


def test_reference_allocator_satisfies_the_protocol():
    assert isinstance(BlockAllocator(4, 4), AllocatorProtocol)


# ----- sharing and copy-on-write --------------------------------------------------------------


def test_fork_shares_blocks_and_copies_the_partial_last_block_on_write():
    allocator = BlockAllocator(6, block_size=4)
    allocator.allocate("parent", [1, 2, 3, 4, 5, 6])  # one full block, one partial (2 of 4)
    allocator.fork("parent", "child")
    full, partial = allocator.block_table("parent")
    assert allocator.block_table("child") == [full, partial]
    assert allocator.ref_counts[full] == 2 and allocator.ref_counts[partial] == 2
    assert allocator.num_free_blocks == 4

    copy = allocator.append_slot("child")  # child writes into the shared partial block
    assert copy is not None and copy[0] == partial
    new_block = copy[1]
    assert allocator.block_table("child") == [full, new_block]
    assert allocator.block_table("parent") == [full, partial]
    assert allocator.ref_counts[partial] == 1 and allocator.ref_counts[new_block] == 1
    assert allocator.append_slot("parent") is None  # the parent now owns its block alone

    allocator.free("parent")
    assert allocator.ref_counts[full] == 1  # still held by the child
    allocator.free("child")
    assert allocator.num_free_blocks == 6


def test_fork_of_a_full_last_block_needs_no_copy():
    allocator = BlockAllocator(4, block_size=2)
    allocator.allocate("a", [1, 2])
    allocator.fork("a", "b")
    assert allocator.append_slot("b") is None  # a new block, the shared one stays read-only
    assert allocator.block_table("a")[0] == allocator.block_table("b")[0]


def test_copy_blocks_moves_kv_of_every_layer():
    cache = PagedKVCache(_TinyConfig(), num_blocks=3, block_size=2)
    cache.storage.normal_()
    before = cache.storage[:, :, 0].clone()
    cache.copy_blocks([(0, 2)])
    torch.testing.assert_close(cache.storage[:, :, 2], before, rtol=0, atol=0)


# ----- prefix caching -------------------------------------------------------------------------


def test_hash_is_chained_and_stable():
    first = hash_block(b"", [1, 2, 3, 4])
    assert first == hash_block(b"", [1, 2, 3, 4])  # not salted per process like hash()
    assert hash_block(first, [5, 6]) != hash_block(hash_block(b"", [9, 9, 9, 9]), [5, 6])


def test_prefix_hit_needs_computed_blocks_and_stops_one_token_short():
    allocator = BlockAllocator(10, block_size=4, enable_prefix_caching=True)
    prompt = list(range(12))  # exactly three full blocks
    assert allocator.allocate("a", prompt) == 0
    assert allocator.allocate("b", prompt) == 0  # a's blocks are not computed yet: no hit
    allocator.mark_computed("a", prompt, 12)
    # All 12 tokens are cached, but the last token must run to give logits: only 2 blocks hit.
    assert allocator.allocate("c", prompt) == 8
    assert allocator.block_table("c")[:2] == allocator.block_table("a")[:2]
    assert allocator.block_table("c")[2] != allocator.block_table("a")[2]
    # A longer prompt with the same start hits all three blocks.
    assert allocator.allocate("d", prompt + [99]) == 12
    assert allocator.ref_counts[allocator.block_table("a")[0]] == 3
    assert allocator.num_prefix_hit_tokens == 20


def test_chunked_prefill_registers_only_the_computed_blocks():
    allocator = BlockAllocator(10, block_size=4, enable_prefix_caching=True)
    prompt = list(range(13))
    allocator.allocate("a", prompt)
    allocator.mark_computed("a", prompt, 6)  # first chunk: block 0 full, block 1 half computed
    assert allocator.allocate("b", prompt) == 4


def test_free_cached_blocks_are_reused_then_evicted_lru():
    allocator = BlockAllocator(4, block_size=2, enable_prefix_caching=True)
    old, new = [1, 2, 3], [7, 8, 9]
    for seq_id, tokens in (("old", old), ("new", new)):
        allocator.allocate(seq_id, tokens)
        allocator.mark_computed(seq_id, tokens, 3)
        allocator.free(seq_id)
    assert allocator.num_free_blocks == 4 and allocator.num_cached_blocks == 2
    # Still reusable after free.
    assert allocator.can_allocate(old) and allocator.allocate("again", old) == 2
    allocator.free("again")  # now "new" holds the least recently freed cached block
    # Three blocks: the two empty ones first, then the least recently used cached block.
    allocator.allocate("big", [50, 51, 52, 53, 54, 55])
    assert allocator.num_cached_blocks == 1
    allocator.free("big")
    assert allocator.allocate("again2", old) == 2  # "old" survived
    assert allocator.allocate("new2", new) == 0  # "new" was evicted


def test_can_allocate_counts_hits_that_sit_in_the_free_list():
    allocator = BlockAllocator(2, block_size=2, enable_prefix_caching=True)
    prompt = [1, 2, 3]
    allocator.allocate("a", prompt)
    allocator.mark_computed("a", prompt, 3)
    allocator.free("a")
    # 2 blocks needed, 1 of them a cached hit in the free list: exactly the 2 free blocks.
    assert allocator.can_allocate(prompt)
    assert allocator.allocate("b", prompt) == 2
    assert allocator.num_free_blocks == 0


# ----- the cache tensors ----------------------------------------------------------------------


@dataclass(frozen=True)
class _TinyConfig:
    num_layers: int = 2
    num_kv_heads: int = 2
    head_dim: int = 3


def test_store_then_gather_round_trips_through_the_block_table():
    cache = PagedKVCache(_TinyConfig(), num_blocks=4, block_size=2)
    allocator = BlockAllocator(4, 2)
    allocator.allocate("a", [0] * 3)  # blocks for positions 0..2
    slots = torch.tensor([allocator.slot("a", p) for p in range(3)])
    k, v = torch.randn(3, 2, 3), torch.randn(3, 2, 3)
    cache.store(1, k, v, slots)
    keys, values = cache.gather(1, allocator.block_table("a"), 3)
    torch.testing.assert_close(keys, k, rtol=0, atol=0)  # a copy: exact
    torch.testing.assert_close(values, v, rtol=0, atol=0)
    assert cache.key_caches[0].abs().sum() == 0  # layer 0 untouched


def test_store_skips_negative_slots():
    cache = PagedKVCache(_TinyConfig(), num_blocks=2, block_size=2)
    cache.store(0, torch.ones(2, 2, 3), torch.ones(2, 2, 3), torch.tensor([-1, 3]))
    assert cache.key_caches[0].view(4, 2, 3)[3].eq(1).all()
    assert cache.key_caches[0].view(4, 2, 3)[:3].eq(0).all()


def test_memory_per_block():
    config = _TinyConfig()
    cache = PagedKVCache(config, num_blocks=5, block_size=4, dtype=torch.float16)
    assert PagedKVCache.bytes_per_block(config, 4, torch.float16) == 2 * 2 * 4 * 2 * 3 * 2
    assert cache.nbytes == 5 * PagedKVCache.bytes_per_block(config, 4, torch.float16)
    assert cache.key_caches[0].shape == (5, 4, 2, 3)


# ----- property tests -------------------------------------------------------------------------


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocate / append / fork / free / mark_computed, checking the books after every step.

    A shadow model keeps each sequence's tokens; invariants compare the allocator against it.
    """

    prefix_caching = False

    def __init__(self) -> None:
        super().__init__()
        self.allocator = BlockAllocator(12, block_size=3, enable_prefix_caching=self.prefix_caching)
        self.tokens: dict[int, list[int]] = {}
        self.next_id = 0

    @rule(prefix=st.sampled_from([[], [5, 5, 5], [5, 5, 5, 6, 6, 6]]), tail=st.lists(st.integers(0, 1), min_size=1, max_size=6))
    def allocate(self, prefix, tail):
        tokens = prefix + tail  # shared prefixes make prefix-cache hits likely
        seq_id, self.next_id = self.next_id, self.next_id + 1
        if self.allocator.can_allocate(tokens):
            cached = self.allocator.allocate(seq_id, tokens)
            assert cached % 3 == 0 and cached < len(tokens)
            assert self.prefix_caching or cached == 0
            self.tokens[seq_id] = tokens
        else:
            with pytest.raises(OutOfBlocksError):
                self.allocator.allocate(seq_id, tokens)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        if self.allocator.can_append(seq_id):
            copy = self.allocator.append_slot(seq_id)
            if copy is not None:
                src, dst = copy
                assert src != dst
            # The block the new token is written into belongs to this sequence alone (copy-on-write).
            assert self.allocator.ref_counts[self.allocator.block_table(seq_id)[-1]] == 1
            self.tokens[seq_id].append(token)
        else:
            with pytest.raises(OutOfBlocksError):
                self.allocator.append_slot(seq_id)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child, self.next_id = self.next_id, self.next_id + 1
        self.allocator.fork(parent, child)
        self.tokens[child] = list(self.tokens[parent])

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def mark_computed(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        tokens = self.tokens[seq_id]
        self.allocator.mark_computed(seq_id, tokens, data.draw(st.integers(0, len(tokens))))

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        self.allocator.free(seq_id)
        del self.tokens[seq_id]

    @invariant()
    def ref_counts_equal_the_tables_holding_each_block(self):
        holders = [0] * self.allocator.num_blocks
        for seq_id in self.tokens:
            table = self.allocator.block_table(seq_id)
            assert len(table) == self.allocator.blocks_needed(len(self.tokens[seq_id]))
            assert len(set(table)) == len(table)  # a table never lists a block twice
            for block in table:
                holders[block] += 1
        assert self.allocator.ref_counts == holders  # so: never negative, no block owned twice unless shared

    @invariant()
    def every_block_is_either_held_or_free(self):
        held = sum(1 for count in self.allocator.ref_counts if count > 0)
        assert held + self.allocator.num_free_blocks == self.allocator.num_blocks  # no leak

    @invariant()
    def slots_match_the_sequence_lengths(self):
        for seq_id, tokens in self.tokens.items():
            assert self.allocator.num_slots(seq_id) == len(tokens)

    def teardown(self):
        for seq_id in list(self.tokens):
            self.allocator.free(seq_id)
        assert self.allocator.num_free_blocks == self.allocator.num_blocks
        assert all(count == 0 for count in self.allocator.ref_counts)


class PrefixCachingAllocatorMachine(AllocatorMachine):
    prefix_caching = True


@pytest.mark.parametrize("machine", [AllocatorMachine, PrefixCachingAllocatorMachine], ids=["plain", "prefix_caching"])
def test_allocator_state_machine(machine):
    run_state_machine_as_test(machine, settings=settings(max_examples=60, stateful_step_count=40, deadline=None))


class _CachedContentMachine(PrefixCachingAllocatorMachine):
    """With prefix caching, a hit must hand out blocks that really hold the same tokens.

    Each block's "content" is tracked as the tokens written into it; a hit must return blocks
    whose recorded content equals the new sequence's tokens.
    """

    def __init__(self) -> None:
        super().__init__()
        self.content: dict[int, tuple[int, ...]] = {}

    @rule(prefix=st.sampled_from([[5, 5, 5], [5, 5, 5, 6, 6, 6]]), tail=st.lists(st.integers(0, 1), min_size=1, max_size=3))
    def allocate_and_compute(self, prefix, tail):
        tokens = prefix + tail
        seq_id, self.next_id = self.next_id, self.next_id + 1
        if not self.allocator.can_allocate(tokens):
            return
        cached = self.allocator.allocate(seq_id, tokens)
        assert cached < len(tokens)  # the last token always runs
        table = self.allocator.block_table(seq_id)
        for index in range(cached // 3):
            assert self.content[table[index]] == tuple(tokens[index * 3 : index * 3 + 3])
        for index in range(cached // 3, len(table)):
            self.content[table[index]] = tuple(tokens[index * 3 : index * 3 + 3])
        self.allocator.mark_computed(seq_id, tokens, len(tokens))
        self.tokens[seq_id] = tokens

    # Appends and forks would change block contents behind the shadow's back; keep this machine simple.
    append = None
    fork = None
    mark_computed = None


def test_prefix_hits_return_blocks_with_the_same_tokens():
    run_state_machine_as_test(_CachedContentMachine, settings=settings(max_examples=40, stateful_step_count=30, deadline=None))


# ----- prefix caching runs on the two functions the allocator is given (Lab 0.2 chapter 5) --------


def test_prefix_caching_runs_on_the_functions_it_is_given():
    from course_lib.paged import hash_blocks, longest_cached_prefix

    calls = {"hash": 0, "lookup": 0}

    def counting_hash(token_ids, block_size):
        calls["hash"] += 1
        return hash_blocks(token_ids, block_size)

    def counting_lookup(token_ids, cache, block_size):
        calls["lookup"] += 1
        return longest_cached_prefix(token_ids, cache, block_size)

    allocator = BlockAllocator(16, 4, enable_prefix_caching=True, hash_blocks=counting_hash,
                               longest_cached_prefix=counting_lookup)
    prompt = list(range(10))
    allocator.allocate("a", prompt)
    allocator.mark_computed("a", prompt, 10)
    assert allocator.allocate("b", prompt + [99]) == 8
    assert calls["hash"] >= 1 and calls["lookup"] >= 1


@pytest.mark.parametrize("lookup, message", [
    (lambda token_ids, cache, block_size: len(token_ids), "less than the prompt's length"),
    (lambda token_ids, cache, block_size: 3, "multiple of block_size"),
    (lambda token_ids, cache, block_size: 8 if len(token_ids) > 8 else 0, "hash is not in the cache"),
])
def test_wrong_lookups_are_refused_before_they_share_blocks(lookup, message):
    allocator = BlockAllocator(16, 4, enable_prefix_caching=True, hash_blocks=None, longest_cached_prefix=lookup)
    with pytest.raises(ValueError, match=message):
        allocator.allocate("a", list(range(12)))


def test_a_hash_for_a_partial_block_is_refused():
    from course_lib.paged import hash_blocks

    def with_partial(token_ids, block_size):
        return hash_blocks(token_ids + [0] * (-len(token_ids) % block_size), block_size)

    allocator = BlockAllocator(16, 4, enable_prefix_caching=True, hash_blocks=with_partial)
    allocator.allocate("a", list(range(10)))
    with pytest.raises(ValueError, match="one per full block"):
        allocator.mark_computed("a", list(range(10)), 10)


def test_without_lab_02_prefix_caching_is_off_with_a_warning(monkeypatch):
    import course_lib.paged as paged_module

    monkeypatch.setattr(paged_module, "is_locked", lambda lab: lab == "lab02-prefill-vs-decode")
    monkeypatch.setattr(paged_module, "_WARNED", set())
    with pytest.warns(UserWarning, match="prefix caching is off"):
        allocator = BlockAllocator(16, 4, enable_prefix_caching=True)
    assert allocator.enable_prefix_caching is False
    assert BlockAllocator(16, 4, enable_prefix_caching=True, hash_blocks=lambda t, b: [],
                          longest_cached_prefix=lambda t, c, b: 0).enable_prefix_caching is True
