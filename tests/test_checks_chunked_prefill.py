"""course_lib.checks.chunked_prefill: the reference batch rule agrees with the real scheduler, the
notebook's answer passes, and typical mistakes fail with a hint that names them."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.checks import CheckFailed
from course_lib.checks import chunked_prefill as checks
from course_lib.paged import BlockAllocator
from course_lib.sampling import SamplingParams
from course_lib.scheduler import Request, Scheduler, SchedulerConfig

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab02-prefill-vs-decode" / "05_beyond_the_basics.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab02-prefill-vs-decode"
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)


def _answer(grade_id: str, source: str | None = None):
    if source is None:
        notebook = nbformat.read(SOLUTION, as_version=4)
        source = next(cell.source for cell in notebook.cells
                      if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        source = SOLUTION_MARKER.sub("", source)
    namespace = {"__name__": "__main__"}
    exec(compile(source, f"<answer {grade_id}>", "exec"), namespace)
    return namespace[grade_id]


def _demo_answer(student: str, grade_id: str):
    return _answer(grade_id, runpy.run_path(str(DEMO_SPECS / f"{student}.py"))["ANSWERS"][grade_id])


@pytest.fixture(scope="module")
def build_batch():
    return _answer("build_batch")


def test_worked_example():
    batch = checks.reference_build_batch(["a", "b", "c"], [("P", 10), ("Q", 20)], 16)
    assert batch == [("a", 1), ("b", 1), ("c", 1), ("P", 10), ("Q", 3)]
    assert checks.reference_build_batch(["a", "b", "c"], [("P", 10), ("Q", 20)], 16, chunked=False) == [
        ("a", 1), ("b", 1), ("c", 1), ("P", 10)]


def test_reference_answer_passes(build_batch):
    checks.check_build_batch(build_batch, ["a"], [("p", 5), ("q", 50)], 10)
    checks.check_build_batch(build_batch, ["a", "b"], [("p", 1)], 1)  # must raise ValueError: it does
    for seed in range(30):
        decode_ids, queue, budget = checks.random_batch_case(seed)
        for chunked in (True, False):
            checks.check_build_batch(build_batch, decode_ids, queue, budget, chunked)


def test_random_cases_stay_valid():
    for seed in range(50):
        decode_ids, queue, budget = checks.random_batch_case(seed)
        assert len(decode_ids) <= budget and budget >= 1
        assert all(tokens >= 1 for _, tokens in queue)


PREFILL_FIRST = '''
def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    batch = []
    budget = token_budget - len(decode_ids)
    for request_id, left in prefill_queue:
        if budget <= 0 or (not chunked and left > budget):
            break
        batch.append((request_id, min(left, budget)))
        budget -= min(left, budget)
    return batch + [(request_id, 1) for request_id in decode_ids]
'''

OVERTAKES = '''
def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    batch = [(request_id, 1) for request_id in decode_ids]
    budget = token_budget - len(decode_ids)
    for request_id, left in prefill_queue:
        if budget == 0:
            break
        if not chunked and left > budget:
            continue
        batch.append((request_id, min(left, budget)))
        budget -= min(left, budget)
    return batch
'''

NO_CHUNK = '''
def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    batch = [(request_id, 1) for request_id in decode_ids]
    budget = token_budget - len(decode_ids)
    for request_id, left in prefill_queue:
        if left > budget:
            break
        batch.append((request_id, left))
        budget -= left
    return batch
'''


@pytest.mark.parametrize("source, phrase", [
    (PREFILL_FIRST, "decodes go first"),
    (OVERTAKES, "overtook .big., which came first but did not fit"),
    (NO_CHUNK, "takes the rest of the budget as a chunk"),
])
def test_buggy_answers_fail_with_a_hint(source, phrase):
    student = _answer("build_batch", source)
    with pytest.raises(CheckFailed, match=phrase):
        checks.check_build_batch(student, ["a", "b", "c"], [("P", 10), ("Q", 20)], 16, chunked=True)
        checks.check_build_batch(student, ["a"], [("big", 50), ("small", 2)], 10, chunked=False)


def test_demo_student_prefill_first_fails():
    student = _demo_answer("buggy-prefill-before-decode", "build_batch")
    with pytest.raises(CheckFailed, match="decodes go first"):
        checks.check_build_batch(student, ["a", "b", "c"], [("P", 10), ("Q", 20)], 16)


def test_missing_value_error_is_reported():
    student = _answer("build_batch", NO_CHUNK)
    with pytest.raises(CheckFailed, match="raise ValueError"):
        checks.check_build_batch(student, ["a", "b", "c"], [("p", 1)], 2)


def test_reexporting_the_reference_earns_nothing():
    with pytest.raises(CheckFailed, match="reference"):
        checks.check_build_batch(checks.reference_build_batch, ["a"], [], 4)


# --- the reference rule is what course_lib.scheduler.Scheduler really does --------------------


@settings(max_examples=40, deadline=None)
@given(
    prompt_lens=st.lists(st.integers(1, 90), min_size=1, max_size=10),
    max_tokens=st.lists(st.integers(1, 6), min_size=10, max_size=10),
    arrival_steps=st.lists(st.integers(0, 8), min_size=10, max_size=10),
    token_budget=st.integers(12, 80),
    chunked=st.booleans(),
)
def test_reference_matches_the_scheduler_step_by_step(prompt_lens, max_tokens, arrival_steps, token_budget, chunked):
    """Drive the real scheduler; before each schedule(), predict its chunks with reference_build_batch.

    The pool and max_num_seqs are large enough that only the token budget limits a step, so the
    two must agree exactly: decodes (requests that sampled last step) first, then prompts in order.
    """
    if not chunked:
        prompt_lens = [min(length, token_budget) for length in prompt_lens]
    allocator = BlockAllocator(num_blocks=512, block_size=4)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=12, max_num_batched_tokens=token_budget,
                                          enable_chunked_prefill=chunked), allocator)
    pending = sorted(range(len(prompt_lens)), key=lambda index: arrival_steps[index])
    decoding: list[str] = []  # ids that sampled in the previous step and are still running
    step = 0
    while pending or scheduler.has_unfinished():
        while pending and arrival_steps[pending[0]] <= step:
            index = pending.pop(0)
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens[index], ignore_eos=True)
            scheduler.add(Request(f"r{index}", list(range(1, prompt_lens[index] + 1)), params))
        step += 1
        if not scheduler.has_unfinished():
            continue
        running_prefills = [(request.request_id, request.num_tokens - request.num_computed_tokens)
                            for request in scheduler.running if request.request_id not in decoding]
        waiting = [(request.request_id, request.num_tokens) for request in scheduler.waiting]
        expected = checks.reference_build_batch(decoding, running_prefills + waiting, token_budget, chunked)
        output = scheduler.schedule()
        assert [(chunk.request.request_id, chunk.num_tokens) for chunk in output.chunks] == expected
        sampled = [7] * sum(chunk.samples for chunk in output.chunks)
        finished = {request.request_id for request in scheduler.update(output, sampled)}
        decoding = [chunk.request.request_id for chunk in output.chunks
                    if chunk.samples and chunk.request.request_id not in finished]


# ---------------------------------------------------------------------------------------------
# The student's build_batch planning the real engine (the tiny model keeps these fast)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {}, {"token_budget": 16, "long_prompt_len": 70, "seed": 1}, {"token_budget": 90, "chunked": False, "seed": 3},
])
def test_reference_answer_plans_the_engine_like_the_scheduler(build_batch, kwargs):
    checks.check_build_batch_in_engine(build_batch, model="tiny", **kwargs)


def test_prefills_before_decodes_stop_the_engine_with_the_reason():
    student = _demo_answer("buggy-prefill-before-decode", "build_batch")
    with pytest.raises(CheckFailed, match="must start with every decode"):
        checks.check_build_batch_in_engine(student, model="tiny")


def test_the_overtaking_demo_student_fails_the_visible_worked_example():
    student = _demo_answer("buggy-batch-overtakes", "build_batch")
    checks.check_build_batch(student, ["a", "b", "c"], [("P", 10), ("Q", 20), ("R", 2)], 16, chunked=True)
    with pytest.raises(CheckFailed, match="prompt 'R' overtook 'Q'"):
        checks.check_build_batch(student, ["a", "b", "c"], [("P", 10), ("Q", 20), ("R", 2)], 16, chunked=False)


def test_hard_coded_visible_answers_fail_in_the_engine():
    student = _demo_answer("buggy-hardcoded-visible-batch", "build_batch")
    checks.check_build_batch(student, ["a", "b", "c"], [("P", 10), ("Q", 20), ("R", 2)], 16, chunked=True)   # the table
    with pytest.raises(CheckFailed):
        checks.check_build_batch_in_engine(student, model="tiny")


def test_a_plan_that_changes_steps_but_not_validity_is_caught_step_by_step(build_batch):
    def half_the_budget(decode_ids, prefill_queue, token_budget, chunked=True):
        return build_batch(decode_ids, prefill_queue, max(len(decode_ids), token_budget // 2) or 1, chunked)

    with pytest.raises(CheckFailed, match="step \\d+ of the engine ran a different batch"):
        checks.check_build_batch_in_engine(half_the_budget, model="tiny")


def test_the_engine_runs_the_student_function_on_plain_data(build_batch):
    seen = []

    def spy(decode_ids, prefill_queue, token_budget, chunked=True):
        seen.append((decode_ids, prefill_queue, token_budget, chunked))
        return build_batch(decode_ids, prefill_queue, token_budget, chunked)

    checks.check_build_batch_in_engine(spy, model="tiny")
    assert seen
    for decode_ids, prefill_queue, token_budget, chunked in seen:
        assert all(isinstance(request_id, str) for request_id in decode_ids)
        assert all(isinstance(request_id, str) and isinstance(left, int) for request_id, left in prefill_queue)
        assert isinstance(token_budget, int) and chunked is True


@pytest.mark.slow
def test_reference_answer_plans_smollm2(build_batch):
    checks.check_build_batch_in_engine(build_batch)
