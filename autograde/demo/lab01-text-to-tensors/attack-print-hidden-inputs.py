"""Demo student: correct answers that print every argument they get (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, but count_parameters and inference_memory print their arguments, hoping to "
    "publish the hidden tests' inputs in the feedback (the configs, precisions, batch sizes the hidden "
    "checks use). What the student's code prints while a hidden check runs is withheld: the feedback "
    "keeps the visible tests' output and one line saying output during hidden checks is not shown; "
    "expected 12/12"
)
BASE = "solution"
PRINT = '''

_honest_{name} = {name}


def {name}(*args, **kwargs):
    print("ARGS-{name}", args, kwargs)
    return _honest_{name}(*args, **kwargs)
'''
ANSWERS = {name: _solution("02_training_vs_inference", name) + PRINT.format(name=name)
           for name in ("count_parameters", "inference_memory")}
EXPECTED = {"02_training_vs_inference": 12}
