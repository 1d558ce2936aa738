"""Demo student: the allocator never checks that the pool has room; an empty free list raises IndexError."""

DESCRIPTION = (
    "allocate and append_slot pop blocks from the free list without checking first, so a request that does "
    "not fit raises IndexError from deque.popleft (after taking some blocks) instead of OutOfBlocksError "
    "with nothing taken: the old checks accepted any exception as a refusal; loses the cells that refuse "
    "for lack of blocks"
)
BASE = "solution"
ANSWERS = {
    'block_allocator': '''
class BlockAllocator:
    """A pool of `num_blocks` blocks of `block_size` token slots, handed to sequences on demand.

    Args:
        num_blocks: int >= 1, blocks in the pool (ids 0 .. num_blocks - 1).
        block_size: int >= 1, token slots per block.
    Sequence ids are any hashable (the engine uses request ids). When the pool is short, allocate
    and append_slot raise OutOfBlocksError and take nothing.
    """

    def __init__(self, num_blocks, block_size):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks = deque(range(num_blocks))  # taken from the left, returned on the right
        self.ref_counts = [0] * num_blocks  # how many block tables hold each block
        self.tables = {}  # seq_id -> list of physical block ids, in logical order
        self.num_tokens = {}  # seq_id -> tokens that have a slot

    @property
    def num_free_blocks(self):
        """int: blocks that no sequence holds."""
        return len(self.free_blocks)

    def blocks_needed(self, num_tokens):
        """int: blocks that hold `num_tokens` tokens, ceil(num_tokens / block_size)."""
        return -(-num_tokens // self.block_size)

    def can_allocate(self, token_ids):
        """bool: True if a new sequence with these tokens (list[int]) fits now."""
        return self.blocks_needed(len(token_ids)) <= self.num_free_blocks

    def allocate(self, seq_id, token_ids):
        """Give a new sequence blocks for all of `token_ids`; return 0 (no token is cached)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already holds blocks")
        table = [self.free_blocks.popleft() for _ in range(self.blocks_needed(len(token_ids)))]
        for block in table:
            self.ref_counts[block] = 1
        self.tables[seq_id] = table
        self.num_tokens[seq_id] = len(token_ids)
        return 0

    def can_append(self, seq_id):
        """bool: True if `append_slot(seq_id)` would succeed now."""
        table = self.tables[seq_id]
        last_block_full = self.num_tokens[seq_id] % self.block_size == 0
        last_block_shared = self.ref_counts[table[-1]] > 1
        return not (last_block_full or last_block_shared) or self.num_free_blocks >= 1

    def append_slot(self, seq_id):
        """Make room for the sequence's next token.

        Returns (src_block, dst_block) if the last block was shared and had to be replaced by a
        private copy (the engine copies the KV of src into dst), else None.
        """
        table = self.tables[seq_id]
        copy = None
        if self.num_tokens[seq_id] % self.block_size == 0:  # the last block is full
            table.append(self.free_blocks.popleft())
            self.ref_counts[table[-1]] = 1
        elif self.ref_counts[table[-1]] > 1:  # copy-on-write: other sequences still read this block
            shared = table[-1]
            table[-1] = self.free_blocks.popleft()
            self.ref_counts[table[-1]] = 1
            self.ref_counts[shared] -= 1
            copy = (shared, table[-1])
        self.num_tokens[seq_id] += 1
        return copy

    def mark_computed(self, seq_id, token_ids, num_computed_tokens):
        """Nothing to do without prefix caching (the engine calls it after each step): given."""
        return None

    def free(self, seq_id):
        """Drop the sequence's table; a block returns to the free list when no table holds it."""
        for block in self.tables[seq_id]:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        del self.tables[seq_id], self.num_tokens[seq_id]

    def block_table(self, seq_id):
        """list[int]: the sequence's physical block ids in logical order (a copy)."""
        return list(self.tables[seq_id])

    def fork(self, parent_id, child_id):
        """Give `child_id` the same blocks as `parent_id`, shared (each ref count + 1), nothing copied."""
        if child_id in self.tables:
            raise ValueError(f"sequence {child_id!r} already holds blocks")
        parent_table = self.tables[parent_id]
        for block in parent_table:
            self.ref_counts[block] += 1
        self.tables[child_id] = list(parent_table)
        self.num_tokens[child_id] = self.num_tokens[parent_id]

    def slot(self, seq_id, position):
        """int: physical slot of the token at `position` (0 <= position < the sequence's length)."""
        if not 0 <= position < self.num_tokens[seq_id]:
            raise ValueError(f"position must be in [0, {self.num_tokens[seq_id]}), got {position}")
        table = self.tables[seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

''',
}
EXPECTED = {'04_paging': 4}
