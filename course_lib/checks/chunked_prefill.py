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

``check_build_batch_in_engine`` then runs the student's function where it matters: it plans every
step of the real engine (``Scheduler(config, allocator, build_batch=...)``) while short requests
decode and a long prompt arrives. The engine runs on the check's side, with the student's function
called on plain data; the check compares each step's plan and every generated token with the same
run planned by the reference.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Any, Callable

from course_lib import scheduler as scheduler_module
from course_lib.checks import (
    CheckFailed,
    call_student,
    fail,
    register_reference_names,
    require_own_implementation,
    short_repr,
    smollm2,
)
from course_lib.checks._shared import expect_raises
from course_lib.checks.fixtures import recorded_check, reference

__all__ = ["check_build_batch", "check_build_batch_in_engine", "random_batch_case", "reference_build_batch",
           "run_engine_with"]

register_reference_names("reference_build_batch", "build_batch")

Batch = list[tuple[Hashable, int]]

reference_build_batch = reference(scheduler_module.build_batch)
"""The batch of one step under decode-maximal batching (``course_lib.scheduler.build_batch``)."""


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


def _hint(got: Batch, expected: Batch, decode_ids: Sequence, prefill_queue: Sequence[tuple[Hashable, int]],
          token_budget: int, chunked: bool) -> str:
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
        queue_ids = [request_id for request_id, _ in prefill_queue]
        got_prefills = [request_id for request_id, _ in got if request_id not in decodes and request_id in queue_ids]
        left_out = next((request_id for request_id in queue_ids if request_id not in got_prefills), None)
        overtaking = [request_id for request_id in got_prefills
                      if left_out is not None and queue_ids.index(request_id) > queue_ids.index(left_out)]
        if overtaking:
            return (f"prompt {overtaking[0]!r} overtook {left_out!r}, which came first but did not fit: with "
                    "chunked=False the first prompt that does not fit ends the batch, and every prompt behind it "
                    "waits too (first come, first served; otherwise short prompts could keep a long one waiting "
                    "forever).")
        return ("with chunked=False a prompt runs whole or not at all, and the first prompt that does not fit "
                "stops the batch (later, shorter prompts may not overtake it).")
    if total < sum(num_tokens for _, num_tokens in expected):
        return ("budget is left over: with chunked=True the first prompt that does not fit whole takes the rest "
                "of the budget as a chunk.")
    return "prefills follow the queue order; each takes min(its tokens left, budget left)."


@recorded_check
def check_build_batch(student_build_batch: Callable, decode_ids: Sequence[Hashable],
                      prefill_queue: Sequence[tuple[Hashable, int]], token_budget: int, chunked: bool = True) -> None:
    """``student_build_batch(decode_ids, prefill_queue, token_budget, chunked)`` must equal the reference.

    When the decodes alone exceed the budget, the student's function must raise ValueError.
    """
    require_own_implementation(student_build_batch, "build_batch")
    decode_ids, prefill_queue = list(decode_ids), [tuple(entry) for entry in prefill_queue]
    call = f"build_batch({short_repr(decode_ids)}, {short_repr(prefill_queue)}, {token_budget}, chunked={chunked})"
    if len(decode_ids) > token_budget:
        expect_raises(student_build_batch, call, ValueError, list(decode_ids), list(prefill_queue), token_budget,
                      chunked, hint=f"{len(decode_ids)} decodes cannot fit in a budget of {token_budget}: raise "
                                    "ValueError (naming token_budget) when len(decode_ids) > token_budget instead "
                                    "of returning a batch.")
        return
    got = call_student(student_build_batch, "build_batch", decode_ids, prefill_queue, token_budget, chunked)
    batch = _normalize(got)
    if batch is None:
        fail(f"{call} must return a list of (request_id, num_tokens) pairs", expected="[(request_id, num_tokens), ...]",
             got=got, hint="return e.g. [('d0', 1), ('p1', 40)]: decodes then prefill chunks.")
    expected = reference_build_batch(decode_ids, prefill_queue, token_budget, chunked)
    if batch == expected:
        return
    fail(f"{call} built a different batch", expected=expected, got=batch,
         hint=_hint(batch, expected, decode_ids, prefill_queue, token_budget, chunked))


# ---------------------------------------------------------------------------------------------
# The student's build_batch planning the real engine
# ---------------------------------------------------------------------------------------------


def _prompt_ids(seed: int, length: int, vocab_size: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, vocab_size) for _ in range(length)]


def run_engine_with(build_batch: Callable | None, model, tokenizer, *, short_prompts: Sequence[Sequence[int]],
                    long_prompt: Sequence[int], long_after_steps: int, token_budget: int, chunked: bool = True,
                    short_max_tokens: int = 8, long_max_tokens: int = 4, step_limit: int = 500) -> dict:
    """Serve short prompts, add a long one after ``long_after_steps`` steps; plan with ``build_batch``.

    Greedy, one engine around ``Scheduler(config, allocator, build_batch=build_batch)`` (None: the
    scheduler's own). Returns {"plans": per step the [(request_id, num_tokens)] that ran,
    "tokens": {request_id: generated ids}, "token_times": {request_id: [perf_counter time per token]},
    "long_added_at": when the long prompt was added}.
    """
    import time

    from course_lib.engine import LLMEngine
    from course_lib.paged import BlockAllocator
    from course_lib.sampling import SamplingParams
    from course_lib.scheduler import Scheduler, SchedulerConfig

    block_size = 16
    longest = max(len(long_prompt) + long_max_tokens, *(len(p) + short_max_tokens for p in short_prompts))
    num_blocks = (len(short_prompts) + 1) * (-(-longest // block_size)) + 4
    allocator = BlockAllocator(num_blocks, block_size)
    config = SchedulerConfig(max_num_seqs=len(short_prompts) + 1, max_num_batched_tokens=token_budget,
                             enable_chunked_prefill=chunked, max_model_len=model.config.max_position_embeddings)
    scheduler = Scheduler(config, allocator, build_batch=build_batch)
    plans: list[list[tuple[Any, int]]] = []
    planner = scheduler.schedule

    def recorded_schedule():
        output = planner()
        plans.append([(chunk.request.request_id, chunk.num_tokens) for chunk in output.chunks])
        return output

    scheduler.schedule = recorded_schedule
    engine = LLMEngine(model, tokenizer, allocator=allocator, scheduler=scheduler)
    short_params = SamplingParams(temperature=0.0, max_tokens=short_max_tokens, ignore_eos=True)
    for number, prompt in enumerate(short_prompts):
        engine.add_request(list(prompt), short_params, request_id=f"short-{number}")
    tokens: dict[Any, list[int]] = {}
    token_times: dict[Any, list[float]] = {}
    long_added_at = None
    for step in range(step_limit):
        if step == long_after_steps:
            engine.add_request(list(long_prompt), SamplingParams(temperature=0.0, max_tokens=long_max_tokens,
                                                                 ignore_eos=True), request_id="long")
            long_added_at = time.perf_counter()
        if not engine.has_unfinished() and step >= long_after_steps:
            return {"plans": plans, "tokens": tokens, "token_times": token_times, "long_added_at": long_added_at}
        for output in engine.step():
            tokens.setdefault(output.request_id, []).extend(output.new_token_ids)
            token_times.setdefault(output.request_id, []).append(time.perf_counter())
    raise RuntimeError(f"requests were still unfinished after {step_limit} steps")


def _scenario_model(model: str):
    from course_lib.checks.decode import tiny_model

    smollm2_model, tokenizer = smollm2()
    if model == "smollm2":
        return smollm2_model, tokenizer
    if model == "tiny":
        return tiny_model(seed=5), tokenizer  # its 96 ids are valid SmolLM2 ids: the tokenizer decodes them
    raise ValueError(f"model must be 'smollm2' or 'tiny', got {model!r}")


def _reference_engine_run(model: str, **scenario: Any) -> dict:
    """The scenario planned by the reference (plain arguments: the kit replays what it recorded)."""
    engine_model, tokenizer = _scenario_model(model)
    result = run_engine_with(None, engine_model, tokenizer, **scenario)
    return {"plans": result["plans"], "tokens": result["tokens"]}


_reference_run = reference(_reference_engine_run)


@recorded_check
def check_build_batch_in_engine(student_build_batch: Callable, *, model: str = "smollm2", num_short: int = 3,
                                long_prompt_len: int = 80, token_budget: int = 24, long_after_steps: int = 2,
                                chunked: bool = True, seed: int = 0) -> None:
    """The student's ``build_batch`` plans every step of the real engine (``Scheduler(..., build_batch=...)``).

    ``num_short`` requests are decoding when a ``long_prompt_len``-token prompt arrives. Every step's
    plan and every generated token must be those of the same run planned by the reference.
    """
    import torch

    from course_lib.checks import one_thread

    require_own_implementation(student_build_batch, "build_batch")
    engine_model, tokenizer = _scenario_model(model)
    vocab_size = engine_model.config.vocab_size
    short_prompts = [_prompt_ids(seed * 100 + number, 6 + 3 * number, vocab_size) for number in range(num_short)]
    long_prompt = _prompt_ids(seed * 100 + 99, long_prompt_len, vocab_size)
    scenario = dict(short_prompts=short_prompts, long_prompt=long_prompt, long_after_steps=long_after_steps,
                    token_budget=token_budget, chunked=chunked)
    setup = (f"{num_short} short requests decoding, a {long_prompt_len}-token prompt after {long_after_steps} steps, "
             f"token budget {token_budget}, chunked={chunked}, model {model}")
    with one_thread(), torch.inference_mode():
        try:
            got = run_engine_with(student_build_batch, engine_model, tokenizer, **scenario)
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as error:
            raise CheckFailed(f"the engine planned by your build_batch failed ({setup}): {type(error).__name__}: "
                              f"{error}\n  hint: the scheduler calls build_batch(decode_ids, prefill_queue, "
                              "token_budget, chunked) before every step and checks its plan: every decode first "
                              "(1 token each), no request more tokens than it has left, the budget kept.") from error
        expected = _reference_run(model, **scenario)
    for step, (got_plan, expected_plan) in enumerate(zip(got["plans"], expected["plans"])):
        if got_plan != expected_plan:
            fail(f"step {step} of the engine ran a different batch under your build_batch ({setup})",
                 expected=expected_plan, got=got_plan,
                 hint="the engine asks build_batch which tokens of which requests run; compare with the unit "
                      "test cases above (decodes first, then prompts in queue order, the last one cut to the "
                      "budget left).")
    if len(got["plans"]) != len(expected["plans"]):
        fail(f"the run took {len(got['plans'])} steps under your build_batch, {len(expected['plans'])} under the "
             f"reference ({setup})", expected=len(expected["plans"]), got=len(got["plans"]),
             hint="every step should carry as many prompt tokens as the budget allows.")
    for request_id, reference_tokens in expected["tokens"].items():
        if got["tokens"].get(request_id) != reference_tokens:
            fail(f"request {request_id!r} generated other tokens under your build_batch ({setup})",
                 expected=reference_tokens, got=got["tokens"].get(request_id),
                 hint="chunks must cover each prompt exactly once, in order: a token run twice or skipped "
                      "changes the keys and values the model attends to.")
