"""Demo student: naive attention always scales by 1/sqrt(head_dim), whatever scale it is given."""

DESCRIPTION = (
    "naive_attention ignores its scale argument and always multiplies the scores by 1 / sqrt(head_dim), the "
    "default: right whenever scale is None. The visible tests now pass scale=0.5, with a hint that names the "
    "argument: loses both naive_attention cells (4 points), expected 10/14"
)
BASE = "solution"
ANSWERS = {
    "naive_attention": '''
def naive_attention(q, k, v, scale=None):
    """Causal grouped-query attention from the formula, with the full score matrix."""
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    scale = 1.0 / math.sqrt(head_dim)
    group_size = num_q_heads // num_kv_heads
    keys = k.repeat_interleave(group_size, dim=1)
    values = v.repeat_interleave(group_size, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, keys) * scale
    query_positions = torch.arange(kv_len - q_len, kv_len)
    key_positions = torch.arange(kv_len)
    visible = key_positions[None, :] <= query_positions[:, None]
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", weights, values)
''',
}
EXPECTED = {"02_prefill": 10}
