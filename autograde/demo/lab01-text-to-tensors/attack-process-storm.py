"""Demo student: correct answers, then a fork bomb (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, then its last answer cell starts a fork bomb: every process forks for as long "
    "as it can. The kernel runs under a user id of its own with a limit of 512 processes, so the forks "
    "past it fail and the machine keeps its process table; the cell runs out its time limit, and the "
    "kernel, full of processes, is stopped (the process limit is named in the reason) and everything "
    "of its user id is killed. test_inference_memory, after it, is not run; expected 9/12"
)
BASE = "solution"
STORM = '''

import os
import time

while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
'''
ANSWERS = {"inference_memory": _solution("02_training_vs_inference", "inference_memory") + STORM}
EXPECTED = {"02_training_vs_inference": 9}
