"""Demo student: a rejected draft is emitted too, before the token drawn from the residual."""

DESCRIPTION = (
    "verify_draft appends each draft before testing it, so at the first rejection the rejected draft "
    "stays in the output, followed by its replacement: one token too many, and one the target "
    "rejected. Loses both verify_draft cells, expected 6/10"
)
BASE = "solution"
ANSWERS = {
    "verify": '''
def verify_draft(draft_token_ids, draft_probs, target_probs, accept_uniforms, sample_uniform):
    """Speculative sampling: the tokens one round emits."""
    keep = acceptance_probabilities(draft_token_ids, draft_probs, target_probs)
    emitted = []
    for i, token in enumerate(draft_token_ids):
        emitted.append(int(token))
        if float(accept_uniforms[i]) < float(keep[i]):
            continue
        emitted.append(sample_with_uniform(residual_distribution(target_probs[i], draft_probs[i]), sample_uniform))
        return emitted
    emitted.append(sample_with_uniform(target_probs[len(draft_token_ids)], sample_uniform))
    return emitted
''',
}
EXPECTED = {"03_speculative_sampling": 6}
