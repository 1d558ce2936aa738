"""course_lib.checks.prefix_caching: the references agree with the real allocator, the notebook's
answers pass, and the usual mistakes (partial block, unchained hashes, a hit covering the whole
prompt) fail with a hint that names them."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.checks import CheckFailed
from course_lib.checks import prefix_caching as checks
from course_lib.paged import BlockAllocator, hash_block
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "05_beyond_the_basics.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace of a student's notebook: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__", "hash_block": hash_block}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo(name: str) -> dict:
    return _student(runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"])


@pytest.fixture(scope="module")
def reference():
    return _student()


WORKED = [5, 6, 7, 8, 1, 2, 3, 4, 9, 9]


def test_worked_examples():
    hashes = checks.reference_hash_blocks(WORKED, 4)
    assert hashes == [hash_block(b"", [5, 6, 7, 8]), hash_block(hash_block(b"", [5, 6, 7, 8]), [1, 2, 3, 4])]
    cache = set(checks.reference_hash_blocks(WORKED[:8], 4))
    rows = {tuple(WORKED): 8, tuple(WORKED[:8]): 4, (5, 6, 7, 8, 0, 2, 3, 4, 9): 4, (1, 2, 3, 4, 5, 6, 7, 8, 9): 0}
    for prompt, cached_tokens in rows.items():
        assert checks.reference_longest_cached_prefix(list(prompt), cache, 4) == cached_tokens


@settings(max_examples=60, deadline=None)
@given(shared=st.integers(0, 70), own=st.lists(st.integers(0, 40), min_size=1, max_size=4),
       block_size=st.sampled_from([1, 2, 4, 16]))
def test_reference_matches_the_allocator(shared, own, block_size):
    """The allocator's prefix-cache hit for a new prompt equals reference_longest_cached_prefix."""
    prompts = [prompt for prompt in checks.shared_prefix_prompts(3, shared, own) if prompt]
    if not prompts:
        return
    allocator = BlockAllocator(num_blocks=256, block_size=block_size, enable_prefix_caching=True)
    cache: set[bytes] = set()
    for number, prompt in enumerate(prompts):
        expected = checks.reference_longest_cached_prefix(prompt, cache, block_size)
        assert allocator.allocate(number, prompt) == expected
        allocator.mark_computed(number, prompt, len(prompt))
        cache |= set(checks.reference_hash_blocks(prompt, block_size))
        allocator.free(number)


def test_reference_answers_pass(reference):
    for tokens, block_size in ([], 4), ([1, 2, 3], 4), (WORKED, 4), (checks.random_prompt(1, 100), 16):
        checks.check_hash_blocks(reference["hash_blocks"], tokens, block_size)
    users = checks.shared_prefix_prompts(5, 200, [30, 1, 57])
    for user in users:
        checks.check_longest_cached_prefix(reference["longest_cached_prefix"], user, users[:1], 16)
    checks.check_longest_cached_prefix(reference["longest_cached_prefix"], WORKED[:8], [WORKED[:8]], 4)


def test_partial_block_demo_fails_hash_blocks_only():
    student = _demo("buggy-partial-block-hash")
    with pytest.raises(CheckFailed, match="do not hash the partial last block"):
        checks.check_hash_blocks(student["hash_blocks"], WORKED, 4)
    checks.check_longest_cached_prefix(student["longest_cached_prefix"], WORKED, [WORKED[:8]], 4)


def test_whole_prompt_hit_demo_fails():
    student = _demo("buggy-whole-prompt-hit")
    with pytest.raises(CheckFailed, match="one token short"):
        checks.check_longest_cached_prefix(student["longest_cached_prefix"], WORKED[:8], [WORKED[:8]], 4)


def test_lookup_past_a_miss_demo_fails_the_visible_eviction_row():
    student = _demo("buggy-prefix-lookup-skips-misses")
    for prompt in ([5, 6, 7, 8, 1, 2, 3, 4, 9, 9], [5, 6, 7, 8, 1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9]):
        checks.check_longest_cached_prefix(student["longest_cached_prefix"], prompt, [WORKED[:8]], 4)
    with pytest.raises(CheckFailed, match="stop at the first block that misses"):
        checks.check_longest_cached_prefix(student["longest_cached_prefix"], [5, 6, 7, 8, 1, 2, 3, 4, 9],
                                           [WORKED[:8]], 4, evicted=[(0, 0)])


UNCHAINED = '''
def hash_blocks(token_ids, block_size):
    return [hash_block(b"", token_ids[i * block_size:(i + 1) * block_size])
            for i in range(len(token_ids) // block_size)]
'''

PYTHON_HASH = '''
def hash_blocks(token_ids, block_size):
    return [hash(tuple(token_ids[: (i + 1) * block_size])).to_bytes(8, "little", signed=True)
            for i in range(len(token_ids) // block_size)]
'''

NO_EARLY_STOP = '''
def longest_cached_prefix(token_ids, cache, block_size):
    usable = (len(token_ids) - 1) // block_size
    return sum(block_size for h in hash_blocks(token_ids, block_size)[:usable] if h in cache)
'''

BLOCKS_NOT_TOKENS = '''
def longest_cached_prefix(token_ids, cache, block_size):
    usable = (len(token_ids) - 1) // block_size
    hits = 0
    for h in hash_blocks(token_ids, block_size)[:usable]:
        if h not in cache:
            break
        hits += 1
    return hits
'''


@pytest.mark.parametrize("source, phrase", [(UNCHAINED, "previous block's hash"), (PYTHON_HASH, "given hash_block")])
def test_wrong_hashes_fail_with_a_hint(source, phrase):
    student = _student({"hash_blocks": source})
    with pytest.raises(CheckFailed, match=phrase):
        checks.check_hash_blocks(student["hash_blocks"], WORKED, 4)


@pytest.mark.parametrize("source, phrase", [(NO_EARLY_STOP, "stop at the first block that misses"),
                                            (BLOCKS_NOT_TOKENS, "whole blocks only")])
def test_wrong_lookups_fail_with_a_hint(source, phrase):
    student = _student({"longest_cached_prefix": source})
    long_prompt = checks.random_prompt(7, 50)
    with pytest.raises(CheckFailed, match=phrase):
        checks.check_longest_cached_prefix(student["longest_cached_prefix"], WORKED, [WORKED[:8]], 4)
        # blocks 0 and 2 cached, block 1 evicted: only block 0 counts
        checks.check_longest_cached_prefix(student["longest_cached_prefix"], long_prompt, [long_prompt], 16,
                                           evicted=[(0, 1)])


def test_eviction_stops_the_lookup(reference):
    long_prompt = checks.random_prompt(7, 50)
    hashes = checks.reference_hash_blocks(long_prompt, 16)
    cache = set(hashes) - {hashes[1]}
    assert checks.reference_longest_cached_prefix(long_prompt, cache, 16) == 16
    checks.check_longest_cached_prefix(reference["longest_cached_prefix"], long_prompt, [long_prompt], 16,
                                       evicted=[(0, 1)])


def test_reexporting_the_reference_earns_nothing():
    with pytest.raises(CheckFailed, match="reference"):
        checks.check_hash_blocks(checks.reference_hash_blocks, WORKED, 4)


# ---------------------------------------------------------------------------------------------
# The student's hashing driving the real engine's prefix cache (the tiny model keeps these fast)
# ---------------------------------------------------------------------------------------------


def test_reference_answers_drive_the_engine_like_the_course(reference):
    checks.check_prefix_cache_in_engine(reference["hash_blocks"], reference["longest_cached_prefix"], model="tiny")
    checks.check_prefix_cache_in_engine(reference["hash_blocks"], reference["longest_cached_prefix"], model="tiny",
                                        shared_tokens=21, own_lengths=(4, 4), block_size=4, seed=2)


@pytest.mark.parametrize("demo, phrase", [
    ("buggy-whole-prompt-hit", "longest_cached_prefix returned"),
    ("buggy-partial-block-hash", "hash_blocks returned"),
])
def test_demo_bugs_stop_the_engine_with_the_reason(demo, phrase):
    student = _demo(demo)
    with pytest.raises(CheckFailed, match=phrase):
        checks.check_prefix_cache_in_engine(student["hash_blocks"], student["longest_cached_prefix"], model="tiny")


def test_a_cache_that_never_hits_keeps_the_tokens_but_not_the_savings(reference):
    def never_hits(token_ids, cache, block_size):
        return 0

    with pytest.raises(CheckFailed, match="positions the model computed"):
        checks.check_prefix_cache_in_engine(reference["hash_blocks"], never_hits, model="tiny")


def test_unchained_hashes_are_caught_by_the_unit_check():
    def unchained(token_ids, block_size):
        return [hash_block(b"", token_ids[start:start + block_size])
                for start in range(0, len(token_ids) - block_size + 1, block_size)]

    with pytest.raises(CheckFailed, match="cover everything before it"):
        checks.check_hash_blocks(unchained, [5, 6, 7, 8, 1, 2, 3, 4], 4)


def test_the_engine_measures_what_the_cache_saved(reference):
    from course_lib.checks.decode import tiny_model
    from course_lib.checks import smollm2

    _, tokenizer = smollm2()
    prompts = checks._users(0, 40, [5, 9, 3], 96, 8)
    on = checks.serve_shared_prompt(tiny_model(seed=6), tokenizer, prompts, block_size=8, enable_prefix_caching=True,
                                    hash_blocks=reference["hash_blocks"],
                                    longest_cached_prefix=reference["longest_cached_prefix"])
    off = checks.serve_shared_prompt(tiny_model(seed=6), tokenizer, prompts, block_size=8, enable_prefix_caching=False)
    assert on["tokens"] == off["tokens"]
    assert on["cached_tokens"] > 0 and on["positions"] < off["positions"]
    assert off["positions"] - on["positions"] == on["cached_tokens"]   # every hit is a prefill token not run
    assert on["peak_blocks"] < off["peak_blocks"]


@pytest.mark.slow
def test_reference_answers_drive_smollm2s_prefix_cache(reference):
    checks.check_prefix_cache_in_engine(reference["hash_blocks"], reference["longest_cached_prefix"])
