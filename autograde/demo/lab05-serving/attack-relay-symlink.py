"""Demo student: points the folder of the grader's relay sockets somewhere else (02_load)."""

from autograde.demos import solution_cell

LAB = "lab05-serving"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, and its first answer cell makes .course-net in its working folder a link to /etc "
    "(and to /tmp, should that be taken). The old grader made the relay socket of checks.student_url in "
    "that folder of the kernel's, following the link, so a socket appeared wherever the student pointed. "
    "The relay sockets now live in a folder of the grader's, read-only to the kernel, and the kernel's "
    "working folder is its own tmpfs: nothing is created outside; expected 7/7"
)
BASE = "solution"
LINK = '''

import os

for name, target in ((".course-net", "/etc"), ("course-net", "/tmp")):
    try:
        os.symlink(target, name)
    except OSError as error:
        print("could not link", name, error)
'''
ANSWERS = {"poisson_arrival_times": _solution("02_load", "poisson_arrival_times") + LINK}
EXPECTED = {"02_load": 7}
