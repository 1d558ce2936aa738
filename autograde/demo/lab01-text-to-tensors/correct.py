"""Demo student: every answer is the reference solution."""

DESCRIPTION = "every answer is the reference solution: full marks, expected 23/23"
BASE = "solution"
ANSWERS = {}
EXPECTED = {"01_tokenization": 23}
