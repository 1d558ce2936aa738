"""Demo student: hash_blocks also hashes the partial last block."""

DESCRIPTION = (
    "hash_blocks steps through the tokens with range(0, len(token_ids), block_size), so a partial last "
    "block gets a hash too (a block whose KV is still growing would become shareable): loses the "
    "hash_blocks cell; longest_cached_prefix still passes because it only looks at usable blocks; in the "
    "engine the allocator asks for the hashes of a request's computed tokens, gets one too many and refuses "
    "to register them: loses the engine cell too, expected 11/16"
)
BASE = "solution"
ANSWERS = {
    "hash_blocks": '''
def hash_blocks(token_ids, block_size):
    """Chained hashes of the blocks of a token sequence."""
    hashes = []
    parent_hash = b""
    for start in range(0, len(token_ids), block_size):
        parent_hash = hash_block(parent_hash, token_ids[start : start + block_size])
        hashes.append(parent_hash)
    return hashes
''',
}
EXPECTED = {"05_beyond_the_basics": 11}
