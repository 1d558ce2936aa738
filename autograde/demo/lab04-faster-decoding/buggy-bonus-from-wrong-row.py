"""Demo student: when every draft is kept, the bonus token is drawn from row k - 1 instead of row k."""

DESCRIPTION = (
    "verify_draft draws the bonus token from target_probs[k - 1], the row that judged the last draft, "
    "instead of target_probs[k], the target's distribution after all the drafts. Loses both "
    "verify_draft cells, expected 6/10"
)
BASE = "solution"
ANSWERS = {
    "verify": '''
def verify_draft(draft_token_ids, draft_probs, target_probs, accept_uniforms, sample_uniform):
    """Speculative sampling: the tokens one round emits."""
    keep = acceptance_probabilities(draft_token_ids, draft_probs, target_probs)
    emitted = []
    for i, token in enumerate(draft_token_ids):
        if float(accept_uniforms[i]) < float(keep[i]):
            emitted.append(int(token))
            continue
        emitted.append(sample_with_uniform(residual_distribution(target_probs[i], draft_probs[i]), sample_uniform))
        return emitted
    emitted.append(sample_with_uniform(target_probs[max(len(draft_token_ids) - 1, 0)], sample_uniform))
    return emitted
''',
}
EXPECTED = {"03_speculative_sampling": 6}
