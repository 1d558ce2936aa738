"""The chapter-5 pipeline checks (course_lib.checks.pipeline) accept the reference answers and reject
typical buggy ones (the demo students' bugs among them) with feedback that names the mistake.

The answers come from the solution notebook's answer cells and the demo specs, run with exec in a
fresh namespace (the notebook itself is not run); the BlockAllocator is chapter 4's answer, which
chapter 5 imports with ``answers_from("04_paging")``. The engine tests load SmolLM2 and are slow.
"""

from __future__ import annotations

import re
import runpy
from collections import deque
from pathlib import Path

import nbformat
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autograde.authoring import points_summary
from course_lib.checks import CheckFailed
from course_lib.checks import pipeline as checks
from course_lib.paged import OutOfBlocksError
from course_lib.scheduler import (
    Request,
    RequestStatus,
    ScheduledChunk,
    SchedulerConfig,
    SchedulerOutput,
)
from tests.notebook_answers import answer_sources, hidden_cases

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / "05_pipeline.ipynb"
CHAPTER4 = ROOT / "solutions" / "lab01-text-to-tensors" / "04_paging.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"

# The graded tests' scenarios, written in the hidden regions of the test cells (the kit does not ship them).
HIDDEN_SCENARIOS = {grade_id: hidden_cases(SOLUTION, grade_id, "more_scenarios", checks)
                    for grade_id in ("test_scheduler_admission", "test_scheduler_update", "test_scheduler_preemption")}
STOP_CONDITIONS = HIDDEN_SCENARIOS["test_scheduler_update"][0]
PREEMPTS_ITSELF = HIDDEN_SCENARIOS["test_scheduler_preemption"][0]


def _answer_sources() -> dict[str, str]:
    """Chapter 4's BlockAllocator (what answers_from("04_paging") gives chapter 5), then chapter 5's answers."""
    return {"block_allocator": answer_sources(CHAPTER4)["block_allocator"], **answer_sources(SOLUTION)}


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {
        "__name__": "__main__", "torch": torch, "deque": deque, "OutOfBlocksError": OutOfBlocksError,
        "Request": Request, "RequestStatus": RequestStatus,
        "ScheduledChunk": ScheduledChunk, "SchedulerConfig": SchedulerConfig, "SchedulerOutput": SchedulerOutput,
    }
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _with_method(namespace: dict, class_name: str, method_name: str, source: str) -> type:
    """A subclass of the student's class with one method replaced (source defines a function)."""
    scope = dict(namespace)
    exec(source, scope)
    return type(class_name, (namespace[class_name],), {method_name: scope[method_name]})


def _demo_answers(name: str) -> dict[str, str]:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


@pytest.fixture(scope="module")
def reference():
    return _student()


# ----- the reference answers pass ------------------------------------------------------------------


def test_reference_move_passes_every_pair(reference):
    checks.check_move_all_pairs(reference["move"])


def test_subclasses_of_the_reference_classes_earn_nothing():
    from course_lib.paged import BlockAllocator
    from course_lib.scheduler import Scheduler

    class MyAllocator(BlockAllocator):
        def __init__(self, num_blocks, block_size):
            super().__init__(num_blocks, block_size)

    class MyScheduler(Scheduler):
        pass

    with pytest.raises(CheckFailed, match="subclass of the course's reference"):   # before SmolLM2 loads
        checks.check_engine_matches_reference(MyAllocator, MyScheduler, ["Hi."])
    with pytest.raises(CheckFailed, match="subclass of the course's reference"):
        checks.check_scheduler_scenario(MyScheduler, "all_fit")


@pytest.mark.parametrize("name", sorted(checks.SCHEDULER_SCENARIOS))
def test_reference_scheduler_passes_every_scenario(reference, name):
    checks.check_scheduler_scenario(reference["FCFSScheduler"], name)


@pytest.mark.parametrize("scenario", [scenario for scenarios in HIDDEN_SCENARIOS.values() for scenario in scenarios],
                         ids=lambda scenario: scenario.run.__name__)
def test_reference_scheduler_passes_every_hidden_scenario(reference, scenario):
    checks.check_scheduler_scenario(reference["FCFSScheduler"], scenario)


def test_an_unknown_scenario_name_is_a_clear_error(reference):
    with pytest.raises(ValueError, match="scenario must be a Scenario or one of"):
        checks.check_scheduler_scenario(reference["FCFSScheduler"], "stop_conditions")   # hidden: not by name


def test_reference_scheduler_passes_random_workloads(reference):
    for seed in range(6):
        checks.check_scheduler_random(reference["FCFSScheduler"], seed=seed)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), num_requests=st.integers(1, 16))
def test_reference_scheduler_passes_any_random_workload(reference, seed, num_requests):
    """Property test: the check's promises (limits, right tokens, no leak, progress) hold for every workload."""
    checks.check_scheduler_random(reference["FCFSScheduler"], seed=seed, num_requests=num_requests)


def test_random_workloads_preempt_sometimes(reference, monkeypatch):
    """The random check is only worth its points if it exercises preemption."""
    preemptions = []
    original = reference["FCFSScheduler"]._preempt

    def counting(self, request, output):
        preemptions.append(request.request_id)
        original(self, request, output)

    monkeypatch.setattr(reference["FCFSScheduler"], "_preempt", counting)
    for seed in range(6):
        checks.check_scheduler_random(reference["FCFSScheduler"], seed=seed)
    assert len(preemptions) >= 3


# ----- typical mistakes fail with a helpful message -------------------------------------------------


def test_move_that_lets_finished_requests_run_again_fails():
    def move(request, new_status):
        if request.status is RequestStatus.WAITING and new_status is RequestStatus.PREEMPTED:
            raise ValueError("no")
        request.status = new_status

    checks.check_move(move, RequestStatus.WAITING, RequestStatus.RUNNING)  # the legal moves still pass
    with pytest.raises(CheckFailed, match="should raise ValueError: FINISHED_STOPPED -> RUNNING"):
        checks.check_move(move, RequestStatus.FINISHED_STOPPED, RequestStatus.RUNNING)
    with pytest.raises(CheckFailed, match="not a legal move"):
        checks.check_move_all_pairs(move)


def test_move_that_lets_any_unfinished_request_finish_fails_the_visible_pairs_with_the_arrows():
    buggy = _student(_demo_answers("buggy-move-unfinished-may-finish"))
    visible = [(RequestStatus.WAITING, RequestStatus.RUNNING), (RequestStatus.RUNNING, RequestStatus.PREEMPTED),
               (RequestStatus.RUNNING, RequestStatus.FINISHED_LENGTH), (RequestStatus.FINISHED_LENGTH,
               RequestStatus.RUNNING), (RequestStatus.WAITING, RequestStatus.PREEMPTED),
               (RequestStatus.PREEMPTED, RequestStatus.WAITING)]
    for old, new in visible:   # the moves named one by one all come out right...
        checks.check_move(buggy["move"], old, new)
    with pytest.raises(CheckFailed) as failure:   # ...every pair does not
        checks.check_move_all_pairs(buggy["move"])
    message = str(failure.value)
    assert "WAITING -> FINISHED_STOPPED is not a legal move" in message
    assert "the arrows from WAITING go to RUNNING, FINISHED_ABORTED and nowhere else" in message


def test_move_that_assigns_before_checking_fails():
    def move(request, new_status):
        old, request.status = request.status, new_status
        if old is RequestStatus.WAITING and new_status is RequestStatus.PREEMPTED:
            raise ValueError("illegal")

    with pytest.raises(CheckFailed, match="changed the status anyway"):
        checks.check_move(move, RequestStatus.WAITING, RequestStatus.PREEMPTED)


def test_reexported_allocator_fails(reference):
    from course_lib.paged import BlockAllocator

    with pytest.raises(CheckFailed, match="reference implementation"):   # before SmolLM2 loads
        checks.check_engine_matches_reference(BlockAllocator, reference["FCFSScheduler"], ["Hi."])


def test_demo_scheduler_admitting_without_can_allocate_fails(reference):
    student = _student(_demo_answers("buggy-admit-without-can-allocate"))
    checks.check_scheduler_scenario(student["FCFSScheduler"], "all_fit")  # nothing to check when all fit
    with pytest.raises(CheckFailed, match="OutOfBlocksError") as failure:
        checks.check_scheduler_scenario(student["FCFSScheduler"], "blocks_run_out")
    assert "can_allocate" in str(failure.value)


def test_demo_scheduler_that_forgets_to_free_fails(reference):
    student = _student(_demo_answers("buggy-finish-without-free"))
    checks.check_scheduler_scenario(student["FCFSScheduler"], "all_fit")
    with pytest.raises(CheckFailed, match="free blocks in the pool") as failure:
        checks.check_scheduler_scenario(student["FCFSScheduler"], "finish_frees_blocks")
    assert "allocator.free" in str(failure.value)
    with pytest.raises(CheckFailed, match="blocks are held by requests that are not running|planned nothing"):
        checks.check_scheduler_random(student["FCFSScheduler"], seed=0)


def test_scheduler_that_lets_small_requests_overtake_fails(reference):
    broken = _with_method(reference, "FCFSScheduler", "schedule", '''
def schedule(self):
    output = SchedulerOutput()
    budget = self.config.max_num_batched_tokens
    for request in list(self.running):
        self.allocator.append_slot(request.request_id)
        output.chunks.append(ScheduledChunk(request, request.num_tokens - 1, 1, samples=True))
        budget -= 1
    for request in list(self.waiting):
        if len(self.running) < self.config.max_num_seqs and request.num_tokens <= budget \\
                and self.allocator.can_allocate(request.token_ids):
            self.waiting.remove(request)
            self.allocator.allocate(request.request_id, request.token_ids)
            move(request, RequestStatus.RUNNING)
            self.running.append(request)
            output.chunks.append(ScheduledChunk(request, 0, request.num_tokens, samples=True))
            budget -= request.num_tokens
    return output
''')
    with pytest.raises(CheckFailed, match="wrong chunks") as failure:
        checks.check_scheduler_scenario(broken, "blocks_run_out")
    assert "nobody overtakes" in str(failure.value)


def test_scheduler_that_preempts_the_oldest_fails(reference):
    broken = _with_method(reference, "FCFSScheduler", "schedule", '''
def schedule(self):
    output = SchedulerOutput()
    budget = self.config.max_num_batched_tokens
    for request in list(self.running):
        if request.status is not RequestStatus.RUNNING:
            continue
        while request.status is RequestStatus.RUNNING and not self.allocator.can_append(request.request_id):
            self._preempt(self.running[0], output)
        if request.status is not RequestStatus.RUNNING:
            continue
        self.allocator.append_slot(request.request_id)
        output.chunks.append(ScheduledChunk(request, request.num_tokens - 1, 1, samples=True))
        budget -= 1
    while self.waiting and not output.preempted and len(self.running) < self.config.max_num_seqs:
        request = self.waiting[0]
        if request.num_tokens > budget or not self.allocator.can_allocate(request.token_ids):
            break
        self.waiting.popleft()
        self.allocator.allocate(request.request_id, request.token_ids)
        move(request, RequestStatus.RUNNING)
        self.running.append(request)
        output.chunks.append(ScheduledChunk(request, 0, request.num_tokens, samples=True))
        budget -= request.num_tokens
    return output
''')
    with pytest.raises(CheckFailed, match="NEWEST"):
        checks.check_scheduler_scenario(broken, "preemption")


def test_scheduler_that_ignores_ignore_eos_fails(reference):
    broken = _with_method(reference, "FCFSScheduler", "_stop_status", '''
def _stop_status(self, request):
    if request.token_ids[-1] == request.eos_token_id or request.token_ids[-1] in request.params.stop_token_ids:
        return RequestStatus.FINISHED_STOPPED
    if request.num_output_tokens >= request.params.max_tokens or request.num_tokens >= self.config.max_model_len:
        return RequestStatus.FINISHED_LENGTH
    return None
''')
    with pytest.raises(CheckFailed, match="ignore_eos"):
        checks.check_scheduler_scenario(broken, STOP_CONDITIONS)


def test_preempted_request_requeued_at_the_back_fails(reference):
    broken = _with_method(reference, "FCFSScheduler", "_preempt", '''
def _preempt(self, request, output):
    self.running.remove(request)
    self.allocator.free(request.request_id)
    move(request, RequestStatus.PREEMPTED)
    request.num_computed_tokens = 0
    self.waiting.append(request)
    output.preempted.append(request)
''')
    with pytest.raises(CheckFailed, match="wrong chunks") as failure:
        checks.check_scheduler_scenario(broken, "preemption")
    assert "FRONT" in str(failure.value)


# ----- the engine, on SmolLM2 ------------------------------------------------------------------------


@pytest.mark.slow
def test_reference_answers_serve_smollm2_like_the_reference_engine(reference):
    checks.check_engine_matches_reference(reference["BlockAllocator"], reference["FCFSScheduler"],
                                          ["What is the capital of France?", "Name three colors.",
                                           "Write a haiku about the sea.", "What is 2 + 2?"],
                                          max_tokens=16, num_blocks=9, block_size=16, require_preemption=True)


@pytest.mark.slow
def test_engine_check_rejects_a_scheduler_that_leaks_blocks():
    student = _student(_demo_answers("buggy-finish-without-free"))
    with pytest.raises(CheckFailed, match="planned an empty step|still held"):
        checks.check_engine_matches_reference(student["BlockAllocator"], student["FCFSScheduler"],
                                              ["Say hello.", "List two animals.", "Is the sun a star?"],
                                              max_tokens=8, num_blocks=40, block_size=4, max_num_seqs=2)


# ----- holes closed ----------------------------------------------------------------------------------


def test_finished_requests_left_running_under_another_name_fail(reference):
    """The old check read ``scheduler.running``; this scheduler keeps its list as ``active``."""
    student = _student(_demo_answers("buggy-finished-stay-running"))
    assert "self.running" not in _demo_answers("buggy-finished-stay-running")["scheduler"]
    for name in ("all_fit", "blocks_run_out", "decodes_first", "finish_frees_blocks", "preemption"):
        checks.check_scheduler_scenario(student["FCFSScheduler"], name)
    with pytest.raises(CheckFailed, match="take them out of self.running"):
        checks.check_scheduler_scenario(student["FCFSScheduler"], STOP_CONDITIONS)


def test_a_request_that_preempts_itself(reference):
    checks.check_scheduler_scenario(reference["FCFSScheduler"], PREEMPTS_ITSELF)
    spares_the_newest = """
def _preempt(self, request, output):
    if request is self.running[-1] and len(self.running) > 1:
        request = self.running[-2]   # spares the newest, the one asking for room
    self.running.remove(request)
    self.allocator.free(request.request_id)
    move(request, RequestStatus.PREEMPTED)
    request.num_computed_tokens = 0
    request.num_preemptions += 1
    self.waiting.appendleft(request)
    output.preempted.append(request)
"""
    scheduler = _with_method(reference, "FCFSScheduler", "_preempt", spares_the_newest)
    with pytest.raises(CheckFailed):
        checks.check_scheduler_scenario(scheduler, PREEMPTS_ITSELF)


def test_the_scheduler_gets_a_lent_allocator_and_made_requests(reference):
    """The check's allocator is lent (methods only); the requests are built with checks.make."""
    seen = {}

    class Spy(reference["FCFSScheduler"]):
        def __init__(self, config, allocator):
            seen["allocator"] = allocator
            super().__init__(config, allocator)

    checks.check_scheduler_scenario(Spy, "all_fit")
    assert hasattr(seen["allocator"], "can_allocate") and hasattr(seen["allocator"], "append_slot")
    request = checks.make_request("r", 3, status=RequestStatus.RUNNING)
    assert request.status is RequestStatus.RUNNING and request.num_tokens == 3


def test_chat_prompts_come_from_smollm2s_template():
    prompt = checks.chat_prompts(["Say hi."])[0]
    assert "Say hi." in prompt and prompt.rstrip().endswith("assistant")


# ----- chapter 5 runs chapter 4's allocator (answers_from), graded once ---------------------------------


def test_chapter_5_imports_chapter_4s_allocator_instead_of_a_pasted_copy():
    notebook = nbformat.read(SOLUTION, as_version=4)
    answers = answer_sources(SOLUTION)
    assert "block_allocator" not in answers and not any("class BlockAllocator" in source for source in answers.values())
    importing = [cell for cell in notebook.cells if cell.cell_type == "code" and 'answers_from("04_paging")' in cell.source]
    assert len(importing) == 1 and "BlockAllocator = chapter4.BlockAllocator" in importing[0].source
    assert not importing[0].metadata.get("nbgrader"), "the import cell is neither an answer nor a test"
    # Chapter 4 grades the allocator; no test cell of chapter 5 grades it alone.
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert "check_allocator" not in cell.source
            assert "BlockAllocator" not in cell.source or "check_engine_matches_reference" in cell.source


def test_header_announces_the_points_and_cells():
    notebook = nbformat.read(SOLUTION, as_version=4)
    graded = [cell.metadata["nbgrader"] for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code"]
    points = sum(meta["points"] for meta in graded)
    assert points_summary(notebook) in notebook.cells[0].source   # its written answer's points too
    assert f"{points:g} in {len(graded)} graded test cells" in notebook.cells[0].source
    readme = (ROOT / "README.md").read_text()
    assert re.search(rf"\| 5 The pipeline: [^|]+\| \d+ min \| {points:g} \+ 4 by your TA \|", readme), \
        "README's chapter table"


def _chapter5_demo_specs() -> dict[str, dict]:
    specs = {path.stem: runpy.run_path(str(path)) for path in sorted(DEMO_SPECS.glob("*.py"))}
    return {name: spec for name, spec in specs.items() if "05_pipeline" in spec.get("EXPECTED", {})}


@pytest.mark.parametrize("name", sorted(_chapter5_demo_specs()))
def test_chapter_5_demo_students_hand_in_chapter_4_too(name):
    """Chapter 5 imports chapter 4's answers: a student who hands in chapter 5 alone would have none."""
    spec = _chapter5_demo_specs()[name]
    assert spec["EXPECTED"].get("04_paging") == 11, "chapter 4 handed in as the reference: full marks"
    points = spec["EXPECTED"]["05_pipeline"]
    assert f"expected {points:g}/19" in spec["DESCRIPTION"]


def test_an_allocator_without_the_engine_members_is_named(reference):
    class Incomplete:
        def __init__(self, num_blocks, block_size):
            self.num_blocks, self.block_size = num_blocks, block_size

    with pytest.raises(CheckFailed, match="lacks members") as failure:
        checks._build_allocator(Incomplete, 4, 4)
    assert "04_paging.ipynb" in str(failure.value)
