"""TA grading of written answers: ``course mark OUT --lab LAB`` (docs/ta-grading.md).

One page per question: every student's answer to it, the rubric beside it, keys to tick criteria,
write a comment and move on. ``answers`` reads the answers from the graded notebooks, ``store`` keeps
the marks (``MarkStore``) and who is grading what (``ClaimBoard``), ``service`` checks marks against
the rubric and hides student ids when grading is anonymous, ``server`` serves the page and its API,
``session`` puts them together for an output folder of ``course grade``.
"""
