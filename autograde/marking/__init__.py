"""TA grading of written answers: ``course mark OUT --lab LAB`` (docs/ta-grading.md).

One page per question: every student's answer to it, the rubric beside it, keys to tick criteria,
write a comment and move on. ``answers`` reads the answers from the graded notebooks, ``store`` says
what a mark is and keeps who is grading what (``ClaimBoard``), ``ledger_marks`` keeps the marks in the
course's ledger (``MarkStore``), ``service`` checks marks against the rubric and hides student ids
when grading is anonymous, ``server`` serves the page and its API, ``session`` puts them together for
an output folder of ``course grade``, ``shown`` says what a student reads of a mark once released.
"""
