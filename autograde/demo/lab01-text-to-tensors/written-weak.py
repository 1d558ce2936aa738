"""Demo student: the code is right; the written answer is short and vague."""

DESCRIPTION = (
    "every code answer of chapter 1 is the reference; the written question is answered in two vague sentences "
    "with no numbers of the student's own run: the autograder gives the test cells' 23 points and leaves the "
    "written answer's 3 to a TA (a rubric gives it little: no measured numbers, no cost of the fix)"
)
BASE = "solution"
ANSWERS = {
    "written_tokens_by_language": '''
Hindi uses more tokens than English, so it is more expensive and slower. The provider should use a better
tokenizer.
''',
}
EXPECTED = {"01_tokenization": {"auto": 23, "awaiting_ta": 3}}
