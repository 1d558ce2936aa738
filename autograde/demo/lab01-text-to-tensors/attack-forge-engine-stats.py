"""Demo student: a scheduler that never preempts, and an engine patched to say it did (05_pipeline)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Its scheduler runs one request at a time (admits only when nothing runs), so it never preempts, and "
    "its answer cell patches the kernel's own course_lib.engine so that every engine step counts one "
    "preemption. test_engine serves through an LLMEngine built in the student's kernel, so no grade rests "
    "on the engine's statistics any more (found in the white-box round of issue 23: the forged count used "
    "to pass require_preemption): the forgery gains nothing. A one-at-a-time scheduler serves the right "
    "tokens, so it keeps test_engine honestly (3 points) and loses test_scheduler_admission and "
    "test_scheduler_preemption, where the grader holds the allocator: 12/19. 04_paging is handed in with "
    "the reference answers: the engine test uses its BlockAllocator: full marks there; expected 12/19"
)
BASE = "solution"
_ONE_AT_A_TIME = _solution("05_pipeline", "scheduler").replace(
    "len(self.running) < self.config.max_num_seqs", "not self.running")
assert _ONE_AT_A_TIME != _solution("05_pipeline", "scheduler")
FORGE = '''


import course_lib.engine as _engine

_honest_count = _engine.LLMEngine._count


def _count_a_preemption_too(self, plan, num_new_tokens):
    _honest_count(self, plan, num_new_tokens)
    self.stats.num_preemptions += 1


_engine.LLMEngine._count = _count_a_preemption_too
'''
ANSWERS = {"scheduler": _ONE_AT_A_TIME + FORGE}
# 04_paging is handed in (the reference answers) because 05_pipeline's engine test uses its BlockAllocator.
EXPECTED = {"04_paging": 11, "05_pipeline": 12}
