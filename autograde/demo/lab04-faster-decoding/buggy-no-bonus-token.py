"""Demo student: when every draft is kept, no bonus token is drawn from the last row."""

DESCRIPTION = (
    "verify_draft returns only the k drafts when all of them are kept, wasting the target's last row: "
    "the distribution stays right but every fully accepted round loses a token. Loses both "
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
    if not emitted:
        emitted.append(sample_with_uniform(target_probs[0], sample_uniform))
    return emitted
''',
}
EXPECTED = {"03_speculative_sampling": 6}
