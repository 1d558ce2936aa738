"""Demo student: correct answers, then a memory hog spread over processes (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, then its last answer cell forks eight processes that each take 700 MB, 5.6 GB "
    "together, past the kernel's 4 GB memory limit (each one stays under the per-process data limit). "
    "The grader's watchdog stops the kernel's whole process tree and says why: test_inference_memory, "
    "which comes after, is not run (\"memory limit of 4 GB reached\"); the machine and the students "
    "graded beside it are untouched; expected 9/12"
)
BASE = "solution"
HOG = '''

import os
import time

for _ in range(8):
    if os.fork() == 0:
        block = bytearray(700 << 20)   # touched: 700 MB resident
        time.sleep(600)
        os._exit(0)
time.sleep(600)
'''
ANSWERS = {"inference_memory": _solution("02_training_vs_inference", "inference_memory") + HOG}
EXPECTED = {"02_training_vs_inference": 9}
