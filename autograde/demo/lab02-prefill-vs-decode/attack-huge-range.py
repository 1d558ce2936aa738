"""Demo student: a 55-byte answer that took 1.5 GB of the old grader's memory (04_batching)."""

DESCRIPTION = (
    "static_batching returns range(40_000_000): three ints on the channel, but the check reads the policy's "
    "answer with list(), which in the old grader took 1.5 GB of its memory in one C call no alarm interrupts "
    "(a grading process with no memory limit). Every value from the kernel is now bounded on receipt: the "
    "range is refused with a sentence naming the limit (a million items in one range or container), the "
    "check fails, and nothing is built. test_static_batching is lost; expected 11/13"
)
BASE = "solution"
ANSWERS = {
    "static_batching": '''
def static_batching(state):
    """Admits 'everything': forty million request ids, lazily."""
    return range(40_000_000)
''',
}
EXPECTED = {"04_batching": 11}
