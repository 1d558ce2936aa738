"""Demo student: no-ops the checks from an answer cell, answers nothing (01_tokenization)."""

DESCRIPTION = (
    "Replaces every check_* function of course_lib.checks.tokenization, expect_equal and "
    "AssertionError with harmless stand-ins in its first answer cell and writes no answer. The "
    "test cells run in the grader's process, not in the student's kernel, so the patches change "
    "nothing there: 0 points; expected 0/23"
)
BASE = "release"
ANSWERS = {
    "get_pair_counts": '''
import builtins

import course_lib.checks as checks
import course_lib.checks.tokenization as tokenization_checks

for name in dir(tokenization_checks):
    if name.startswith("check_"):
        setattr(tokenization_checks, name, lambda *args, **kwargs: None)
checks.expect_equal = lambda *args, **kwargs: None
builtins.AssertionError = type("Harmless", (Exception,), {})


def get_pair_counts(ids):
    return {}
''',
}
EXPECTED = {"01_tokenization": 0}
