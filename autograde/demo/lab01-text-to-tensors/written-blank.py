"""Demo student: the code is right; the written answer's cell was emptied and left empty."""

DESCRIPTION = (
    "every code answer of chapter 1 is the reference; the student deleted the 'YOUR ANSWER HERE' of the "
    "written question and wrote nothing (nbgrader sees the cell changed): the grader scores it 0 as not "
    "attempted, with no TA work: expected 23 of the test cells' 23 and nothing awaiting a TA"
)
BASE = "solution"
ANSWERS = {"written_tokens_by_language": "\n"}
EXPECTED = {"01_tokenization": {"auto": 23, "awaiting_ta": 0}}
