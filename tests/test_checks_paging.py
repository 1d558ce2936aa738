"""The chapter-4 checks (course_lib.checks.paging) accept the solution's BlockAllocator, reject the
demo students' allocators and other typical mistakes with feedback that names the mistake, and
refuse the course's own allocator.

The student's class comes from the solution notebook's answer cell, defined with exec.
"""

from __future__ import annotations

import re
import runpy
from collections import deque
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.checks import CheckFailed, one_thread
from course_lib.checks import paging as checks
from course_lib.paged import AllocatorProtocol, BlockAllocator, OutOfBlocksError

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / "04_paging.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)


def _solution_source() -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "block_allocator"]
    return SOLUTION_MARKER.sub("", cell.source)


def _allocator_class(source: str | None = None) -> type:
    namespace = {"deque": deque, "OutOfBlocksError": OutOfBlocksError}
    exec(source or _solution_source(), namespace)
    return namespace["BlockAllocator"]


def _edited(old: str, new: str, *replacements: tuple[str, str]) -> type:
    source = _solution_source()
    for before, after in ((old, new), *replacements):
        assert before in source, before
        source = source.replace(before, after)
    return _allocator_class(source)


def _fails(call, phrase: str) -> str:
    with pytest.raises(CheckFailed) as info:
        call()
    assert phrase in str(info.value), str(info.value)
    return str(info.value)


_SOLUTION_CLASS = _allocator_class()

ALL_SCRIPTED = [
    checks.check_interface,
    lambda cls: checks.check_blocks_needed(cls, 16, [0, 1, 15, 16, 17, 50]),
    checks.check_allocate_and_free,
    checks.check_append_slot,
    lambda cls: checks.check_append_slot(cls, block_size=1),
    checks.check_slot,
    checks.check_fork_and_copy_on_write,
]


def test_solution_passes_every_scripted_check():
    cls = _allocator_class()
    for check in ALL_SCRIPTED:
        check(cls)


def test_solution_satisfies_the_engine_protocol():
    assert isinstance(_allocator_class()(4, 16), AllocatorProtocol)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), num_blocks=st.integers(1, 10), block_size=st.sampled_from([1, 2, 3, 4, 16]))
def test_solution_passes_random_operation_sequences(seed, num_blocks, block_size):
    checks.check_random_operations(_SOLUTION_CLASS, seed, num_operations=150, num_blocks=num_blocks,
                                   block_size=block_size)


def test_free_ignoring_ref_counts_demo_student_fails():
    cls = _allocator_class(runpy.run_path(str(DEMO_SPECS / "buggy-free-ignores-ref-counts.py"))["ANSWERS"]["block_allocator"])
    checks.check_allocate_and_free(cls)  # no sharing: looks right
    _fails(lambda: checks.check_fork_and_copy_on_write(cls), "the count reaches 0")
    with pytest.raises(CheckFailed):
        for seed in range(10):
            checks.check_random_operations(cls, seed)


def test_no_copy_on_write_demo_student_fails():
    cls = _allocator_class(runpy.run_path(str(DEMO_SPECS / "buggy-no-copy-on-write.py"))["ANSWERS"]["block_allocator"])
    checks.check_append_slot(cls)
    _fails(lambda: checks.check_fork_and_copy_on_write(cls), "copy-on-write")


def test_floor_division_in_blocks_needed_is_reported():
    cls = _edited("return -(-num_tokens // self.block_size)", "return num_tokens // self.block_size")
    _fails(lambda: checks.check_blocks_needed(cls, 16, [0, 1, 15, 16, 17, 50]), "round UP")


def test_allocating_without_checking_the_pool_is_reported():
    cls = _edited("        if not self.can_allocate(token_ids):\n", "        if False:\n")
    message = _fails(lambda: checks.check_allocate_and_free(cls), "raised IndexError")
    assert "OutOfBlocksError (the documented refusal)" in message
    assert "allocate('b', <16 tokens>)" in message  # the operation history points at the culprit


def test_a_refusal_after_taking_blocks_is_reported():
    cls = _edited("""        table = [self.free_blocks.popleft() for _ in range(self.blocks_needed(len(token_ids)))]""",
                  """        table = [self.free_blocks.popleft() for _ in range(min(self.blocks_needed(len(token_ids)),
                                                                len(self.free_blocks)))]
        if len(table) < self.blocks_needed(len(token_ids)):
            raise OutOfBlocksError("short")""",
                  ("        if not self.can_allocate(token_ids):\n", "        if False:\n"))
    _fails(lambda: checks.check_allocate_and_free(cls), "must change nothing")


def test_demo_student_refusing_with_index_error_is_reported():
    spec = runpy.run_path(str(DEMO_SPECS / "buggy-refuse-with-indexerror.py"))
    cls = _allocator_class(spec["ANSWERS"]["block_allocator"])
    checks.check_slot(cls)
    _fails(lambda: checks.check_append_slot(cls), "the documented refusal")


def test_append_that_always_takes_a_block_is_reported():
    cls = _edited("if self.num_tokens[seq_id] % self.block_size == 0:  # the last block is full",
                  "if True:")
    _fails(lambda: checks.check_append_slot(cls), "num_free_blocks after append_slot")


def test_fork_that_copies_blocks_is_reported():
    cls = _edited("""        for block in parent_table:
            self.ref_counts[block] += 1
        self.tables[child_id] = list(parent_table)""", """        self.tables[child_id] = [self.free_blocks.popleft() for _ in parent_table]
        for block in self.tables[child_id]:
            self.ref_counts[block] = 1""")
    _fails(lambda: checks.check_fork_and_copy_on_write(cls), "fork takes no new blocks")


def test_slot_without_the_block_table_is_reported():
    cls = _edited("return table[position // self.block_size] * self.block_size + position % self.block_size",
                  "return position")
    _fails(lambda: checks.check_slot(cls), "slot = block_table[position // block_size]")


def test_allocate_must_return_zero():
    cls = _edited("        self.num_tokens[seq_id] = len(token_ids)\n        return 0",
                  "        self.num_tokens[seq_id] = len(token_ids)\n        return len(token_ids)")
    _fails(lambda: checks.check_allocate_and_free(cls), "must return 0")


def test_the_course_allocator_and_subclasses_earn_nothing():
    _fails(lambda: checks.check_interface(BlockAllocator), "reference implementation")

    class Sneaky(BlockAllocator):
        pass

    _fails(lambda: checks.check_interface(Sneaky), "inherits from the course's")


def test_unwritten_class_raises_not_implemented():
    source = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "raise NotImplementedError()",
                    _solution_source_with_markers(), flags=re.DOTALL)
    with pytest.raises(NotImplementedError):
        checks.check_interface(_allocator_class(source))


def _solution_source_with_markers() -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "block_allocator"]
    return cell.source


def test_solution_allocator_serves_through_the_engine_like_the_reference():
    """What chapter 5 does on SmolLM2, on a tiny random model: same greedy tokens, every block back."""
    import random

    from course_lib.engine import LLMEngine
    from course_lib.model import LlamaModel, random_weights
    from course_lib.sampling import SamplingParams
    from course_lib.scheduler import Scheduler, SchedulerConfig
    from tests.tiny_models import ByteTokenizer, tiny_config

    config = tiny_config(vocab_size=300, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)
    model = LlamaModel(config, random_weights(config, seed=0)).eval()
    rng = random.Random(0)
    prompts = [[rng.randrange(config.vocab_size) for _ in range(rng.randrange(1, 40))] for _ in range(6)]
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)

    def run(allocator):
        scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=256),
                              allocator)
        engine = LLMEngine(model, ByteTokenizer(), allocator=allocator, scheduler=scheduler)
        with one_thread():  # tiny matrices: threads only add hand-off costs
            return [o.token_ids for o in engine.generate(prompts, greedy, use_tqdm=False)]

    student = _SOLUTION_CLASS(num_blocks=16, block_size=4)  # room for 1-2 requests: forces preemptions
    assert run(student) == run(BlockAllocator(16, 4, enable_prefix_caching=False))
    assert student.num_free_blocks == 16


def test_copy_on_write_that_keeps_the_shared_block_is_reported_without_a_nonsense_pair():
    cls = _edited("""            shared = table[-1]
            table[-1] = self.free_blocks.popleft()
            self.ref_counts[table[-1]] = 1
            self.ref_counts[shared] -= 1
            copy = (shared, table[-1])""", """            shared = table[-1]
            new_block = self.free_blocks.popleft()
            self.ref_counts[new_block] = 1
            copy = (shared, new_block)""")
    message = _fails(lambda: checks.check_fork_and_copy_on_write(cls), "still ends with block 1, the shared one")
    # What is expected comes from the reference (its copy pair), never from the student's unchanged table.
    assert "expected: \"(1, 2) in the reference's block ids" in message, message
    assert not re.search(r"expected: .*\((\d+), \1\)", message), message


def test_copy_on_write_that_keeps_a_reference_to_the_shared_block_is_told_about_the_leaked_count():
    # The child gets its private copy, but the shared block keeps the child's reference: the parent's
    # last block still looks shared, and its next append copies it although nobody else holds it.
    cls = _edited("""            self.ref_counts[shared] -= 1
""", "")
    message = _fails(lambda: checks.check_fork_and_copy_on_write(cls), "in the reference this sequence's last block")
    assert "append_slot('parent') returned a copy" in message
    assert "expected: None" in message
    assert "a reference count was never decreased" in message and "ref count - 1" in message
