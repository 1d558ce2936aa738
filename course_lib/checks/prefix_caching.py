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

``check_prefix_cache_in_engine`` then runs the student's two functions where they matter: they
drive the real engine's prefix cache (``BlockAllocator(..., hash_blocks=, longest_cached_prefix=)``)
while users share a system prompt. The engine runs on the check's side and counts, through the
model it calls, the positions really computed; the student's functions are called on plain data.
The run must give every user the same tokens as with caching off, and skip exactly the prefill
work (and hold exactly the blocks) the reference functions skip and hold.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Callable

from course_lib import paged
from course_lib.checks import (
    CheckFailed,
    call_student,
    fail,
    one_thread,
    register_reference_names,
    require_own_implementation,
    short_repr,
    smollm2,
)
from course_lib.checks._shared import CountingModel
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.paged import hash_block

__all__ = [
    "check_hash_blocks",
    "check_longest_cached_prefix",
    "check_prefix_cache_in_engine",
    "random_prompt",
    "reference_hash_blocks",
    "reference_longest_cached_prefix",
    "serve_shared_prompt",
    "shared_prefix_prompts",
]

register_reference_names("reference_hash_blocks", "reference_longest_cached_prefix", "hash_blocks",
                         "longest_cached_prefix")

reference_hash_blocks = reference(paged.hash_blocks)
"""Chained hashes of the full blocks of ``token_ids`` (``course_lib.paged.hash_blocks``)."""
reference_longest_cached_prefix = reference(paged.longest_cached_prefix)
"""Leading tokens whose KV is cached (``course_lib.paged.longest_cached_prefix``)."""


def random_prompt(seed: int, length: int, vocab_size: int = 1000) -> list[int]:
    """A reproducible list of ``length`` token ids below ``vocab_size``."""
    rng = random.Random(seed)
    return [rng.randrange(vocab_size) for _ in range(length)]


def shared_prefix_prompts(seed: int, shared_tokens: int, own_lengths: Sequence[int]) -> list[list[int]]:
    """Prompts that all start with the same ``shared_tokens`` ids, each followed by its own tokens."""
    prefix = random_prompt(seed, shared_tokens)
    return [prefix + random_prompt(seed * 1000 + 1 + index, own) for index, own in enumerate(own_lengths)]


@recorded_check
def check_hash_blocks(student_hash_blocks: Callable, token_ids: Sequence[int], block_size: int) -> None:
    """``student_hash_blocks(token_ids, block_size)`` must give the reference's chained hashes, full blocks only."""
    require_own_implementation(student_hash_blocks, "hash_blocks")
    token_ids = list(token_ids)
    call = f"hash_blocks({short_repr(token_ids)}, {block_size})"
    got = call_student(student_hash_blocks, "hash_blocks", token_ids, block_size)
    if not isinstance(got, (list, tuple)) or not all(isinstance(item, bytes) for item in got):
        fail(f"{call} must return a list of bytes (one hash per full block)", expected="list[bytes]", got=got,
             hint="hash each block with hash_block(parent_hash, block_token_ids), which returns bytes.")
    got = list(got)
    expected = reference_hash_blocks(token_ids, block_size)
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


@recorded_check
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
    if not isinstance(got, int) or isinstance(got, bool):
        fail(f"{call} must return an int (a number of tokens)", expected="int", got=got,
             hint="return the number of cached leading tokens, e.g. 32 for two cached blocks of 16.")
    expected = reference_longest_cached_prefix(token_ids, cache, block_size)
    # What a lookup that forgets the "- 1" would find (every full block, the last token too): asked on
    # every run, right or wrong, so that the kit's recording holds it for the diagnosis below.
    all_blocks_hit = reference_longest_cached_prefix(token_ids + [0], cache, block_size)
    if got == expected:
        return
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


# ---------------------------------------------------------------------------------------------
# The student's functions driving the real engine's prefix cache
# ---------------------------------------------------------------------------------------------


def serve_shared_prompt(model, tokenizer, prompts: Sequence[Sequence[int]], *, block_size: int,
                        enable_prefix_caching: bool, hash_blocks: Callable | None = None,
                        longest_cached_prefix: Callable | None = None, max_tokens: int = 4,
                        num_blocks: int | None = None) -> dict:
    """The first prompt alone, then the others together, through an engine whose prefix cache runs
    on the given functions (None: the course's). Greedy.

    Returns {"tokens": per prompt the generated ids, "positions": positions the model ran in the
    second phase, "cached_tokens": prefix-cache hits (engine.stats), "peak_blocks": the most blocks
    held at once in the second phase, "ttft_s": per later prompt, seconds to its first token}.
    """
    import time

    from course_lib.engine import LLMEngine
    from course_lib.paged import BlockAllocator
    from course_lib.sampling import SamplingParams

    counting = CountingModel(model)
    longest = max(len(prompt) for prompt in prompts) + max_tokens
    num_blocks = num_blocks or len(prompts) * (-(-longest // block_size)) + 8
    allocator = BlockAllocator(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                               hash_blocks=hash_blocks, longest_cached_prefix=longest_cached_prefix)
    # The budget holds every prompt whole, so nothing is chunked (and the kit, where chunking runs on
    # the student's build_batch, runs the same steps).
    engine = LLMEngine(counting, tokenizer, allocator=allocator, max_num_seqs=len(prompts),
                       max_num_batched_tokens=max(256, len(prompts) * longest), enable_chunked_prefill=False)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    tokens = [list(engine.generate([list(prompts[0])], params)[0].token_ids)]
    positions_before = counting.num_positions
    added_at, ttft_s, later = {}, {}, {}
    for index, prompt in enumerate(prompts[1:], start=1):
        request_id = engine.add_request(list(prompt), params, request_id=f"user-{index}")
        added_at[request_id] = time.perf_counter()
        later[request_id] = []
    peak_blocks = 0
    while engine.has_unfinished():
        outputs = engine.step()
        now = time.perf_counter()
        peak_blocks = max(peak_blocks, sum(1 for count in allocator.ref_counts if count > 0))
        for output in outputs:
            later[output.request_id].extend(output.new_token_ids)
            ttft_s.setdefault(output.request_id, now - added_at[output.request_id])
    tokens += [later[request_id] for request_id in added_at]
    return {"tokens": tokens, "positions": counting.num_positions - positions_before,
            "cached_tokens": engine.stats.num_prefix_cached_tokens, "peak_blocks": peak_blocks,
            "ttft_s": [ttft_s[request_id] for request_id in added_at]}


def _users(seed: int, shared_tokens: int, own_lengths: Sequence[int], vocab_size: int,
           block_size: int) -> list[list[int]]:
    """Prompts that share a prefix, then the prefix's full blocks alone: a prompt entirely cached."""
    rng = random.Random(seed)
    prefix = [rng.randrange(1, vocab_size) for _ in range(shared_tokens)]
    users = [prefix + [rng.randrange(1, vocab_size) for _ in range(own)] for own in own_lengths]
    whole_blocks = prefix[: len(prefix) // block_size * block_size]
    return users + ([whole_blocks] if whole_blocks else [])


def _engine_model(model: str):
    from course_lib.checks.decode import tiny_model

    smollm2_model, tokenizer = smollm2()
    if model == "smollm2":
        return smollm2_model, tokenizer
    if model == "tiny":
        return tiny_model(seed=6), tokenizer
    raise ValueError(f"model must be 'smollm2' or 'tiny', got {model!r}")


def _reference_serve(model: str, prompts: list[list[int]], block_size: int, enable_prefix_caching: bool) -> dict:
    """The reference's numbers for the scenario (plain arguments: the kit replays what it recorded)."""
    engine_model, tokenizer = _engine_model(model)
    result = serve_shared_prompt(engine_model, tokenizer, prompts, block_size=block_size,
                                 enable_prefix_caching=enable_prefix_caching)
    return {key: result[key] for key in ("tokens", "positions", "cached_tokens", "peak_blocks")}


_reference_serve_run = reference(_reference_serve)


@recorded_check
def check_prefix_cache_in_engine(student_hash_blocks: Callable, student_longest_cached_prefix: Callable, *,
                                 model: str = "smollm2", shared_tokens: int = 40, own_lengths: Sequence[int] = (5, 9, 3),
                                 block_size: int = 8, seed: int = 0) -> None:
    """The student's ``hash_blocks`` and ``longest_cached_prefix`` run the engine's prefix cache.

    Users share a ``shared_tokens``-token system prompt; the first comes alone, then the others, and
    last a prompt made of the prefix's full blocks only (cached whole: the last token must still run). The tokens must equal those of a run without caching; the positions the model
    computed, the cached tokens and the peak of blocks held must equal the reference functions'.
    """
    import torch

    require_own_implementation(student_hash_blocks, "hash_blocks")
    require_own_implementation(student_longest_cached_prefix, "longest_cached_prefix")
    engine_model, tokenizer = _engine_model(model)
    prompts = _users(seed, shared_tokens, list(own_lengths), engine_model.config.vocab_size, block_size)
    setup = (f"{len(prompts)} prompts sharing a {shared_tokens}-token prefix (own tokens {list(own_lengths)}, then "
             f"the prefix's full blocks alone), blocks of {block_size}, model {model}")
    with one_thread(), torch.inference_mode():
        try:
            got = serve_shared_prompt(engine_model, tokenizer, prompts, block_size=block_size,
                                      enable_prefix_caching=True, hash_blocks=student_hash_blocks,
                                      longest_cached_prefix=student_longest_cached_prefix)
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as error:
            raise CheckFailed(f"the engine's prefix cache, run on your functions, failed ({setup}): "
                              f"{type(error).__name__}: {error}\n  hint: the allocator checks what your functions "
                              "return: one hash per full block, and a cached prefix that is a whole number of "
                              "blocks, all of them in the cache, and shorter than the prompt.") from error
        uncached = _reference_serve_run(model, prompts, block_size, False)
        expected = _reference_serve_run(model, prompts, block_size, True)
    for index, (tokens, reference_tokens) in enumerate(zip(got["tokens"], uncached["tokens"])):
        if tokens != reference_tokens:
            fail(f"prompt {index} generated other tokens with your prefix cache than without any cache ({setup})",
                 expected=reference_tokens, got=tokens,
                 hint="a cache hit must reuse only blocks whose whole prefix is equal: chain the hashes, and stop "
                      "at the first block that misses.")
    measures = (("positions the model computed after the first user", "positions",
                 "a hit skips the prefill of the cached blocks; count whole leading blocks, stop at the first miss, "
                 "and leave the last prompt token to run."),
                ("tokens served from the prefix cache", "cached_tokens",
                 "longest_cached_prefix returns block_size * (leading blocks found), at most "
                 "(len(token_ids) - 1) // block_size blocks."),
                ("KV blocks held at once", "peak_blocks",
                 "shared blocks are held once; hashes must match the reference's so the same blocks are shared."))
    for what, key, hint in measures:
        if got[key] != expected[key]:
            fail(f"{what}, with your functions driving the engine's prefix cache ({setup}); without caching: "
                 f"{uncached[key]}", expected=expected[key], got=got[key], hint=hint)
