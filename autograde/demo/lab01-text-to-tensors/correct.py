"""Demo student: every answer is the reference solution, every written answer the model answer."""

DESCRIPTION = ("every answer is the reference solution and every written answer the model answer, every notebook "
               "handed in: full marks of the test cells, and every written answer awaits a TA")
BASE = "solution"
WRITTEN = "model"
ANSWERS = {}
