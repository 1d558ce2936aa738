"""Demo student: the verifier of course_lib.speculative, wrapped (03_speculative_sampling)."""

DESCRIPTION = (
    "Hands in course_lib.speculative.verify_draft and acceptance_probabilities behind small "
    "wrappers instead of writing them. In the student edition both are stubs naming the exercise, "
    "so their cells fail; the rest of the notebook is the reference answer; expected 4/10"
)
BASE = "solution"
ANSWERS = {
    "acceptance_probabilities": '''
from course_lib import speculative


def acceptance_probabilities(draft_token_ids, draft_probs, target_probs):
    return speculative.acceptance_probabilities(draft_token_ids, draft_probs, target_probs)
''',
    "verify": '''
import functools

import course_lib.speculative

verify_draft = functools.partial(course_lib.speculative.verify_draft)
''',
}
EXPECTED = {"03_speculative_sampling": 4}
