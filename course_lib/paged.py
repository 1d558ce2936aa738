"""Paging the KV cache: a block allocator (the bookkeeping) and the block storage (the tensors).

The KV cache of every running sequence lives in one pool of fixed-size *blocks* of
``block_size`` token slots each. A sequence's *block table* lists its blocks in order, so the
key/value of its token at position ``p`` sit in physical block ``block_table[p // block_size]``
at offset ``p % block_size``; flattened, that is *slot* ``block * block_size + offset``.
A sequence wastes at most the unused tail of its last block, whatever its length.

``BlockAllocator`` knows blocks, not requests: it hands blocks to sequence ids, counts how many
tables hold each block (ref counts, so sequences can share blocks), copies a shared partial block
before a sequence writes into it (copy-on-write), and, with prefix caching, remembers which full
blocks hold which tokens so a later sequence with the same prefix reuses them. *When* to allocate,
append or free is the scheduler's decision (``course_lib.scheduler``).

``PagedKVCache`` holds the tensors: per layer K and V of shape
``[num_blocks, block_size, num_kv_heads, head_dim]``, written through a slot mapping.

``AllocatorProtocol`` is everything the scheduler and engine ask of an allocator; a student's
allocator that has these members can serve the real model through ``LLMEngine``.

Prefix caching rests on two functions, ``hash_blocks`` (the chained hashes of a sequence's full
blocks) and ``longest_cached_prefix`` (how many leading tokens a cache of those hashes already
holds). They are Lab 0.2's exercises, and ``BlockAllocator`` takes a student's versions as
arguments, so a student's hashing drives the real engine's cache. ``BlockAllocator`` itself is the
reference answer of Lab 0.1 chapter 4.
"""

from __future__ import annotations

import hashlib
import warnings
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Container, Hashable, Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from course_lib.exercises import exercise, is_locked, unlock_hint

__all__ = [
    "AllocatorProtocol",
    "BlockAllocator",
    "OutOfBlocksError",
    "PagedKVCache",
    "hash_block",
    "hash_blocks",
    "longest_cached_prefix",
]

SeqId = Hashable
PREFIX_CACHING_LAB = "lab02-prefill-vs-decode"


class OutOfBlocksError(RuntimeError):
    """Raised when an allocation needs more free blocks than the pool has.

    The scheduler avoids it by asking ``can_allocate`` / ``can_append`` first.
    """


@runtime_checkable
class AllocatorProtocol(Protocol):
    """What ``course_lib.scheduler.Scheduler`` and ``course_lib.engine.LLMEngine`` need from an allocator.

    Questions come in pairs with the action they guard (``can_allocate``/``allocate``,
    ``can_append``/``append_slot``), so admission control is visible where it is used.
    Sequence ids are the request ids (any hashable).
    """

    block_size: int
    """Token slots per block."""

    num_blocks: int
    """Blocks in the whole pool."""

    @property
    def num_free_blocks(self) -> int:
        """Blocks that a new allocation could take right now."""
        ...

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens: ceil(num_tokens / block_size)."""
        ...

    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        """True if ``allocate`` for a sequence with these tokens would succeed now."""
        ...

    def allocate(self, seq_id: SeqId, token_ids: Sequence[int]) -> int:
        """Give a new sequence blocks for all of ``token_ids``.

        Returns how many leading tokens already have their KV in the cache (prefix caching;
        always a multiple of block_size and less than len(token_ids); 0 without prefix caching).
        """
        ...

    def can_append(self, seq_id: SeqId) -> bool:
        """True if ``append_slot(seq_id)`` would succeed now."""
        ...

    def append_slot(self, seq_id: SeqId) -> tuple[int, int] | None:
        """Make room for one more token of the sequence (a new block when the last is full).

        Returns ``(src_block, dst_block)`` when the last block was shared and had to be copied
        before this sequence writes into it (the engine copies the KV), else None.
        """
        ...

    def mark_computed(self, seq_id: SeqId, token_ids: Sequence[int], num_computed_tokens: int) -> None:
        """Tell the allocator that the KV of ``token_ids[:num_computed_tokens]`` is now in the cache.

        With prefix caching this is when full blocks become reusable by other sequences;
        an allocator without prefix caching does nothing.
        """
        ...

    def free(self, seq_id: SeqId) -> None:
        """Release the sequence's blocks (each returns to the pool when no table holds it)."""
        ...

    def block_table(self, seq_id: SeqId) -> list[int]:
        """The sequence's physical block ids, in logical order."""
        ...


def hash_block(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    """Chained hash of one full block: it covers the block's tokens *and* everything before it.

    Two blocks get the same hash only if their whole prefixes are equal, so a hit on block i
    implies hits on blocks 0..i-1. We hash bytes with BLAKE2 rather than Python's ``hash``, which
    is salted per process and would make cache behaviour differ from run to run.
    """
    digest = hashlib.blake2b(parent_hash, digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


@exercise("lab02-prefill-vs-decode", "05_beyond_the_basics", "hash_blocks")
def hash_blocks(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """Chained hashes of the full blocks of ``token_ids``: ``len(token_ids) // block_size`` of them.

    Entry i is ``hash_block(entry i - 1 (b"" for i = 0), token_ids[i * block_size : (i + 1) * block_size])``.
    A partial last block gets no hash: its content is not final, nobody could reuse it.
    """
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    hashes: list[bytes] = []
    parent = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, list(token_ids[start : start + block_size]))
        hashes.append(parent)
    return hashes


@exercise("lab02-prefill-vs-decode", "05_beyond_the_basics", "longest_cached_prefix")
def longest_cached_prefix(token_ids: Sequence[int], cache: Container[bytes], block_size: int) -> int:
    """Leading tokens of ``token_ids`` whose KV ``cache`` (a container of block hashes) holds.

    Blocks are looked up in order and the lookup stops at the first miss. At most
    ``(len(token_ids) - 1) // block_size`` blocks count: the last token must run through the model
    to give the logits of the next one. Returns a multiple of block_size, always < len(token_ids).
    """
    usable_blocks = max(len(token_ids) - 1, 0) // block_size
    num_hits = 0
    for block_hash in hash_blocks(token_ids, block_size)[:usable_blocks]:
        if block_hash not in cache:
            break
        num_hits += 1
    return num_hits * block_size


_reference_hash_blocks = hash_blocks
_reference_longest_cached_prefix = longest_cached_prefix

_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """A platform feature turned off in this edition of the library: say so once per process."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)


@exercise("lab01-text-to-tensors", "04_paging", "block_allocator")
class BlockAllocator:
    """Free list, ref counts, block tables, copy-on-write and (optionally) prefix caching.

    num_blocks: blocks in the pool; block_size: token slots per block.
    enable_prefix_caching: keep the contents of freed full blocks findable by their chained hash,
    so a later sequence starting with the same tokens reuses them instead of recomputing them.
    hash_blocks, longest_cached_prefix: the two functions prefix caching runs on (the signatures of
    this module's ``hash_blocks`` and ``longest_cached_prefix``); None takes this module's. Pass your
    own (Lab 0.2 chapter 5) to run the engine's prefix cache on them. What they return is checked:
    a wrong answer raises ValueError here rather than serving another request's keys and values.

    Free blocks live in two lists. Blocks with no cached content are handed out first; then free
    blocks that still hold a cached prefix are evicted, least recently used first.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool = False,
        hash_blocks: Callable[[Sequence[int], int], Sequence[bytes]] | None = None,
        longest_cached_prefix: Callable[[Sequence[int], Container[bytes], int], int] | None = None,
    ) -> None:
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        if enable_prefix_caching and is_locked(PREFIX_CACHING_LAB) and (
                hash_blocks is None or longest_cached_prefix is None):
            _warn_once("prefix caching", "prefix caching is off: it runs on hash_blocks and longest_cached_prefix, "
                       "your exercises in Lab 0.2 chapter 5; pass yours to BlockAllocator, or wait: "
                       + unlock_hint(PREFIX_CACHING_LAB))
            enable_prefix_caching = False
        self.enable_prefix_caching = enable_prefix_caching
        self._hash_blocks = hash_blocks or _reference_hash_blocks
        self._longest_cached_prefix = longest_cached_prefix or _reference_longest_cached_prefix

        self.ref_counts = [0] * num_blocks
        self._free_uncached: deque[int] = deque(range(num_blocks))
        # Free blocks whose content is still cached, least recently freed first (the LRU order).
        self._free_cached: OrderedDict[int, None] = OrderedDict()
        self._hash_of_block: list[Hashable | None] = [None] * num_blocks
        self._block_of_hash: dict[Hashable, int] = {}

        self._tables: dict[SeqId, list[int]] = {}
        self._num_slots: dict[SeqId, int] = {}
        # Chained hashes of the sequence's leading full blocks whose KV is known to be computed.
        self._seq_hashes: dict[SeqId, list[Hashable]] = {}

        self.num_prefix_hit_tokens = 0
        """Tokens whose KV came from the prefix cache, summed over all allocations."""

    # ----- questions -------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks not held by any table (free cached blocks count: they can be evicted)."""
        return len(self._free_uncached) + len(self._free_cached)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose content is registered in the prefix cache (held or free)."""
        return len(self._block_of_hash)

    def blocks_needed(self, num_tokens: int) -> int:
        """ceil(num_tokens / block_size): 50 tokens in blocks of 16 need 4 blocks."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        return -(-num_tokens // self.block_size)

    def has_sequence(self, seq_id: SeqId) -> bool:
        """True while the sequence holds blocks."""
        return seq_id in self._tables

    def block_table(self, seq_id: SeqId) -> list[int]:
        """The sequence's physical block ids in logical order (a copy)."""
        return list(self._table(seq_id))

    def num_slots(self, seq_id: SeqId) -> int:
        """Token slots reserved for the sequence (its length as far as the allocator knows)."""
        self._table(seq_id)
        return self._num_slots[seq_id]

    def slot(self, seq_id: SeqId, position: int) -> int:
        """Physical slot of the token at ``position``: block_table[p // block_size] * block_size + p % block_size."""
        table = self._table(seq_id)
        if not 0 <= position < self._num_slots[seq_id]:
            raise ValueError(
                f"position must be in [0, {self._num_slots[seq_id]}) for sequence {seq_id!r}, got {position}"
            )
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        """True if a sequence holding ``token_ids`` fits now, counting prefix-cache hits."""
        hit_blocks = self._find_cached_prefix(token_ids)
        # Hit blocks that sit in the free list stop being free when we take them.
        hits_now_free = sum(1 for block in hit_blocks if self.ref_counts[block] == 0)
        fresh_blocks = self.blocks_needed(len(token_ids)) - len(hit_blocks)
        return fresh_blocks + hits_now_free <= self.num_free_blocks

    def can_append(self, seq_id: SeqId) -> bool:
        """True if one more token fits: free room in the last block, or a free block to take."""
        return not self._append_needs_block(seq_id) or self.num_free_blocks >= 1

    # ----- actions ---------------------------------------------------------------------------

    def allocate(self, seq_id: SeqId, token_ids: Sequence[int]) -> int:
        """Give a new sequence blocks for all of ``token_ids``; return the tokens already cached.

        With prefix caching, leading full blocks whose chained hash is cached are shared (their
        ref count goes up) instead of taken fresh. The hit stops one token short of the sequence:
        the last token must run through the model to produce the logits of the next one.
        """
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already has blocks; free it before allocating again")
        if len(token_ids) < 1:
            raise ValueError("token_ids must hold at least one token")
        if not self.can_allocate(token_ids):
            raise OutOfBlocksError(
                f"sequence {seq_id!r} needs {self.blocks_needed(len(token_ids))} blocks "
                f"({len(token_ids)} tokens, block_size {self.block_size}) but only "
                f"{self.num_free_blocks} of {self.num_blocks} are free; ask can_allocate first"
            )
        hit_blocks = self._find_cached_prefix(token_ids)
        for block in hit_blocks:
            self._take(block)
        table = list(hit_blocks)
        for _ in range(self.blocks_needed(len(token_ids)) - len(hit_blocks)):
            table.append(self._take_fresh())
        self._tables[seq_id] = table
        self._num_slots[seq_id] = len(token_ids)
        self._seq_hashes[seq_id] = [self._hash_of_block[block] for block in hit_blocks]
        num_cached_tokens = len(hit_blocks) * self.block_size
        self.num_prefix_hit_tokens += num_cached_tokens
        return num_cached_tokens

    def append_slot(self, seq_id: SeqId) -> tuple[int, int] | None:
        """Reserve the slot of the sequence's next token; return a (src, dst) block copy or None.

        A full last block means a new block. A partial last block shared with another sequence
        (after ``fork``) is copied first: this sequence gets a private copy it can write into,
        and the engine must copy the KV of ``src`` into ``dst`` before running the model.
        """
        table = self._table(seq_id)
        needs_block = self._append_needs_block(seq_id)
        if needs_block and self.num_free_blocks == 0:
            raise OutOfBlocksError(f"no free block to append a token to sequence {seq_id!r}; ask can_append first")
        copy = None
        if self._num_slots[seq_id] % self.block_size == 0:
            table.append(self._take_fresh())
        elif needs_block:
            shared = table[-1]
            private = self._take_fresh()
            self.ref_counts[shared] -= 1
            table[-1] = private
            copy = (shared, private)
        self._num_slots[seq_id] += 1
        return copy

    def release_slots(self, seq_id: SeqId, num_slots: int) -> None:
        """Give back the sequence's last ``num_slots`` token slots; blocks left empty return to the pool.

        Speculative decoding reserves slots for drafted tokens before it knows which will be kept;
        the rejected ones are released here. Released blocks were never full of computed tokens, so
        none of them is in the prefix cache.
        """
        table = self._table(seq_id)
        if not isinstance(num_slots, int) or not 0 <= num_slots <= self._num_slots[seq_id]:
            raise ValueError(f"num_slots must be an integer in [0, {self._num_slots[seq_id]}] for sequence "
                             f"{seq_id!r}, got {num_slots!r}")
        self._num_slots[seq_id] -= num_slots
        while len(table) > self.blocks_needed(self._num_slots[seq_id]):
            block = table.pop()
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if self._hash_of_block[block] is not None:
                    self._free_cached[block] = None
                else:
                    self._free_uncached.append(block)

    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        """Give ``child_id`` the same blocks as ``parent_id`` (shared, ref counts + 1; no copy yet)."""
        parent_table = self._table(parent_id)
        if child_id in self._tables:
            raise ValueError(f"sequence {child_id!r} already has blocks; fork needs a new id")
        for block in parent_table:
            self.ref_counts[block] += 1
        self._tables[child_id] = list(parent_table)
        self._num_slots[child_id] = self._num_slots[parent_id]
        self._seq_hashes[child_id] = list(self._seq_hashes[parent_id])

    def mark_computed(self, seq_id: SeqId, token_ids: Sequence[int], num_computed_tokens: int) -> None:
        """Register the hashes of full blocks whose KV is now computed (prefix caching only).

        Only now may another sequence hit these blocks: registering at allocation time would
        let a second request reuse a block that a chunked prefill has not filled yet.
        """
        if not self.enable_prefix_caching:
            return
        table = self._table(seq_id)
        hashes = self._seq_hashes[seq_id]
        num_full_blocks = min(num_computed_tokens, len(token_ids)) // self.block_size
        if num_full_blocks <= len(hashes):
            return
        # The computed tokens, the last block possibly partial: only its full blocks get hashes.
        new_hashes = self._checked_hashes(list(token_ids[: min(num_computed_tokens, len(token_ids))]))
        for index in range(len(hashes), num_full_blocks):
            block_hash = new_hashes[index]
            hashes.append(block_hash)
            block = table[index]
            # Another block may already hold these tokens (two requests computed the same prefix
            # at once); keep the first one registered and leave this block unregistered.
            if block_hash not in self._block_of_hash and self._hash_of_block[block] is None:
                self._block_of_hash[block_hash] = block
                self._hash_of_block[block] = block_hash

    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence's table; blocks no table holds any more return to the free lists.

        Blocks are released last-to-first, so under LRU the tail of a prefix is evicted before
        its head (the head is the part other requests are most likely to share).
        """
        table = self._table(seq_id)
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if self._hash_of_block[block] is not None:
                    self._free_cached[block] = None
                else:
                    self._free_uncached.append(block)
        del self._tables[seq_id], self._num_slots[seq_id], self._seq_hashes[seq_id]

    # ----- internals -------------------------------------------------------------------------

    def _table(self, seq_id: SeqId) -> list[int]:
        try:
            return self._tables[seq_id]
        except KeyError:
            raise ValueError(f"unknown sequence {seq_id!r}: it holds no blocks (never allocated, or already freed)") from None

    def _append_needs_block(self, seq_id: SeqId) -> bool:
        table = self._table(seq_id)
        if self._num_slots[seq_id] % self.block_size == 0:
            return True
        return self.ref_counts[table[-1]] > 1

    def _find_cached_prefix(self, token_ids: Sequence[int]) -> list[int]:
        """Blocks holding the longest cached run of full blocks, at most len(token_ids) - 1 tokens."""
        if not self.enable_prefix_caching:
            return []
        token_ids = list(token_ids)
        num_cached = self._longest_cached_prefix(token_ids, self._block_of_hash, self.block_size)
        if (not isinstance(num_cached, int) or isinstance(num_cached, bool) or num_cached < 0
                or num_cached % self.block_size or num_cached >= max(len(token_ids), 1)):
            raise ValueError(
                f"longest_cached_prefix returned {num_cached!r} for a prompt of {len(token_ids)} tokens: it must be "
                f"a multiple of block_size ({self.block_size}) and less than the prompt's length"
            )
        num_blocks = num_cached // self.block_size
        if num_blocks == 0:
            return []
        hashes = self._checked_hashes(token_ids)[:num_blocks]
        missing = [index for index, block_hash in enumerate(hashes) if block_hash not in self._block_of_hash]
        if missing:
            raise ValueError(
                f"longest_cached_prefix returned {num_cached} tokens ({num_blocks} blocks), but block {missing[0]}'s "
                "hash is not in the cache: count only leading blocks that hit, and stop at the first miss"
            )
        return [self._block_of_hash[block_hash] for block_hash in hashes]

    def _checked_hashes(self, token_ids: list[int]) -> list[Hashable]:
        """``hash_blocks(token_ids, block_size)``, checked: one hashable value per full block."""
        hashes = list(self._hash_blocks(token_ids, self.block_size))
        num_blocks = len(token_ids) // self.block_size
        if len(hashes) != num_blocks:
            raise ValueError(f"hash_blocks returned {len(hashes)} hashes for {len(token_ids)} tokens in blocks of "
                             f"{self.block_size}; it must return one per full block ({num_blocks})")
        for block_hash in hashes:
            try:
                hash(block_hash)
            except TypeError:
                raise ValueError(f"hash_blocks returned a {type(block_hash).__name__}; a block hash must be "
                                 "hashable (bytes from hash_block)") from None
        return hashes

    def _take(self, block: int) -> None:
        """Add one holder to ``block`` (a prefix-cache hit), taking it out of the free list if there."""
        if self.ref_counts[block] == 0:
            del self._free_cached[block]
        self.ref_counts[block] += 1

    def _take_fresh(self) -> int:
        """A block with no holder: an empty one if any, else evict the least recently used cached one."""
        if self._free_uncached:
            block = self._free_uncached.popleft()
        else:
            block, _ = self._free_cached.popitem(last=False)
            del self._block_of_hash[self._hash_of_block[block]]
            self._hash_of_block[block] = None
        self.ref_counts[block] = 1
        return block


class PagedKVCache:
    """The block pool's tensors: per layer K and V of shape ``[num_blocks, block_size, num_kv_heads, head_dim]``.

    All layers live in one tensor ``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``
    so a block copy is one indexing operation over every layer; ``key_caches[layer]`` and
    ``value_caches[layer]`` are views into it.
    """

    def __init__(self, config, num_blocks: int, block_size: int, dtype: torch.dtype = torch.float32, device="cpu") -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}")
        self.num_layers = config.num_layers
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.storage = torch.zeros(
            (self.num_layers, 2, num_blocks, block_size, self.num_kv_heads, self.head_dim), dtype=dtype, device=device
        )
        self.key_caches = [self.storage[layer, 0] for layer in range(self.num_layers)]
        self.value_caches = [self.storage[layer, 1] for layer in range(self.num_layers)]

    @staticmethod
    def bytes_per_block(config, block_size: int, dtype: torch.dtype) -> int:
        """2 (K and V) x layers x block_size x kv_heads x head_dim x bytes per element."""
        element_size = torch.empty((), dtype=dtype).element_size()
        return 2 * config.num_layers * block_size * config.num_kv_heads * config.head_dim * element_size

    @property
    def nbytes(self) -> int:
        """Bytes held by all K and V blocks of all layers."""
        return self.storage.numel() * self.storage.element_size()

    def store(self, layer: int, k: Tensor, v: Tensor, slot_mapping: Tensor) -> None:
        """Write k, v ``[num_tokens, num_kv_heads, head_dim]`` into ``slot_mapping [num_tokens]`` (int64).

        slot = block * block_size + offset; a slot of -1 means "do not store this token".
        """
        if slot_mapping.numel() and bool((slot_mapping < 0).any()):
            keep = slot_mapping >= 0
            k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
        flat_shape = (self.num_blocks * self.block_size, self.num_kv_heads, self.head_dim)
        self.key_caches[layer].view(flat_shape).index_copy_(0, slot_mapping, k.to(self.storage.dtype))
        self.value_caches[layer].view(flat_shape).index_copy_(0, slot_mapping, v.to(self.storage.dtype))

    def gather(self, layer: int, block_table: Tensor | Sequence[int], seq_len: int) -> tuple[Tensor, Tensor]:
        """K and V of one sequence's first ``seq_len`` tokens, each ``[seq_len, num_kv_heads, head_dim]``.

        block_table: ``[num_table_blocks]`` physical block ids (at least ceil(seq_len / block_size)).
        """
        num_table_blocks = -(-seq_len // self.block_size)
        if not torch.is_tensor(block_table):
            block_table = torch.tensor(block_table[:num_table_blocks], dtype=torch.long, device=self.storage.device)
        blocks = block_table[:num_table_blocks]
        flat_shape = (-1, self.num_kv_heads, self.head_dim)
        keys = self.key_caches[layer][blocks].view(flat_shape)[:seq_len]
        values = self.value_caches[layer][blocks].view(flat_shape)[:seq_len]
        return keys, values

    def copy_blocks(self, pairs: Sequence[tuple[int, int]]) -> None:
        """For each (src, dst): copy block src's K and V into block dst, in every layer."""
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], dtype=torch.long, device=self.storage.device)
        dst = torch.tensor([d for _, d in pairs], dtype=torch.long, device=self.storage.device)
        self.storage[:, :, dst] = self.storage[:, :, src]
