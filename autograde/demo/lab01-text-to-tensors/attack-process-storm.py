"""Demo student: correct answers, then a fork bomb (02_training_vs_inference)."""

import json
from pathlib import Path

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    path = Path(__file__).resolve().parents[3] / "solutions" / LAB / f"{notebook}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    source = next("".join(cell["source"]) for cell in cells
                  if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in source.splitlines() if "### BEGIN SOLUTION" not in line
                     and "### END SOLUTION" not in line)


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
