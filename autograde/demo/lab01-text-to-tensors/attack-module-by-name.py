"""Demo student: hands the grader a module named after one whose import runs a program (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, except count_parameters, which it replaces by a module object named "
    "course_lib.server.__main__ (importing that module starts the course's server). The old channel sent "
    "a module by name and the grader imported it, running the server in the grader. Now a module "
    "crosses as a handle like any other object and the grader imports nothing the kernel names: the "
    "count_parameters tests fail (a module is not a function) and nothing else happens; expected 9/12"
)
BASE = "solution"
ANSWERS = {"count_parameters": '''
import types

count_parameters = types.ModuleType("course_lib.server.__main__")
'''}
EXPECTED = {"02_training_vs_inference": 9}
