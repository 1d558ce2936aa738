"""Demo student: stops its own kernel, then hands in a cell larger than a pipe (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers tensor_shapes honestly and, in the same cell, patches the kernel's own channel so that "
    "the kernel stops itself (SIGSTOP) the moment a request larger than a megabyte starts to arrive; its "
    "count_parameters cell carries 1.3 MB of padding. The grader's write of that cell would block forever "
    "(the old grader stalled a worker for hours); now the write ends at the cell's deadline, the kernel is "
    "killed (its whole process group) and the notebook is graded as far as it got: test_tensor_shapes "
    "passed, the rest is not run; expected 2/12"
)
BASE = "solution"
STOP = '''

import os
import signal

from course_lib.runner import channel

_fill = channel.FrameReader._fill


def _stop_on_a_large_frame(reader, needed, deadline):
    if needed > (1 << 20):
        os.kill(os.getpid(), signal.SIGSTOP)
    return _fill(reader, needed, deadline)


channel.FrameReader._fill = _stop_on_a_large_frame
'''
PADDING = "\n# " + "p" * 100 + "\n"
ANSWERS = {
    "tensor_shapes": _solution("02_training_vs_inference", "tensor_shapes") + STOP,
    "count_parameters": _solution("02_training_vs_inference", "count_parameters") + PADDING * 13_000,
}
EXPECTED = {"02_training_vs_inference": 2}
