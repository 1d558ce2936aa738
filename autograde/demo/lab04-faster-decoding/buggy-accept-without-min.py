"""Demo student: acceptance probabilities are p / q without the min(1, ...)."""

DESCRIPTION = (
    "acceptance_probabilities returns p / q, which exceeds 1 wherever the target likes a draft more "
    "than the drafter. verify_draft still emits the right tokens (u < p/q decides like u < min(1, p/q)), "
    "so only the acceptance cell is lost, expected 8/10"
)
BASE = "solution"
ANSWERS = {
    "acceptance_probabilities": '''
def acceptance_probabilities(draft_token_ids, draft_probs, target_probs):
    """The chance each draft is kept."""
    rows = torch.arange(len(draft_token_ids))
    tokens = torch.tensor(draft_token_ids, dtype=torch.long)
    p = target_probs[rows, tokens]
    q = draft_probs[rows, tokens]
    return p / q
''',
}
EXPECTED = {"03_speculative_sampling": 8}
