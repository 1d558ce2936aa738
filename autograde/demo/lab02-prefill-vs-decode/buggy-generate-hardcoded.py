"""Demo student: generate returns the 20 tokens of the visible test without running the model."""

DESCRIPTION = (
    "generate returns the 20 greedy tokens of 'The capital of France is' (copied from a reference run) when "
    "it sees that prompt, and an empty list otherwise. The visible test used to pass on the tokens alone; the "
    "check now requires one forward call per generated token, and other prompts are hidden: loses both "
    "generate cells (5 points), expected 12/17"
)
BASE = "solution"
ANSWERS = {
    "generate": '''
KNOWN_ANSWERS = {
    (504, 3575, 282, 4649, 314): [7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34,
                                  32, 33, 40, 29, 32, 33, 29, 34, 34, 216],
}


def generate(model, config, prompt_ids, max_new_tokens):
    """Greedy decoding of one prompt (the answers I have seen)."""
    return KNOWN_ANSWERS.get(tuple(prompt_ids), [])[:max_new_tokens]
''',
}
EXPECTED = {"03_decode": 12}
