"""Demo student: the expected tokens per round forget the token every round emits after its kept drafts."""

DESCRIPTION = (
    "expected_tokens_per_step sums 1 + alpha + ... + alpha^(k-1) = (1 - alpha^k) / (1 - alpha), "
    "forgetting that a round always ends with one more token (the correction or the bonus). Loses "
    "the expected-tokens cell, expected 4/7"
)
BASE = "solution"
ANSWERS = {
    "expected_tokens": '''
def expected_tokens_per_step(acceptance_rate, num_draft_tokens):
    """Mean tokens one round emits."""
    if acceptance_rate == 1:
        return float(num_draft_tokens)
    return (1 - acceptance_rate ** num_draft_tokens) / (1 - acceptance_rate)


def speculative_speedup(acceptance_rate, num_draft_tokens, draft_cost, verify_cost=1.0):
    """Tokens per unit of time relative to plain decoding."""
    return expected_tokens_per_step(acceptance_rate, num_draft_tokens) / (num_draft_tokens * draft_cost + verify_cost)
''',
}
EXPECTED = {"04_drafts": 4}
