"""Demo student: commit_verified never gives back the slots of rejected drafts."""

DESCRIPTION = (
    "commit_verified appends the right tokens and counts the computed ones, but frees no slot: the "
    "rejected drafts' KV slots stay reserved and the pool leaks until the request ends. Loses both "
    "commit_verified cells, expected 2/7"
)
BASE = "solution"
ANSWERS = {
    "commit_verified": '''
def commit_verified(num_computed_tokens, draft_token_ids, num_accepted, next_token_id):
    """Turn one request's verification result into new tokens and slots to give back."""
    new_token_ids = list(draft_token_ids[:num_accepted]) + [next_token_id]
    return new_token_ids, num_computed_tokens + 1 + num_accepted, 0
''',
}
EXPECTED = {"05_speculative_engine": 2}
