"""Demo student: the routing key hashes the whole prompt instead of its leading blocks."""

DESCRIPTION = (
    "prefix_key hashes every token of the prompt, so two prompts sharing a system prompt but asking different "
    "questions get different keys (and replicas): loses prefix_key (2) and the router cell that uses it (3); the "
    "hash ring keeps its 2: expected 2/7"
)
BASE = "solution"
ANSWERS = {
    "prefix_key": '''
import hashlib


def stable_hash(data):
    """A 64-bit hash of bytes that every process agrees on."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def token_bytes(token_ids):
    """Token ids as bytes to hash: each id as 4 little-endian bytes."""
    return b"".join(int(token).to_bytes(4, "little") for token in token_ids)


def prefix_key(prompt_token_ids, block_size, max_blocks):
    """The routing key of a prompt, or None."""
    if len(prompt_token_ids) < block_size:
        return None
    return stable_hash(token_bytes(prompt_token_ids))
''',
}
EXPECTED = {"04_replicas": 2}
