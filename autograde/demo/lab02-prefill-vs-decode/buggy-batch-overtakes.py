"""Demo student: without chunking, a shorter prompt overtakes one that does not fit."""

DESCRIPTION = (
    "build_batch without chunking skips a prompt that does not fit and goes on to the next one (continue "
    "instead of break), so a short prompt jumps the queue past a long one, which could then wait forever: "
    "the rule the chapter stresses. The worked example's third prompt R shows it in the visible cell: loses "
    "both build_batch cells (the engine cells only run prompts that fit in order), expected 12/16"
)
BASE = "solution"
ANSWERS = {
    "build_batch": '''
def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    """Fill one engine step: every decode first, then prompt tokens in queue order."""
    if len(decode_ids) > token_budget:
        raise ValueError(f"{len(decode_ids)} decodes do not fit in token_budget={token_budget}")
    batch = [(request_id, 1) for request_id in decode_ids]
    budget_left = token_budget - len(decode_ids)
    for request_id, num_tokens_left in prefill_queue:
        if budget_left == 0:
            break
        if not chunked and num_tokens_left > budget_left:
            continue  # try the next prompt: it may fit
        num_tokens = min(num_tokens_left, budget_left)
        batch.append((request_id, num_tokens))
        budget_left -= num_tokens
    return batch
''',
}
EXPECTED = {"05_beyond_the_basics": 12}
