"""Demo student: answers right only where it can be checked at home, to read the hidden answers off its feedback (02_training_vs_inference)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "count_parameters is right for the one call the visible test makes (SmolLM2, tied embeddings) and "
    "off by one for every other config, so each hidden check fails on purpose. A hidden check's message "
    "names the call and the expected count ('count_parameters(ModelConfig(layers=32, hidden=4096, ...)) "
    "expected: 6738415616'): one graded hand-in would have listed the hidden configs with their answers, "
    "ready to hard-code next time. In a hidden region a failing check now says one fixed sentence. It "
    "loses test_count_parameters_smollm2 (1) and test_count_parameters_hidden (2); expected 9/12"
)
BASE = "solution"
FISH = '''

_honest_count_parameters = count_parameters


def count_parameters(config, tied_embeddings):
    count = _honest_count_parameters(config, tied_embeddings)
    visible = tied_embeddings and config.hidden_size == 576 and config.vocab_size == 49152   # SmolLM2, tied
    return count if visible else count + 1
'''
ANSWERS = {
    "count_parameters": _solution("02_training_vs_inference", "count_parameters") + FISH,
}
EXPECTED = {"02_training_vs_inference": 9}
