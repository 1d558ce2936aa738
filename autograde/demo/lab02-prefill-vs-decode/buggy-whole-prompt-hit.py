"""Demo student: a prefix-cache hit may cover the whole prompt."""

DESCRIPTION = (
    "longest_cached_prefix looks up all len(token_ids) // block_size full blocks, so a prompt that is "
    "entirely cached reports every token as cached and nothing would run to produce the first token's "
    "logits: loses both longest_cached_prefix cells, and the engine cell, where a prompt made of cached "
    "blocks only makes the allocator refuse the hit: expected 10/16"
)
BASE = "solution"
ANSWERS = {
    "longest_cached_prefix": '''
def longest_cached_prefix(token_ids, cache, block_size):
    """How many leading tokens of a prompt already have their KV in the prefix cache."""
    num_hit_blocks = 0
    for block_hash in hash_blocks(token_ids, block_size):
        if block_hash not in cache:
            break
        num_hit_blocks += 1
    return num_hit_blocks * block_size
''',
}
EXPECTED = {"05_beyond_the_basics": 10}
