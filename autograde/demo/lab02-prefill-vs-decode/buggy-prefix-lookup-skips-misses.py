"""Demo student: the prefix lookup counts every cached block, not only the leading run before a miss."""

DESCRIPTION = (
    "longest_cached_prefix counts every usable block whose hash is in the cache instead of stopping at the "
    "first miss: after an eviction, a block that survived its evicted predecessor is counted although its "
    "keys and values cannot be used without it. The worked example's eviction row shows it in the visible "
    "cell: loses both longest_cached_prefix cells (the engine cells evict nothing), expected 13/16"
)
BASE = "solution"
ANSWERS = {
    "longest_cached_prefix": '''
def longest_cached_prefix(token_ids, cache, block_size):
    """How many leading tokens of a prompt already have their KV in the prefix cache."""
    usable_blocks = (len(token_ids) - 1) // block_size
    hits = sum(1 for block_hash in hash_blocks(token_ids, block_size)[:usable_blocks] if block_hash in cache)
    return hits * block_size
''',
}
EXPECTED = {"05_beyond_the_basics": 13}
