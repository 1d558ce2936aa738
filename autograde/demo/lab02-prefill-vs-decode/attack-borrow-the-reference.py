"""Demo student: percentile from the checks' own reference_percentile alias (04_batching)."""

DESCRIPTION = (
    "Hands in course_lib.checks.batching.reference_percentile (an alias the checks keep for "
    "themselves, invisible to the old name-based guard) as its percentile. In the student edition "
    "the reference behind it is a stub, so test_percentile fails; everything else is the reference "
    "answer; expected 7/13"
)
BASE = "solution"
ANSWERS = {
    "percentile": '''
from course_lib.checks import batching as batching_checks

percentile = batching_checks.reference_percentile
''',
}
EXPECTED = {"04_batching": 7}
