"""Demo student: a draft is kept when its uniform is <= the acceptance probability, not strictly below it."""

DESCRIPTION = (
    "verify_draft keeps draft i when accept_uniforms[i] <= its acceptance probability. With uniforms in "
    "[0, 1) that changes nothing but one case: a draft the target gives probability 0 is kept when its "
    "uniform is 0, so a token the target never emits comes out. Loses both verify_draft cells, expected 6/10"
)
BASE = "solution"
ANSWERS = {
    "verify": '''
def verify_draft(draft_token_ids, draft_probs, target_probs, accept_uniforms, sample_uniform):
    """Speculative sampling: the tokens one round emits."""
    keep = acceptance_probabilities(draft_token_ids, draft_probs, target_probs)
    emitted = []
    for i, token in enumerate(draft_token_ids):
        if float(accept_uniforms[i]) <= float(keep[i]):
            emitted.append(int(token))
            continue
        emitted.append(sample_with_uniform(residual_distribution(target_probs[i], draft_probs[i]), sample_uniform))
        return emitted
    emitted.append(sample_with_uniform(target_probs[len(draft_token_ids)], sample_uniform))
    return emitted
''',
}
EXPECTED = {"03_speculative_sampling": 6}
