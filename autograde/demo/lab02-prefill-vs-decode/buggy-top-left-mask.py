"""Demo student: naive attention aligns the causal mask top-left."""

DESCRIPTION = (
    "naive_attention builds the causal mask with tril() from the top-left corner, which is right only when "
    "q_len == kv_len: the last 3 of 10 tokens (and a decode query) see too few keys. Loses both naive "
    "attention cells, expected 10/14"
)
BASE = "solution"
ANSWERS = {
    "naive_attention": '''
def naive_attention(q, k, v, scale=None):
    """Causal grouped-query attention from the formula, with the full score matrix."""
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    group_size = num_q_heads // num_kv_heads
    keys = k.repeat_interleave(group_size, dim=1)
    values = v.repeat_interleave(group_size, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, keys) * scale
    visible = torch.ones(q_len, kv_len, dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", weights, values)
''',
}
EXPECTED = {"02_prefill": 10}
