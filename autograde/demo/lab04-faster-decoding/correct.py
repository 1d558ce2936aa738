"""Demo student: every answer is the reference solution."""

DESCRIPTION = "every answer is the reference solution, every notebook handed in: full marks"
BASE = "solution"
ANSWERS = {}
