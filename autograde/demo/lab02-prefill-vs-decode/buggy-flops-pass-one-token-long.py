"""Demo student: pass k counted over prompt_len + k tokens, one more than it runs."""

DESCRIPTION = (
    "generation_flops takes n = prompt_len + k for pass k instead of prompt_len + k - 1, as if the first pass "
    "already held the first new token: every pass is one token too long. The hint used to describe another bug "
    "(the n * n count); it now names this one: loses test_generation_flops (3 points), expected 8/11"
)
BASE = "solution"
ANSWERS = {
    "generation_flops": '''
def generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache):
    """FLOPs to generate `new_tokens` tokens: 2 per parameter per token run, plus attention."""
    flops_per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    total = 0
    for k in range(1, new_tokens + 1):
        n = prompt_len + k
        if use_cache and k > 1:
            total += 2 * num_parameters + flops_per_key * n
        else:
            total += 2 * num_parameters * n + flops_per_key * n * (n + 1) // 2
    return total
''',
}
EXPECTED = {"01_autoregression": 8}
