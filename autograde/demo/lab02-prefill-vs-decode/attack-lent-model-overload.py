"""Demo student: asks the model the check lends it for far more work than greedy decoding needs (03_decode)."""

from autograde.demos import solution_cell

LAB = "lab02-prefill-vs-decode"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Its generate first calls the model the check lends it (which runs in the grader, where the check "
    "counts its calls) with 6,000 tokens, then with 100,000 logits_indices, before decoding honestly. "
    "The old grader ran both, costing it gigabytes and minutes; now a lent model refuses arguments past "
    "what a check needs (1,024 tokens a call, one logits row per token) as a ValueError in the student's "
    "code, which catches it and goes on; the refused calls never run or count; expected 17/17"
)
BASE = "solution"
OVERLOAD = '''
import torch

_honest_generate = generate


def generate(model, config, prompt_ids, max_new_tokens):
    for attempt in (lambda: model(torch.zeros(6000, dtype=torch.long)),
                    lambda: model(torch.tensor(prompt_ids), logits_indices=torch.arange(100_000))):
        try:
            attempt()
        except ValueError as refused:
            print("the lent model refused:", str(refused)[:80])
    return _honest_generate(model, config, prompt_ids, max_new_tokens)
'''
ANSWERS = {"generate": _solution("03_decode", "generate") + "\n" + OVERLOAD}
EXPECTED = {"03_decode": 17}
