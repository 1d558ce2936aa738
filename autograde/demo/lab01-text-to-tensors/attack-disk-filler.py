"""Demo student: correct answers, and a cell that fills every disk it can write (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, and its last answer cell writes 64 MB files into its working folder, /tmp and "
    "/dev/shm until the writes fail, then tries one 2 GB file. The kernel's working folder and /tmp are "
    "one tmpfs of the 1 GB disk limit inside the sandbox (the grader's disk never sees a byte), and a "
    "file stops at the 1 GB file-size limit: the writes fail in the student's own code, which goes on, "
    "so every test still runs; expected 12/12"
)
BASE = "solution"
FILL = '''

import os

written = 0
for folder in (".", "/tmp", "/dev/shm"):
    for index in range(64):
        try:
            with open(os.path.join(folder, f"fill-{index}"), "wb") as file:
                file.write(b"x" * (64 << 20))
            written += 64
        except OSError as error:
            print(f"{folder}: stopped after {written} MB ({error.strerror})")
            break
try:
    with open("/tmp/one-big-file", "wb") as file:
        for _ in range(32):
            file.write(b"y" * (64 << 20))
except OSError as error:
    print("one big file:", error.strerror)
'''
ANSWERS = {"inference_memory": _solution("02_training_vs_inference", "inference_memory") + FILL}
EXPECTED = {"02_training_vs_inference": 12}
