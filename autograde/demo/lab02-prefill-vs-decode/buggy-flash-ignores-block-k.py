"""Demo student: flash_attention ignores block_k: a plain softmax over whole rows of keys, per block of queries."""

DESCRIPTION = (
    "flash_attention tiles the queries (block_q) but computes each block's scores against ALL keys at once "
    "and takes an ordinary softmax: right answers, no online softmax, block_k never used, a score matrix of "
    "block_q x kv_len per head. It passed every flash test before (7 points); the checks now require the "
    "result to depend on block_k in its last bits, as tile-by-tile sums do, and (locally) no full-row score "
    "tensor: loses the three flash_attention cells, expected 7/14"
)
BASE = "solution"
ANSWERS = {
    "flash_attention": '''
def flash_attention(q, k, v, block_q=64, block_k=64, scale=None):
    """Causal grouped-query attention, one block of queries at a time."""
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    group_size = num_q_heads // num_kv_heads
    queries = q.transpose(0, 1)
    keys = k.repeat_interleave(group_size, dim=1).transpose(0, 1)
    values = v.repeat_interleave(group_size, dim=1).transpose(0, 1)
    offset = kv_len - q_len
    output = torch.empty_like(queries)
    for q_start in range(0, q_len, block_q):
        q_end = min(q_start + block_q, q_len)
        scores = queries[:, q_start:q_end] @ keys.transpose(1, 2) * scale       # [heads, rows, kv_len]
        visible = torch.arange(kv_len)[None, :] <= torch.arange(offset + q_start, offset + q_end)[:, None]
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        output[:, q_start:q_end] = weights @ values
    return output.transpose(0, 1)
''',
}
EXPECTED = {"02_prefill": 7}
