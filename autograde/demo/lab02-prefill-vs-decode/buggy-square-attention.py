"""Demo student: every token of a pass attends over all n keys (no causal mask in the count)."""

DESCRIPTION = (
    "generation_flops counts n * n attended keys for a pass over n tokens instead of n * (n + 1) / 2, as if "
    "attention had no causal mask; the weights term and the decode steps are right: loses "
    "test_generation_flops (3 points), expected 8/11"
)
BASE = "solution"
ANSWERS = {
    "generation_flops": '''
def generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache):
    """FLOPs to generate `new_tokens` tokens: 2 per parameter per token run, plus attention."""
    flops_per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    total = 0
    for k in range(1, new_tokens + 1):
        n = prompt_len + k - 1
        if use_cache and k > 1:
            total += 2 * num_parameters + flops_per_key * n
        else:
            total += 2 * num_parameters * n + flops_per_key * n * n
    return total
''',
}
EXPECTED = {"01_autoregression": 8}
