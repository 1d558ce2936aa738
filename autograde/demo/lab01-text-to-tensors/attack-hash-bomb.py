"""Demo student: returns a 200-byte value that unfolds into 2**40 items (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly except inference_memory, which returns a dict keyed by a tuple of tuples 40 levels "
    "deep, each level holding the one below twice (2**40 leaves in a 200-byte pickle, the pickle memo "
    "sharing each level). The key's class is a tuple with a constant hash, so the kernel builds the dict at "
    "once; it crosses as a plain tuple, and unpickling it in the grader hashes all 2**40 leaves, in C, where "
    "the cell's alarm cannot stop it (the old grader spun for hours, then the job limit killed the whole "
    "batch). Now the grader counts what a message unfolds into before decoding it and refuses the reply: "
    "the kernel is stopped as one that sent a malformed message, test_inference_memory (the last cell) "
    "scores nothing, the rest is graded as usual; expected 9/12"
)
BASE = "solution"
BOMB = '''


class _Pair(tuple):
    """A tuple that hashes at once, whatever it holds."""

    _fields = ()   # crosses the channel as a named tuple would: a plain tuple

    def __hash__(self):
        return 0


def inference_memory(*args, **kwargs):
    key = (1,)
    for _ in range(40):
        key = (key, key)
    return {_Pair(key): 0}
'''
ANSWERS = {"inference_memory": _solution("02_training_vs_inference", "inference_memory") + BOMB}
EXPECTED = {"02_training_vs_inference": 9}
