"""Checks for Lab 0.2, chapter 5, part 1: building one step's batch (decode-first, chunked prefill).

The student's ``build_batch(decode_ids, prefill_queue, token_budget, chunked)`` returns the step's
batch as a list of ``(request_id, num_tokens)`` pairs. The rule is the one
:class:`course_lib.scheduler.Scheduler` follows in ``schedule()`` (its tests check that the two
agree step by step):

1. every decode, in the given order, one token each (``ValueError`` if the decodes alone exceed
   the budget: a scheduler must size its budget so they always fit);
2. then the prefills, in queue order. With ``chunked=True`` each takes ``min(tokens left, budget
   left)`` while budget is left, so at most the last one is cut into a chunk. With
   ``chunked=False`` a prompt runs whole or not at all, and the first one that does not fit ends
   the batch (nobody overtakes it: first come, first served).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Any, Callable

from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, short_repr

__all__ = ["check_build_batch", "random_batch_case", "reference_build_batch"]

register_reference_names("reference_build_batch")

Batch = list[tuple[Hashable, int]]


def reference_build_batch(decode_ids: Sequence[Hashable], prefill_queue: Sequence[tuple[Hashable, int]],
                          token_budget: int, chunked: bool = True) -> Batch:
    """The batch of one step under decode-maximal batching (see the module docstring)."""
    if not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(f"token_budget must be an integer >= 1, got {token_budget!r}")
    if len(decode_ids) > token_budget:
        raise ValueError(f"{len(decode_ids)} decodes do not fit in token_budget {token_budget}")
    batch: Batch = [(request_id, 1) for request_id in decode_ids]
    budget = token_budget - len(decode_ids)
    for request_id, tokens_left in prefill_queue:
        if budget == 0:
            break
        if not chunked and tokens_left > budget:
            break  # head of the line does not fit whole: it waits, and so does everyone behind it
        num_tokens = min(tokens_left, budget)
        batch.append((request_id, num_tokens))
        budget -= num_tokens
    return batch


def random_batch_case(seed: int) -> tuple[list[str], list[tuple[str, int]], int]:
    """A reproducible (decode_ids, prefill_queue, token_budget) with the budget >= the decodes.

    Request ids are strings ("d0", "p3", ...); prompt lengths range from 1 to ~3x the budget, so
    every case mixes prompts that fit whole, one that is cut, and ones that wait.
    """
    rng = random.Random(seed)
    num_decodes = rng.randint(0, 12)
    token_budget = num_decodes + rng.randint(0, 64)
    if token_budget == 0:
        token_budget = 1
    decode_ids = [f"d{index}" for index in rng.sample(range(100), num_decodes)]
    prefill_queue = [(f"p{index}", rng.randint(1, 3 * token_budget)) for index in range(rng.randint(0, 6))]
    return decode_ids, prefill_queue, token_budget


def _normalize(batch: Any) -> Batch | None:
    """The batch as a list of (id, int) pairs, or None when it has another shape."""
    if not isinstance(batch, (list, tuple)):
        return None
    pairs = []
    for item in batch:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            return None
        request_id, num_tokens = item
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool):
            return None
        pairs.append((request_id, num_tokens))
    return pairs


def _hint(got: Batch, expected: Batch, decode_ids: Sequence, token_budget: int, chunked: bool) -> str:
    decodes = set(decode_ids)
    got_ids = [request_id for request_id, _ in got]
    got_decode_positions = [position for position, request_id in enumerate(got_ids) if request_id in decodes]
    if got_decode_positions != list(range(len(got_decode_positions))):
        return ("decodes go first: a prefill chunk placed before a decode means the decode may not fit, and "
                "decodes are what running users are waiting on. Put every decode (1 token each) at the front.")
    if [item for item in got if item[0] in decodes] != [(request_id, 1) for request_id in decode_ids]:
        return "every decode id appears once, in the given order, with exactly 1 token."
    total = sum(num_tokens for _, num_tokens in got)
    if total > token_budget:
        return f"the batch holds {total} tokens but the budget is {token_budget}: decodes count against it too."
    if any(num_tokens <= 0 for _, num_tokens in got):
        return "never put a request with 0 tokens in the batch: stop when the budget is used up."
    if not chunked:
        return ("with chunked=False a prompt runs whole or not at all, and the first prompt that does not fit "
                "stops the batch (later, shorter prompts may not overtake it).")
    if total < sum(num_tokens for _, num_tokens in expected):
        return ("budget is left over: with chunked=True the first prompt that does not fit whole takes the rest "
                "of the budget as a chunk.")
    return "prefills follow the queue order; each takes min(its tokens left, budget left)."


def check_build_batch(student_build_batch: Callable, decode_ids: Sequence[Hashable],
                      prefill_queue: Sequence[tuple[Hashable, int]], token_budget: int, chunked: bool = True) -> None:
    """``student_build_batch(decode_ids, prefill_queue, token_budget, chunked)`` must equal the reference.

    When the decodes alone exceed the budget, the student's function must raise ValueError.
    """
    require_own_implementation(student_build_batch, "build_batch")
    decode_ids, prefill_queue = list(decode_ids), [tuple(entry) for entry in prefill_queue]
    call = f"build_batch({short_repr(decode_ids)}, {short_repr(prefill_queue)}, {token_budget}, chunked={chunked})"
    if len(decode_ids) > token_budget:
        try:
            got = student_build_batch(list(decode_ids), list(prefill_queue), token_budget, chunked)
        except ValueError:
            return
        except NotImplementedError:
            raise
        except Exception as error:
            fail(f"{call} raised {type(error).__name__}; expected ValueError", expected="ValueError",
                 got=f"{type(error).__name__}: {error}", hint="raise ValueError with a message naming token_budget.")
        fail(f"{call}: {len(decode_ids)} decodes cannot fit in a budget of {token_budget}", expected="ValueError",
             got=got, hint="raise ValueError when len(decode_ids) > token_budget instead of returning a batch.")
    got = call_student(student_build_batch, "build_batch", decode_ids, prefill_queue, token_budget, chunked)
    expected = reference_build_batch(decode_ids, prefill_queue, token_budget, chunked)
    batch = _normalize(got)
    if batch is None:
        fail(f"{call} must return a list of (request_id, num_tokens) pairs", expected=expected, got=got,
             hint="return e.g. [('d0', 1), ('p1', 40)]: decodes then prefill chunks.")
    if batch == expected:
        return
    fail(f"{call} built a different batch", expected=expected, got=batch,
         hint=_hint(batch, expected, decode_ids, token_budget, chunked))
