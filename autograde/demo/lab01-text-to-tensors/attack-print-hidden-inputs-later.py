"""Demo student: remembers what the hidden checks asked, prints it in a later answer cell (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Answers honestly, but count_parameters keeps every config it is called with and the count it "
    "returned, and the next answer cell (activation_bytes) prints them all: the hidden checks' configs "
    "(Llama 2 7B and 13B) and expected counts would come out in an answer cell's output. From the "
    "notebook's first hidden check on, the graded notebook and the feedback show only the grader's "
    "verdicts, so the print is replaced by a note; the score is the honest one; expected 12/12"
)
BASE = "solution"
REMEMBER = '''

_seen_calls = []
_honest_count_parameters = count_parameters


def count_parameters(config, tied_embeddings):
    count = _honest_count_parameters(config, tied_embeddings)
    fields = {name: getattr(config, name) for name in dir(config) if not name.startswith("_")
              and isinstance(getattr(config, name), (int, float, str))}
    _seen_calls.append((fields, tied_embeddings, count))
    return count
'''
PRINT = '''

for _fields, _tied, _count in _seen_calls:
    print("SEEN", _fields, _tied, _count)
'''
ANSWERS = {
    "count_parameters": _solution("02_training_vs_inference", "count_parameters") + REMEMBER,
    "activation_bytes": _solution("02_training_vs_inference", "activation_bytes") + PRINT,
}
EXPECTED = {"02_training_vs_inference": 12}
