"""Demo student: after a rejection the replacement is drawn from p instead of the residual max(p - q, 0)."""

DESCRIPTION = (
    "verify_draft draws the token after a rejection from the target's row p_i instead of the residual: "
    "tokens the drafter likes come out too often (the chi-square test catches it). Loses both "
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
        emitted.append(sample_with_uniform(target_probs[i], sample_uniform))
        return emitted
    emitted.append(sample_with_uniform(target_probs[len(draft_token_ids)], sample_uniform))
    return emitted
''',
}
EXPECTED = {"03_speculative_sampling": 6}
