"""Checks for Lab 0.2, chapter 5, part 2: prefix caching (chained block hashes, the longest cached prefix).

A block's hash is :func:`course_lib.paged.hash_block` ``(parent_hash, block_token_ids)``, chained:
block 0's parent is ``b""``, block i's parent is the hash of block i - 1, so equal hashes mean
equal *prefixes*, not only equal blocks. Only **full** blocks are hashed: a partial last block
will still change, so nobody could reuse it. This is what :class:`course_lib.paged.BlockAllocator`
does, so the hashes are compared byte for byte.

``longest_cached_prefix(token_ids, cache, block_size)`` returns how many leading tokens have their
KV in ``cache`` (a set of block hashes): whole blocks only, hashes looked up in order until the
first miss, and never the whole prompt, since the last prompt token must run through the model to
produce the logits of the first output token. So at most ``(len(token_ids) - 1) // block_size``
blocks can hit. The allocator's ``allocate`` returns the same number (checked in the tests).
"""

from __future__ import annotations

import random
from collections.abc import Container, Sequence
from typing import Any, Callable

from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, short_repr
from course_lib.paged import hash_block

__all__ = [
    "check_hash_blocks",
    "check_longest_cached_prefix",
    "random_prompt",
    "reference_hash_blocks",
    "reference_longest_cached_prefix",
    "shared_prefix_prompts",
]

register_reference_names("reference_hash_blocks", "reference_longest_cached_prefix")


def _check_block_size(block_size: Any) -> None:
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")


def reference_hash_blocks(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """Chained hashes of the full blocks of ``token_ids`` (len = len(token_ids) // block_size)."""
    _check_block_size(block_size)
    hashes: list[bytes] = []
    parent = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, list(token_ids[start : start + block_size]))
        hashes.append(parent)
    return hashes


def reference_longest_cached_prefix(token_ids: Sequence[int], cache: Container[bytes], block_size: int) -> int:
    """Leading tokens of ``token_ids`` whose KV is cached: a multiple of block_size, < len(token_ids)."""
    _check_block_size(block_size)
    usable_blocks = max(len(token_ids) - 1, 0) // block_size
    num_hits = 0
    for block_hash in reference_hash_blocks(token_ids, block_size)[:usable_blocks]:
        if block_hash not in cache:
            break
        num_hits += 1
    return num_hits * block_size


def random_prompt(seed: int, length: int, vocab_size: int = 1000) -> list[int]:
    """A reproducible list of ``length`` token ids below ``vocab_size``."""
    rng = random.Random(seed)
    return [rng.randrange(vocab_size) for _ in range(length)]


def shared_prefix_prompts(seed: int, shared_tokens: int, own_lengths: Sequence[int]) -> list[list[int]]:
    """Prompts that all start with the same ``shared_tokens`` ids, each followed by its own tokens."""
    prefix = random_prompt(seed, shared_tokens)
    return [prefix + random_prompt(seed * 1000 + 1 + index, own) for index, own in enumerate(own_lengths)]


def check_hash_blocks(student_hash_blocks: Callable, token_ids: Sequence[int], block_size: int) -> None:
    """``student_hash_blocks(token_ids, block_size)`` must give the reference's chained hashes, full blocks only."""
    require_own_implementation(student_hash_blocks, "hash_blocks")
    token_ids = list(token_ids)
    call = f"hash_blocks({short_repr(token_ids)}, {block_size})"
    got = call_student(student_hash_blocks, "hash_blocks", token_ids, block_size)
    expected = reference_hash_blocks(token_ids, block_size)
    if not isinstance(got, (list, tuple)) or not all(isinstance(item, bytes) for item in got):
        fail(f"{call} must return a list of bytes (one hash per full block)", expected=expected, got=got,
             hint="hash each block with hash_block(parent_hash, block_token_ids), which returns bytes.")
    got = list(got)
    if got == expected:
        return
    num_full = len(token_ids) // block_size
    if len(got) == num_full + 1 and got[:num_full] == expected:
        fail(f"{call}: {len(token_ids)} tokens make {num_full} full blocks, so {num_full} hashes", expected=num_full,
             got=len(got), hint=("do not hash the partial last block: its KV is still growing, and nobody could "
                                 "reuse it. Hash only len(token_ids) // block_size blocks."))
    if len(got) != len(expected):
        fail(f"{call} returned {len(got)} hashes; {len(token_ids)} tokens in blocks of {block_size} have "
             f"{num_full} full blocks", expected=len(expected), got=len(got),
             hint="one hash per *full* block: len(token_ids) // block_size of them.")
    unchained = [hash_block(b"", token_ids[i * block_size : (i + 1) * block_size]) for i in range(num_full)]
    if got == unchained:
        hint = ("each block's hash must cover everything before it: pass the previous block's hash as parent_hash "
                "(b'' only for block 0). Otherwise two prompts that differ early would share later blocks.")
    elif got and got[0] != expected[0]:
        hint = "block 0: hash_block(b'', token_ids[0:block_size]). Use the given hash_block, not Python's hash()."
    else:
        hint = "block i covers token_ids[i * block_size : (i + 1) * block_size]; its parent is the hash of block i - 1."
    first_wrong = next(index for index, (a, b) in enumerate(zip(got, expected)) if a != b)
    fail(f"{call}: hash of block {first_wrong} differs", expected=expected[first_wrong], got=got[first_wrong],
         hint=hint)


def check_longest_cached_prefix(student_longest_cached_prefix: Callable, token_ids: Sequence[int],
                                cached_prompts: Sequence[Sequence[int]], block_size: int,
                                evicted: Sequence[tuple[int, int]] = ()) -> None:
    """Build a cache from the full blocks of ``cached_prompts``, then compare with the reference.

    The cache given to the student is a set of block hashes (as the reference allocator registers
    them once a prompt's KV is computed). ``evicted``: (prompt index, block index) pairs whose hash
    is removed again, as when memory ran short; a later block of that prompt may stay cached.
    """
    require_own_implementation(student_longest_cached_prefix, "longest_cached_prefix")
    token_ids = list(token_ids)
    hashes = [reference_hash_blocks(prompt, block_size) for prompt in cached_prompts]
    cache = {block_hash for prompt_hashes in hashes for block_hash in prompt_hashes}
    cache -= {hashes[prompt_index][block_index] for prompt_index, block_index in evicted}
    evictions = f", {len(evicted)} evicted" if evicted else ""
    call = (f"longest_cached_prefix({short_repr(token_ids)}, <cache of {len(cache)} block hashes{evictions}>, "
            f"{block_size})")
    got = call_student(student_longest_cached_prefix, "longest_cached_prefix", token_ids, set(cache), block_size)
    expected = reference_longest_cached_prefix(token_ids, cache, block_size)
    if not isinstance(got, int) or isinstance(got, bool):
        fail(f"{call} must return an int (a number of tokens)", expected=expected, got=got,
             hint="return the number of cached leading tokens, e.g. 32 for two cached blocks of 16.")
    if got == expected:
        return
    all_blocks_hit = reference_longest_cached_prefix(token_ids + [0], cache, block_size)
    if got == len(token_ids) or (got > expected and got == all_blocks_hit and got % block_size == 0):
        hint = ("a hit must stop at least one token short of the prompt: the last prompt token has to run through "
                "the model to give the logits of the first output token. Only (len(token_ids) - 1) // block_size "
                "blocks may hit.")
    elif got % block_size:
        hint = "count whole blocks only: the answer is (number of leading blocks found) * block_size."
    elif got < expected:
        hint = ("look the hashes up in order and stop at the first miss; are your hashes chained (hash_blocks)? "
                "Do you return tokens, not blocks?")
    else:
        hint = ("stop at the first block that misses: after an eviction a later block may still be cached, but "
                "without the missing block before it its KV cannot be used.")
    fail(f"{call} gave the wrong number of cached tokens", expected=expected, got=got, hint=hint)
