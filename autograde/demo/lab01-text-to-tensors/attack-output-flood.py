"""Demo student: correct answers that flood the notebook with output (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, and its count_parameters cell prints one 150 MB line, writes 20 MB straight to "
    "file descriptor 1, displays a 60 MB image and raises an exception whose message is 30 MB. The "
    "kernel and the grader keep each cell's output within its limits (the head and tail of printed "
    "text, a note for the image that did not fit, the exception message clipped), so the graded "
    "notebook, the feedback page, the result file and report.json stay small; every test runs; "
    "expected 12/12"
)
BASE = "solution"
FLOOD = '''

import os

from IPython.display import display

print("flood:" + "x" * (150 << 20))
os.write(1, b"fd" * (10 << 20))
display({"image/png": "A" * (60 << 20), "text/plain": "<a 60 MB image>"}, raw=True)
raise ValueError("m" * (30 << 20))
'''
ANSWERS = {"count_parameters": _solution("02_training_vs_inference", "count_parameters") + FLOOD}
EXPECTED = {"02_training_vs_inference": 12}
