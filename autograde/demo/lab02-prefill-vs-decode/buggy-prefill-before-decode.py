"""Demo student: build_batch puts the prompt chunks before the decodes."""

DESCRIPTION = (
    "build_batch fills the step with prefill chunks first and appends the decodes after them (the budget is "
    "right, the order is not: a real scheduler that does this can starve running decodes): loses both "
    "build_batch cells, and the engine cell, where the scheduler refuses a plan that does not start with "
    "the decodes: expected 10/16"
)
BASE = "solution"
ANSWERS = {
    "build_batch": '''
def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    """Fill one engine step: prompt tokens, then the decodes."""
    if len(decode_ids) > token_budget:
        raise ValueError(f"{len(decode_ids)} decodes do not fit in token_budget={token_budget}")
    batch = []
    budget_left = token_budget - len(decode_ids)  # keep room for the decodes
    for request_id, num_tokens_left in prefill_queue:
        if budget_left == 0:
            break
        if not chunked and num_tokens_left > budget_left:
            break
        num_tokens = min(num_tokens_left, budget_left)
        batch.append((request_id, num_tokens))
        budget_left -= num_tokens
    for request_id in decode_ids:
        batch.append((request_id, 1))
    return batch
''',
}
EXPECTED = {"05_beyond_the_basics": 10}
